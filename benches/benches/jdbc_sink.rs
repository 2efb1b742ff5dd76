//! Change events per wall second through the Connect worker, the JDBC sink and the
//! PostgreSQL model: `benches/scenarios/jdbc-sink.toml` (20,000 generated Debezium
//! envelopes, 20 keys, 3 partitions, upsert, batch.size 500, produced by a batching
//! producer, `linger.ms` 5, no pause between sends, consumed by 3 tasks on 2 workers and
//! applied, no faults), then the drain and the checkers' input (the final state), all in one
//! madsim runtime per run.
//!
//! Reports events per wall second (criterion's throughput) and prints simulated seconds per
//! wall second. Run with `cargo xtask bench` (it builds with `--cfg madsim`).

#[cfg(madsim)]
mod bench {
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim::runner::run_seed;
    use eosim::scenario::Scenario;
    use eosim_benches::bench_scenario;
    use std::time::{Duration, Instant};

    /// One run; returns (wall time, simulated time).
    fn run_once(scenario: &Scenario, seed: u64) -> (Duration, Duration) {
        let wall = Instant::now();
        let outcome = run_seed(scenario, seed);
        assert_eq!(outcome.stalled, None, "the bench pipeline must drain");
        (wall.elapsed(), Duration::from_millis(outcome.sim_time_ms))
    }

    fn jdbc_sink(c: &mut Criterion) {
        let scenario = bench_scenario("jdbc-sink.toml", &[]);
        let events = scenario.cdc.generate.as_ref().map_or(0, |g| g.events);
        let (wall, sim) = run_once(&scenario, 1);
        println!(
            "jdbc_sink: {events} change events in {:.3} s wall, {:.1} s simulated: \
             {:.0} events/s, {:.0} simulated s per wall s",
            wall.as_secs_f64(),
            sim.as_secs_f64(),
            events as f64 / wall.as_secs_f64(),
            sim.as_secs_f64() / wall.as_secs_f64()
        );
        let mut group = c.benchmark_group("jdbc_sink");
        group.sample_size(10);
        group.throughput(Throughput::Elements(events));
        group.bench_function("connect_jdbc_20k_events_3_partitions_upsert", |b| {
            b.iter_custom(|iters| (0..iters).map(|i| run_once(&scenario, i + 1).0).sum())
        });
        group.finish();
    }

    criterion_group!(benches, jdbc_sink);
}

#[cfg(madsim)]
criterion::criterion_main!(bench::benches);

#[cfg(not(madsim))]
fn main() {
    eprintln!("the jdbc_sink bench needs --cfg madsim: run `cargo xtask bench`");
}
