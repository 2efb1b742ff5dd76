//! The restore consumer: reads one changelog partition from an offset to its end over the
//! network (Fetch at the partition leader), read_committed under exactly_once_v2 (so
//! aborted changelog writes are never restored) and read_uncommitted otherwise.
//!
//! The end is the log end offset as read_uncommitted lists it (the HW), taken when the
//! restore starts, as Streams' `StoreChangelogReader` does since KAFKA-10167: a
//! read_committed position only passes an open transaction once it ended, so a restore
//! waits out a hanging transaction (until it is aborted by its transaction timeout or by
//! its producer's fencing) instead of stopping at the LSO and missing what other producers
//! committed after it.

use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::drop_aborted;
use crate::streams::store::{changelog_entry, KeyValueStore};
use eosim_sim::kafka::{Isolation, Offset, Request, Response, TopicPartition};
use std::time::Duration;

/// Attempts before a restore gives up (the task is then retried on the next poll).
const RESTORE_ATTEMPTS_MAX: u32 = 40;
/// Pause before fetching again when a fetch made no progress (an open transaction), ms.
const RESTORE_WAIT_MS: u64 = 100;

pub use super::processor::Restored;

/// Replays changelog partition `tp` from `from` into `store` (last value per key wins).
///
/// # Errors
/// A text when the partition stayed unreadable for `RESTORE_ATTEMPTS_MAX` attempts.
pub async fn restore(
    conn: &Connection,
    tp: &TopicPartition,
    from: Offset,
    isolation: Isolation,
    store: &mut KeyValueStore,
) -> Result<Restored, String> {
    let mut restored = Restored {
        records: 0,
        end_offset: from,
    };
    let mut failures = 0;
    let mut target = None;
    loop {
        match restore_step(conn, tp, restored.end_offset, isolation, store).await {
            Ok(step) => {
                restored.records += step.records;
                let progressed = step.end_offset > restored.end_offset;
                restored.end_offset = step.end_offset;
                if restored.end_offset >= *target.get_or_insert(step.log_end_offset) {
                    return Ok(restored);
                }
                if !progressed {
                    // Behind an open transaction: wait for it to end, as a poll would.
                    madsim::time::sleep(Duration::from_millis(RESTORE_WAIT_MS)).await;
                }
            }
            Err(e) => {
                failures += 1;
                if failures >= RESTORE_ATTEMPTS_MAX {
                    return Err(format!("restore of {tp}: {e}"));
                }
                let _ = conn
                    .refresh_metadata(&[tp.topic.to_string()], Duration::from_secs(5))
                    .await;
                madsim::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// What one fetch of [`restore_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Changelog records applied.
    pub records: usize,
    /// The changelog offset the store is now complete up to.
    pub end_offset: Offset,
    /// The partition's log end offset (HW) as the fetch answered it.
    pub log_end_offset: Offset,
}

/// One fetch of changelog partition `tp` from `from` into `store`: what a standby task does
/// per loop of its stream thread, and a restore repeats until caught up.
///
/// # Errors
/// A text when the leader is unknown, the request fails or the partition answers an error.
pub async fn restore_step(
    conn: &Connection,
    tp: &TopicPartition,
    from: Offset,
    isolation: Isolation,
    store: &mut KeyValueStore,
) -> Result<Step, String> {
    let (batch, next, log_end_offset) = fetch_once(conn, tp, from, isolation).await?;
    let records = batch.len();
    for (key, count) in batch {
        store.put(key, count);
    }
    Ok(Step {
        records,
        end_offset: from.max(next),
        log_end_offset,
    })
}

type Batch = (Vec<(String, u64)>, Offset, Offset);

/// One fetch: the (key, count) pairs, the next fetch offset and the HW.
async fn fetch_once(
    conn: &Connection,
    tp: &TopicPartition,
    offset: Offset,
    isolation: Isolation,
) -> Result<Batch, String> {
    let leader = match conn.leader(tp) {
        Some(l) => l,
        None => {
            conn.refresh_metadata(&[tp.topic.to_string()], Duration::from_secs(5))
                .await
                .map_err(|e| e.to_string())?;
            conn.leader(tp)
                .ok_or_else(|| format!("{tp} has no leader"))?
        }
    };
    let request = Request::Fetch {
        isolation,
        partitions: vec![(tp.clone(), offset)],
        max_bytes: 1_048_576,
        partition_max_bytes: 1_048_576,
        min_bytes: 1,
        max_wait_ms: 0,
        current_leader_epochs: Vec::new(),
    };
    let response = conn
        .request(leader, request, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    let Response::Fetch { partitions } = response else {
        return Err(format!("{tp}: unexpected answer {response:?}"));
    };
    let (_, part) = partitions
        .into_iter()
        .next()
        .ok_or("empty fetch response")?;
    if let Some(e) = part.error {
        conn.invalidate(&tp.topic);
        return Err(format!("{tp}: {e}"));
    }
    let kept = drop_aborted(part.records, &part.aborted);
    let batch = kept
        .into_iter()
        .filter(|r| r.offset >= offset)
        .filter_map(|r| changelog_entry(r.record.key.as_deref(), r.record.value.as_deref()))
        .collect();
    Ok((batch, part.next_fetch_offset, part.high_watermark))
}
