//! ClickHouse exactly-once sink throughput in simulation: 20,000 JSON records in 3
//! partitions through a batching producer (`linger.ms` 5, 5 requests in flight, no pause
//! between sends), 3 brokers, two Connect workers running one sink task
//! each (batches of 200) and the clickhouse and keeper nodes, without faults, for the `seed` and the
//! `seed+token+fencing` variants (the latter adds a KeeperMap read and conditional writes
//! per batch).
//!
//! Reports rows per wall second (criterion's throughput: every run delivers each record to
//! the table once). Run with `cargo xtask bench` (it builds with `--cfg madsim`).

#[cfg(madsim)]
mod bench {
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim::scenario::Scenario;
    use eosim_benches::run_unstalled;
    use std::path::Path;

    const RECORDS: u64 = 20_000;

    fn scenario(variant: &str) -> Scenario {
        let text = format!(
            r#"
            name = "bench-clickhouse-sink"
            pipeline = "clickhouse-sink"
            claim = "exactly-once"
            [topic]
            partitions = 3
            [workload]
            records = {RECORDS}
            produce_interval_ms = 0
            "linger.ms" = 5
            "max.in.flight.requests.per.connection" = 5
            [sink]
            variant = "{variant}"
            tasks = 2
            batch_records_max = 200
            non_replicated_deduplication_window = 100
            [faults]
            until_ms = 1000
            "#
        );
        Scenario::parse(Path::new("bench.toml"), &text).expect("bench scenario parses")
    }

    fn sink_rows(c: &mut Criterion) {
        let mut group = c.benchmark_group("clickhouse_sink");
        group.sample_size(10);
        group.throughput(Throughput::Elements(RECORDS));
        for variant in ["seed", "seed+token+fencing"] {
            let s = scenario(variant);
            let mut seed = 0;
            group.bench_function(variant, |b| {
                b.iter(|| {
                    seed += 1;
                    run_unstalled(&s, seed)
                })
            });
        }
        group.finish();
    }

    criterion_group!(benches, sink_rows);
}

#[cfg(madsim)]
criterion::criterion_main!(bench::benches);

#[cfg(not(madsim))]
fn main() {
    eprintln!("the clickhouse_sink bench runs in simulation: use `cargo xtask bench`");
}
