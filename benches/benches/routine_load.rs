//! Doris Routine Load throughput in simulation: `benches/scenarios/routine-load.toml`
//! (20,000 clicklog JSON records in 3 partitions through a batching producer, `linger.ms` 5,
//! 5 requests in flight, and 3 brokers into a `DUPLICATE KEY` table, loaded by one Routine
//! Load job, `desired_concurrent_number` 3, `max_batch_rows` 200, so 5 tasks per partition,
//! each one transaction committing the partition's next offset with the rows; no faults).
//!
//! Reports rows per wall second (criterion's throughput: every run loads each record once),
//! and prints once the rows per *simulated* second of a run beside the seed document's real
//! figure (`SHOW ROUTINE LOAD`'s `loadRowsRate` of 23,000 rows/s for 50,000,000 records,
//! `../shared/seeds/004_*`). The two measure different things: the seed's is real Doris on its
//! hardware over the tasks' execution time; the model's depends on its modelled latencies and
//! the job's batching, and the run's simulated time includes the produce and the drain.
//! Sending one record per Produce request and awaiting each (about 17 simulated ms), 3,000
//! records took some 56 simulated s; batched, about 3 (measured 2026-12-03). Run with
//! `cargo xtask bench` (it builds with `--cfg madsim`).

#[cfg(madsim)]
mod bench {
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim_benches::{bench_scenario, run_unstalled};

    /// `SHOW ROUTINE LOAD`'s `loadRowsRate` in the seed document, rows/s.
    const SEED_LOAD_ROWS_RATE: u64 = 23_000;

    fn routine_load(c: &mut Criterion) {
        let s = bench_scenario("routine-load.toml", &[]);
        let records = s.workload.records;
        let sim_s = run_unstalled(&s, 0) as f64 / 1000.0;
        eprintln!(
            "routine_load: {records} rows in {sim_s:.1} simulated s = {:.0} rows per simulated \
             second (produce and drain included); the seed's real Doris: loadRowsRate \
             {SEED_LOAD_ROWS_RATE} rows/s",
            records as f64 / sim_s
        );
        let mut group = c.benchmark_group("routine_load");
        group.sample_size(10);
        group.throughput(Throughput::Elements(records));
        let mut seed = 0;
        group.bench_function("duplicate_key_3_partitions", |b| {
            b.iter(|| {
                seed += 1;
                run_unstalled(&s, seed)
            })
        });
        group.finish();
    }

    criterion_group!(benches, routine_load);
}

#[cfg(madsim)]
criterion::criterion_main!(bench::benches);

#[cfg(not(madsim))]
fn main() {
    eprintln!("the routine_load bench runs in simulation: use `cargo xtask bench`");
}
