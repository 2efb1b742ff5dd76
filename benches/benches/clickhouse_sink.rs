//! ClickHouse exactly-once sink throughput in simulation: `benches/scenarios/clickhouse-sink.toml`
//! (20,000 JSON records in 3 partitions through a batching producer, `linger.ms` 5, 5
//! requests in flight, no pause between sends; 3 brokers, two Connect workers running one
//! sink task each, batches of 200, and the clickhouse and keeper nodes; no faults), for the
//! `seed` and the `seed+token+fencing` variants (the latter adds a KeeperMap read and
//! conditional writes per batch).
//!
//! Reports rows per wall second (criterion's throughput: every run delivers each record to
//! the table once). Run with `cargo xtask bench` (it builds with `--cfg madsim`).

#[cfg(madsim)]
mod bench {
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim::scenario::Scenario;
    use eosim_benches::{bench_scenario, run_unstalled};

    /// The `seed` variant's file, with `variant` set over it for the others.
    fn scenario(variant: &str) -> Scenario {
        bench_scenario(
            "clickhouse-sink.toml",
            &[("sink", "variant", variant.into())],
        )
    }

    fn sink_rows(c: &mut Criterion) {
        let mut group = c.benchmark_group("clickhouse_sink");
        group.sample_size(10);
        for variant in ["seed", "seed+token+fencing"] {
            let s = scenario(variant);
            group.throughput(Throughput::Elements(s.workload.records));
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
