//! A fixed pool of worker threads over a list of items, for `eosim sim --jobs N`.
//!
//! Each item's work runs on one of `jobs` threads (each simulation still gets its own fresh
//! OS thread inside `crate::runner::run_seed`); results come back to the calling thread,
//! which handles them one at a time in the order they finish. Nothing about an item's work
//! depends on which thread ran it or when: every piece of state a simulation touches is
//! per-thread (coverage marks, fault effects, the network's fault tables), so results are
//! the same for any `jobs`; only their arrival order differs, and callers must not depend
//! on it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Runs `work(job, item)` for every item on `jobs` threads (at least 1, at most one per
/// item), taking items in list order, and calls `done(index, result)` on this thread as
/// each finishes. Returns once every item is done. A panic in `work` ends the pool and is
/// raised again here once the other threads have stopped.
pub fn run_pool<T, R>(
    items: &[T],
    jobs: usize,
    work: impl Fn(usize, &T) -> R + Sync,
    mut done: impl FnMut(usize, R),
) where
    T: Sync,
    R: Send,
{
    let jobs = jobs.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for job in 0..jobs {
            let (tx, next, work) = (tx.clone(), &next, &work);
            let spawned = std::thread::Builder::new()
                .name(format!("eosim-job-{job}"))
                .spawn_scoped(scope, move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    if tx.send((i, work(job, item))).is_err() {
                        break;
                    }
                });
            spawned.expect("spawn a job thread");
        }
        drop(tx);
        for (i, result) in rx {
            done(i, result);
        }
    });
}

/// `--jobs` when not given: the machine's cores (1 when unknown).
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_done_once_whatever_the_jobs() {
        let items: Vec<u64> = (0..37).collect();
        for jobs in [1, 2, 5, 100] {
            let mut seen = vec![0u32; items.len()];
            let mut sum = 0;
            run_pool(
                &items,
                jobs,
                |_, x| x * x,
                |i, r| {
                    seen[i] += 1;
                    sum += r;
                },
            );
            assert!(seen.iter().all(|&n| n == 1), "jobs={jobs}: {seen:?}");
            assert_eq!(sum, items.iter().map(|x| x * x).sum::<u64>());
        }
    }

    #[test]
    fn two_jobs_run_two_items_at_once() {
        // Each item waits for the other at a barrier: with one thread this would never end.
        let items = [0u8; 2];
        let barrier = std::sync::Barrier::new(2);
        let mut jobs = std::collections::BTreeSet::new();
        run_pool(
            &items,
            2,
            |job, _| {
                barrier.wait();
                job
            },
            |_, job| {
                jobs.insert(job);
            },
        );
        assert_eq!(jobs.len(), 2, "{jobs:?}");
    }
}
