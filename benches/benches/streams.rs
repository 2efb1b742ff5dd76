//! Streams throughput: input records per wall second through the Streams processor
//! (pipeline `streams-count`, the seed's per-key count in 5-second windows,
//! `benches/scenarios/streams.toml`) in simulation,
//! under each `processing.guarantee`, and under exactly_once_v2 with one standby replica per
//! task (`num.standby.replicas = 1`: every instance also follows the other's changelogs):
//! 3 brokers, 3 partitions (replication 3), 2 instances, no faults, the whole run (produce,
//! process, commit, drain, final read) in one madsim runtime per iteration. The input
//! producer is unpaced and batches (`linger.ms` 5, 5 in flight), so the figure is the
//! Streams instances' own throughput, their producers batching as Streams' do
//! (`linger.ms` 100, `streams::collector`).
//!
//! Reports input records per wall second (criterion's throughput) and prints simulated
//! seconds per wall second. Run with `cargo xtask bench` (it builds with `--cfg madsim`).

#[cfg(madsim)]
mod bench {
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim::runner::run_seed;
    use eosim::scenario::Scenario;
    use eosim_benches::bench_scenario;
    use std::time::{Duration, Instant};

    /// Bench cases: name, `processing.guarantee`, `num.standby.replicas`.
    const CASES: [(&str, &str, u32); 3] = [
        ("at_least_once", "at_least_once", 0),
        ("exactly_once_v2", "exactly_once_v2", 0),
        ("exactly_once_v2+standby", "exactly_once_v2", 1),
    ];

    /// The case's scenario: `benches/scenarios/streams.toml` (exactly_once_v2, no standby,
    /// the record cache off so the figures stay comparable with the baseline measured before
    /// it) with the case's guarantee and standbys set over it.
    fn scenario(guarantee: &str, standbys: u32) -> Scenario {
        bench_scenario(
            "streams.toml",
            &[
                ("streams", "processing_guarantee", guarantee.into()),
                (
                    "streams",
                    "num_standby_replicas",
                    i64::from(standbys).into(),
                ),
            ],
        )
    }

    fn streams(c: &mut Criterion) {
        let mut group = c.benchmark_group("streams");
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(30));
        for (name, guarantee, standbys) in CASES {
            let s = scenario(guarantee, standbys);
            group.throughput(Throughput::Elements(s.workload.records));
            let wall = Instant::now();
            let outcome = run_seed(&s, 1);
            assert_eq!(outcome.stalled, None, "{name}: the bench run stalled");
            let ratio = outcome.sim_time_ms as f64 / 1e3 / wall.elapsed().as_secs_f64();
            println!("streams {name}: {ratio:.1} simulated s per wall s");
            group.bench_function(name, |b| b.iter(|| run_seed(&s, 1)));
        }
        group.finish();
    }

    criterion_group!(benches, streams);
}

#[cfg(madsim)]
criterion::criterion_main!(bench::benches);

#[cfg(not(madsim))]
fn main() {
    eprintln!("the streams bench needs --cfg madsim: run `cargo xtask bench`");
}
