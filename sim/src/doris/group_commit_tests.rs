//! Tests of group commit: grouping, the interval, sync outcomes, the WAL's replay after
//! a BE restart and its loss in a machine crash, and the loads that bypass grouping.

use super::group_commit::{GroupCommitMode, GROUP_COMMIT_LABEL_PREFIX};
use super::model::{Doris, DorisConfig};
use super::stream_load::{StreamLoad, StreamLoadStatus};
use super::txn::TransactionStatus;
use super::types::{LoadSpec, TableDef};

const INTERVAL_MS: u64 = 1_000;

fn cluster() -> Doris {
    let mut d = Doris::new(DorisConfig {
        group_commit_interval_ms: INTERVAL_MS,
        ..DorisConfig::default()
    });
    d.create_database("db");
    d.create_table("db", TableDef::clicklog()).unwrap();
    d
}

fn load(ids: std::ops::Range<u32>, mode: GroupCommitMode) -> StreamLoad {
    let line = |id| {
        format!(r#"{{"clickTime":"2023-05-01 10:00:00","type":"webset","id":"{id}","user":"u"}}"#)
    };
    StreamLoad {
        db: "db".into(),
        table: "clicklog".into(),
        label: None,
        spec: LoadSpec::default(),
        max_filter_ratio: 0.0,
        two_phase_commit: false,
        group_commit: mode,
        lines: ids.map(line).collect(),
    }
}

fn visible(d: &Doris) -> usize {
    d.select("db", "clicklog").unwrap().len()
}

#[test]
fn loads_share_one_internal_load_that_commits_after_the_interval() {
    let mut d = cluster();
    let a = d.stream_load(0, load(0..2, GroupCommitMode::Async));
    let b = d.stream_load(10, load(2..5, GroupCommitMode::Async));
    assert_eq!(
        (a.status.clone(), b.status.clone()),
        (StreamLoadStatus::Success, StreamLoadStatus::Success)
    );
    assert!(a.group_commit && b.group_commit);
    assert_eq!(a.txn_id, b.txn_id, "both loads join one internal load");
    assert!(
        a.label.starts_with(GROUP_COMMIT_LABEL_PREFIX),
        "{}",
        a.label
    );
    d.tick(INTERVAL_MS - 1, true);
    assert_eq!(visible(&d), 0, "acknowledged, not yet visible");
    d.tick(INTERVAL_MS, true);
    assert_eq!(visible(&d), 5);
    assert_eq!(
        d.be.group_commit.wal_rows(),
        0,
        "a committed load deletes its WAL"
    );
    let c = d.stream_load(INTERVAL_MS + 1, load(5..6, GroupCommitMode::Async));
    assert_ne!(
        c.txn_id, a.txn_id,
        "the next load opens a new internal load"
    );
}

#[test]
fn a_sync_load_is_decided_when_the_internal_load_is_visible_or_lost() {
    let mut d = cluster();
    let a = d.stream_load(0, load(0..2, GroupCommitMode::Sync));
    assert_eq!(d.group_commit_outcome(a.txn_id), None);
    d.tick(INTERVAL_MS, true);
    assert_eq!(d.group_commit_outcome(a.txn_id), Some(Ok(())));
    let b = d.stream_load(2 * INTERVAL_MS, load(2..4, GroupCommitMode::Sync));
    d.restart_be();
    assert!(matches!(d.group_commit_outcome(b.txn_id), Some(Err(_))));
    d.tick(4 * INTERVAL_MS, true);
    assert_eq!(
        visible(&d),
        2,
        "sync_mode writes no WAL: the lost rows are not replayed"
    );
}

#[test]
fn a_be_restart_replays_the_wal_under_the_same_label() {
    let mut d = cluster();
    let a = d.stream_load(0, load(0..3, GroupCommitMode::Async));
    d.restart_be();
    d.tick(10, true);
    assert_eq!(
        visible(&d),
        3,
        "acknowledged async rows survive a process restart"
    );
    let old = d.transaction(a.txn_id).unwrap();
    assert_eq!(old.status, TransactionStatus::Aborted);
    let replayed = d.transaction_by_label("db", &a.label).unwrap();
    assert_ne!(replayed.txn_id, a.txn_id);
    assert_eq!(replayed.status, TransactionStatus::Visible);
    d.restart_be();
    d.tick(20, true);
    assert_eq!(
        visible(&d),
        3,
        "a replayed WAL is deleted, never loaded twice"
    );
}

#[test]
fn a_machine_crash_loses_the_unsynced_wal_tail() {
    let mut d = cluster();
    d.stream_load(0, load(0..4, GroupCommitMode::Async));
    assert_eq!(d.crash_be_machine(|len| len / 4), 3);
    d.restart_be();
    d.tick(10, true);
    assert_eq!(visible(&d), 1, "only the written-back prefix is replayed");
}

#[test]
fn labelled_or_two_phase_loads_bypass_group_commit() {
    let mut d = cluster();
    let mut labelled = load(0..1, GroupCommitMode::Async);
    labelled.label = Some("mine".into());
    let r = d.stream_load(0, labelled);
    assert_eq!((r.group_commit, r.label.as_str()), (false, "mine"));
    let mut two_phase = load(1..2, GroupCommitMode::Sync);
    two_phase.two_phase_commit = true;
    let r = d.stream_load(0, two_phase);
    assert!(!r.group_commit);
    assert_eq!(
        d.transaction(r.txn_id).unwrap().status,
        TransactionStatus::Precommitted
    );
}

#[test]
fn too_many_filtered_rows_fail_one_load_and_leave_the_internal_load_alone() {
    let mut d = cluster();
    let ok = d.stream_load(0, load(0..2, GroupCommitMode::Async));
    let mut bad = load(2..3, GroupCommitMode::Async);
    bad.lines.push("{not json".into());
    let r = d.stream_load(1, bad);
    assert_eq!(r.status, StreamLoadStatus::Fail);
    assert_eq!(r.number_filtered_rows, 1);
    d.tick(INTERVAL_MS, true);
    assert_eq!(visible(&d), 2);
    assert_eq!(
        d.transaction(ok.txn_id).unwrap().status,
        TransactionStatus::Visible
    );
}

#[test]
fn mode_names_parse_as_the_connector_normalizes_them() {
    assert_eq!(
        GroupCommitMode::parse(" ASYNC_MODE "),
        Some(GroupCommitMode::Async)
    );
    assert_eq!(
        GroupCommitMode::parse("sync_mode"),
        Some(GroupCommitMode::Sync)
    );
    assert_eq!(
        GroupCommitMode::parse("off_mode"),
        Some(GroupCommitMode::Off)
    );
    assert_eq!(GroupCommitMode::parse("async"), None);
}
