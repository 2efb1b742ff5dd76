//! The analyses of the Streams stream-table join (`[streams] topology =
//! "stream-table-join"`, `streams::join`), run by [`super::streams_records`] over its
//! [`RecordsAnalysis`]: the stream topic's input (`streams-input`), the table topic read
//! read_committed (`streams-table`: version, key, offset of each update) and the output read
//! read_committed (`streams-records`, values `<stream id>,<version>`).
//!
//! # Analyses
//! 1. [`kept_input_duplicate_cases`] (`sink-duplicate`): a stream id in the output more than
//!    once. Under exactly_once_v2 a replayed stream record's first result was aborted with
//!    its transaction; under at_least_once a crash between the send and the offset commit
//!    sends it again (allowed by an at-least-once claim, forbidden by exactly-once).
//! 2. [`unwritten_table_version_cases`] (`unwritten-table-version`): an output whose table
//!    version is not a committed update of the output's key in the table topic: a version
//!    of an aborted table transaction (read read_uncommitted, Streams' consumer and restore
//!    isolation under at_least_once), of another key, or of no update at all. The inner join
//!    reads only what the table's store holds, and the store holds only updates of the table
//!    topic of that key, so under exactly_once_v2 (read_committed) every joined version is
//!    one.
//! 3. [`unexpected_join_output_cases`] (`unexpected-output`): an output value that is not
//!    `<id>,<version>`, an id of no stream record, or a key other than the stream record's.
//! 4. [`stale_join_cases`] (`stale-join`, informational): an output whose version is older
//!    than a committed update of its key with an event time between the version's and the
//!    stream record's (inclusive of the latter): decidable from the event times both
//!    producers stamp into their values. Under `max.task.idle.ms` = -1 (or without it) a
//!    stream record may be processed before such an update is fetched; a wait longer than
//!    the fetch delay avoids it while nothing fails (a restore reads the table to its end,
//!    and a replay re-applies older updates, so after a crash the table may be stale or
//!    ahead either way). A version newer than the stream record (the table ahead) is not
//!    judged.
//!
//! # Not decided
//! Which stream records must have joined: an inner join outputs a record only when the
//! table held a value for its key at that moment, which depends on when the task applied
//! the table's updates relative to the stream's (no `max.task.idle.ms` synchronisation,
//! `streams::join`); a consumed stream record absent from the output is not reported. For
//! the same reason the checker does not ask which version a record should have joined, only
//! that it joined one that was written and, for `stale-join`, not one already superseded.

use super::streams_records::{case, kept_input_duplicate_cases, Output, RecordsAnalysis};
use super::{Anomaly, Case};
use crate::streams::join::parse_joined;

/// Every analysis of the join, with its anomaly.
pub fn cases(a: &RecordsAnalysis) -> Vec<(Anomaly, Vec<Case>)> {
    vec![
        (Anomaly::SinkDuplicate, kept_input_duplicate_cases(a)),
        (
            Anomaly::UnwrittenTableVersion,
            unwritten_table_version_cases(a),
        ),
        (Anomaly::UnexpectedOutput, unexpected_join_output_cases(a)),
        (Anomaly::StaleJoin, stale_join_cases(a)),
    ]
}

/// A case text naming output `o`'s place and record, then `why`.
fn text(o: &Output, why: &str) -> String {
    let r = &o.record;
    format!("{}@{}: {} -> {} {why}", o.tp, r.offset, r.key, r.value)
}

/// Outputs joined with a version that is not a committed table update of their key.
pub fn unwritten_table_version_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let why = |o: &Output| -> Option<(u64, String)> {
        let (id, version) = parse_joined(&o.record.value)?;
        let Some((tp, update)) = a.table.get(&version) else {
            return Some((
                id,
                format!("joined version {version}, never written (committed)"),
            ));
        };
        (update.key != o.record.key).then(|| {
            let at = format!("{tp}@{}", update.offset);
            (
                id,
                format!(
                    "joined version {version}, an update of {} ({at})",
                    update.key
                ),
            )
        })
    };
    cases_of(a, why)
}

/// One case per output `why` gives the stream id and reason of.
fn cases_of(a: &RecordsAnalysis, why: impl Fn(&Output) -> Option<(u64, String)>) -> Vec<Case> {
    (a.outputs.iter())
        .filter_map(|o| {
            let (id, reason) = why(o)?;
            Some(case(vec![id], &[o], text(o, &reason)))
        })
        .collect()
}

/// Outputs whose joined version `v` of key `k` is older than a committed update `u` of `k`
/// with `time(v) < time(u) <= time(stream record)`: at the stream record's event time the
/// table already held `u`. Outputs of an unknown id or version are left to the other
/// analyses.
pub fn stale_join_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let newer = |o: &Output| -> Option<(u64, String)> {
        let (id, version) = parse_joined(&o.record.value)?;
        let (input, _) = a.inputs.get(&id)?;
        let (_, joined) = a.table.get(&version)?;
        let missed = (a.table.values().map(|(_, u)| u)).find(|u| {
            u.key == o.record.key
                && joined.timestamp_ms < u.timestamp_ms
                && u.timestamp_ms <= input.timestamp_ms
        })?;
        let why = format!(
            "joined version {version} (t={}) of a stream record at t={}, when version {} \
             (t={}) was already the key's",
            joined.timestamp_ms, input.timestamp_ms, missed.id, missed.timestamp_ms
        );
        Some((id, why))
    };
    cases_of(a, newer)
}

/// Outputs no stream record explains: not `<id>,<version>`, an unknown id, another key.
pub fn unexpected_join_output_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let why = |o: &Output| -> Option<String> {
        let Some((id, _)) = parse_joined(&o.record.value) else {
            return Some("is not <stream id>,<version>".into());
        };
        let Some((input, _)) = a.inputs.get(&id) else {
            return Some(format!("names stream id {id}, which no stream record has"));
        };
        (input.key != o.record.key).then(|| {
            format!(
                "has the key of no stream record {id}: its key is {}",
                input.key
            )
        })
    };
    (a.outputs.iter())
        .filter_map(|o| {
            let reason = why(o)?;
            let ids = parse_joined(&o.record.value).map(|(id, _)| id);
            Some(case(ids.into_iter().collect(), &[o], text(o, &reason)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! One test per anomaly with a literal history, and a valid history beside them.
    use super::*;
    use crate::checker::streams_records::StreamsRecordsChecker;
    use crate::checker::test_support::streams_join_history as history;
    use crate::checker::{CheckOptions, CheckResult, Checker, Claim, Validity};
    use crate::history::History;

    fn check(h: &History, claim: Claim) -> CheckResult {
        StreamsRecordsChecker.check(h, &CheckOptions::for_claim(claim))
    }

    /// Stream records (id, key); table updates (version, key), committed.
    const STREAM: [(u64, &str); 3] = [(1, "k1"), (2, "k2"), (3, "k1")];
    const TABLE: [(u64, &str); 3] = [(10, "k1"), (11, "k2"), (12, "k1")];

    #[test]
    fn each_stream_record_joined_once_with_a_written_version_is_valid() {
        // Stream record 1 joined k1's first version, 3 its second; 2 had no table value
        // yet (an inner join drops it), which is not a loss.
        let out = [("k1", "1,10"), ("k1", "3,12")];
        let r = check(&history(&STREAM, &TABLE, &out), Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
        assert_eq!(r.counts["streams-output-records"], 2);
    }

    #[test]
    fn a_stream_record_joined_twice_is_sink_duplicate_allowed_at_least_once() {
        // An at_least_once replay after a crash before the offset commit: record 1 joined
        // again, by then with k1's newer version.
        let out = [("k1", "1,10"), ("k2", "2,11"), ("k1", "1,12")];
        let h = history(&STREAM, &TABLE, &out);
        for (claim, forbidden) in [
            (Claim::ExactlyOnce, vec![Anomaly::SinkDuplicate]),
            (Claim::AtLeastOnce, vec![]),
        ] {
            assert_eq!(check(&h, claim).forbidden, forbidden, "{claim:?}");
        }
    }

    #[test]
    fn an_aborted_version_or_another_key_s_is_unwritten_table_version() {
        // 13 was in an aborted table transaction (absent from the committed table), read by
        // an at_least_once task reading read_uncommitted; 11 is k2's, never k1's. An
        // at-least-once claim reports it without forbidding it.
        for (value, why) in [("1,13", "never written"), ("1,11", "an update of k2")] {
            let h = history(&STREAM, &TABLE, &[("k1", value)]);
            let r = check(&h, Claim::ExactlyOnce);
            assert_eq!(r.forbidden, vec![Anomaly::UnwrittenTableVersion], "{value}");
            assert!(r.case_texts(8)[0].contains(why), "{r:?}");
            let alo = check(&h, Claim::AtLeastOnce);
            assert_eq!(alo.validity, Validity::Valid, "{value}");
            assert!(alo.anomalies.contains_key(&Anomaly::UnwrittenTableVersion));
        }
    }

    #[test]
    fn a_version_superseded_before_the_stream_record_is_stale_join_reported_not_forbidden() {
        // Stream record 3 (t=300) joined k1's version 10 (t=100) although version 12
        // (t=120) was k1's from t=120 on: the task had not applied it yet. Record 1 (t=100)
        // joining version 12 (t=120) has the table ahead, which is not judged.
        let h = history(&STREAM, &TABLE, &[("k1", "3,10"), ("k1", "1,12")]);
        let r = check(&h, Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "informational");
        let stale = &r.anomalies[&Anomaly::StaleJoin];
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert!(
            r.case_texts(8)[0].contains("when version 12 (t=120)"),
            "{r:?}"
        );
        let options = CheckOptions {
            forbidden: vec![Anomaly::StaleJoin],
            ..CheckOptions::for_claim(Claim::ExactlyOnce)
        };
        let r = StreamsRecordsChecker.check(&h, &options);
        assert_eq!(r.forbidden, vec![Anomaly::StaleJoin]);
    }

    #[test]
    fn an_unknown_id_a_wrong_key_or_shape_is_unexpected_output() {
        for out in [("k1", "9,10"), ("k2", "1,11"), ("k1", "1")] {
            let h = history(&STREAM, &TABLE, &[out]);
            let r = check(&h, Claim::AtMostOnce);
            assert_eq!(r.forbidden, vec![Anomaly::UnexpectedOutput], "{out:?}");
        }
    }
}
