//! The predicate and the mapper of the stateless topology (`[streams] topology =
//! "filter-map-values"`, [`super::topology::filter_map_values`]): what `KStream.filter` and
//! `KStream.mapValues` are given. The processor runs them inside the topology; the checker
//! (`checker::streams_records`) recomputes from each input record what the output must hold.
//!
//! Input values are `<id>,<timestamp_ms>` (the `streams-count` producers').

use super::input_id_and_time;

/// The filter divisor: records whose id is a multiple of it are dropped.
pub const FILTER_DROPS_MULTIPLES_OF: u64 = 3;

/// `filter((key, value) -> id % 3 != 0)`: whether the record with value
/// `<id>,<timestamp_ms>` passes. A value whose id does not parse is dropped.
pub fn passes_filter(value: &str) -> bool {
    match input_id_and_time(value).0 {
        u64::MAX => false,
        id => id % FILTER_DROPS_MULTIPLES_OF != 0,
    }
}

/// `mapValues(value -> value + "," + id * id)`: the output value of input id `id` with
/// event time `timestamp_ms`, `<id>,<timestamp_ms>,<id²>` (the square wraps at 2⁶⁴).
pub fn mapped_value(id: u64, timestamp_ms: i64) -> String {
    format!("{id},{timestamp_ms},{}", id.wrapping_mul(id))
}

/// The mapper over an input value: [`mapped_value`] of its id and event time.
pub fn map_value(value: &str) -> String {
    let (id, timestamp_ms) = input_id_and_time(value);
    mapped_value(id, timestamp_ms)
}

/// The input id an output value `<id>,...` carries; `None` when it does not parse.
pub fn output_id(value: &str) -> Option<u64> {
    value.split(',').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_drops_multiples_of_three_and_the_mapper_appends_the_square() {
        assert!(!passes_filter("3,100"));
        assert!(!passes_filter("0,100"));
        assert!(passes_filter("4,100"));
        assert!(!passes_filter("x,100"), "unreadable ids are dropped");
        assert_eq!(map_value("4,100"), "4,100,16");
        assert_eq!(output_id("4,100,16"), Some(4));
        assert_eq!(output_id("k,1"), None);
    }
}
