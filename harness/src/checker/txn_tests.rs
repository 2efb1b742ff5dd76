//! Transactional checker tests: one per anomaly on a literal history, each with a valid
//! twin that differs in the one fact the anomaly rests on.

use super::test_support::*;
use super::*;
use crate::history::{OpKind, Value};

fn options() -> CheckOptions {
    CheckOptions {
        read_committed: true,
        sink: false,
        ..CheckOptions::default()
    }
}

fn found(h: &History) -> CheckResult {
    TxnChecker.check(h, &options())
}

#[test]
fn aborted_read_is_a_record_of_an_aborted_transaction_in_the_committed_view() {
    // Transaction 1 wrote record 7 at out-0@0 and aborted; the read_committed view still
    // holds it there (G1a). The record was retried at @2 by transaction 2, which committed.
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(7, 0)], 1)),
        ("copier-0", OpKind::Fail, txn(1, &[(7, 0)], 1)),
        ("copier-0", OpKind::Invoke, txn(2, &[(7, 2)], 1)),
        ("copier-0", OpKind::Ok, txn(2, &[(7, 2)], 1)),
        ("final", OpKind::Ok, committed_view(&[(7, 0), (7, 2)])),
    ]);
    let result = found(&h);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::AbortedRead].len(), 1);
    assert_eq!(result.anomalies[&Anomaly::AbortedRead][0].offsets, vec![0]);
}

#[test]
fn aborted_records_filtered_from_the_committed_view_are_valid() {
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(7, 0)], 1)),
        ("copier-0", OpKind::Fail, txn(1, &[(7, 0)], 1)),
        ("copier-0", OpKind::Invoke, txn(2, &[(7, 2)], 1)),
        ("copier-0", OpKind::Ok, txn(2, &[(7, 2)], 1)),
        ("final", OpKind::Ok, committed_view(&[(7, 2)])),
    ]);
    let result = found(&h);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}

#[test]
fn torn_transaction_is_part_of_a_committed_transaction_visible() {
    // Transaction 1 committed records 1 and 2; only record 1 is readable.
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(1, 0), (2, 1)], 2)),
        ("copier-0", OpKind::Ok, txn(1, &[(1, 0), (2, 1)], 2)),
        ("final", OpKind::Ok, committed_view(&[(1, 0)])),
    ]);
    let result = found(&h);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::TornTransaction][0].ids, vec![2]);
}

#[test]
fn a_committed_transaction_wholly_visible_is_not_torn() {
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(1, 0), (2, 1)], 2)),
        ("copier-0", OpKind::Ok, txn(1, &[(1, 0), (2, 1)], 2)),
        ("final", OpKind::Ok, committed_view(&[(1, 0), (2, 1)])),
    ]);
    assert_eq!(found(&h).validity, Validity::Valid);
}

#[test]
fn lost_write_is_a_committed_transaction_with_nothing_visible() {
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(1, 0), (2, 1)], 2)),
        ("copier-0", OpKind::Ok, txn(1, &[(1, 0), (2, 1)], 2)),
        ("final", OpKind::Ok, committed_view(&[])),
    ]);
    let result = found(&h);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::LostWrite][0].ids, vec![1, 2]);
}

#[test]
fn a_transaction_of_unknown_outcome_may_be_wholly_invisible() {
    // An `info` transaction may have aborted: nothing of it visible is fine.
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(1, 0), (2, 1)], 2)),
        ("copier-0", OpKind::Info, txn(1, &[(1, 0), (2, 1)], 2)),
        ("final", OpKind::Ok, committed_view(&[])),
    ]);
    assert_eq!(found(&h).validity, Validity::Valid);
}

#[test]
fn uncommitted_read_is_a_poll_before_the_transaction_asked_to_commit() {
    // reader-0 polled record 5 (op 0) before transaction 1 even invoked its commit (op 1).
    let h = history(vec![
        (
            "reader-0",
            OpKind::Ok,
            Value::Poll {
                records: vec![out(5, 0)],
            },
        ),
        ("copier-0", OpKind::Invoke, txn(1, &[(5, 0)], 1)),
        ("copier-0", OpKind::Ok, txn(1, &[(5, 0)], 1)),
    ]);
    let result = found(&h);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(
        result.anomalies[&Anomaly::UncommittedRead][0].ops,
        vec![0, 1]
    );
}

#[test]
fn a_poll_after_the_commit_request_is_not_an_uncommitted_read() {
    // The commit returns only after PrepareCommit; markers may land before the ok, so a
    // read between invoke and ok is legitimate.
    let h = history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(5, 0)], 1)),
        (
            "reader-0",
            OpKind::Ok,
            Value::Poll {
                records: vec![out(5, 0)],
            },
        ),
        ("copier-0", OpKind::Ok, txn(1, &[(5, 0)], 1)),
    ]);
    assert_eq!(found(&h).validity, Validity::Valid);
}

#[test]
fn stuck_lso_is_a_last_stable_offset_below_the_high_watermark_after_the_drain() {
    // A produce that arrived after its transaction's abort marker opened a transaction no
    // coordinator knows: the LSO stays at 3 while the HW is 5.
    let h = history(vec![("final", OpKind::Ok, partition_state(5, 3))]);
    let result = found(&h);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::StuckLso][0].offsets, vec![3, 5]);
}

#[test]
fn a_last_stable_offset_at_the_high_watermark_is_valid() {
    let h = history(vec![("final", OpKind::Ok, partition_state(5, 5))]);
    assert_eq!(found(&h).validity, Validity::Valid);
}

fn f9_history(retried: bool) -> History {
    // Input records 0 and 1. Transaction 1 copied record 0 and aborted; transaction 2 (not
    // rewound) copied only record 1 yet committed the input offset 2.
    let mut sends = vec![(1, 2)];
    if retried {
        sends.insert(0, (0, 1));
    }
    let view: Vec<(u64, Offset)> = sends.clone();
    let log = Value::LogState {
        tp: TopicPartition::new("in", 0),
        records: vec![input(0, 0), input(1, 1)],
    };
    let committed = Value::CommittedOffsets {
        offsets: vec![(TopicPartition::new("in", 0), 2)],
    };
    history(vec![
        ("copier-0", OpKind::Invoke, txn(1, &[(0, 0)], 1)),
        ("copier-0", OpKind::Fail, txn(1, &[(0, 0)], 1)),
        ("copier-0", OpKind::Invoke, txn(2, &sends, 2)),
        ("copier-0", OpKind::Ok, txn(2, &sends, 2)),
        ("final", OpKind::Ok, log),
        ("final", OpKind::Ok, committed_view(&view)),
        ("final", OpKind::Ok, committed),
    ])
}

#[test]
fn offsets_for_aborted_output_is_input_committed_past_output_that_only_aborted() {
    let result = found(&f9_history(false));
    assert_eq!(result.validity, Validity::Invalid);
    let cases = &result.anomalies[&Anomaly::OffsetsForAbortedOutput];
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0].ids, vec![0]);
}

#[test]
fn input_whose_aborted_output_was_written_again_is_valid() {
    let result = found(&f9_history(true));
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}

#[test]
fn input_of_an_aborted_upstream_transaction_committed_past_without_output_is_valid() {
    // As `f9_history(false)`, but input 0 is the record of an upstream transaction that
    // aborted: a read_committed copier skips it, so offset 2 past it loses nothing. The
    // copier's own aborted transaction 1 (which copied it) does not make it data.
    let upstream = |kind| {
        let value = Value::Txn {
            id: 0,
            transactional_id: "upstream".into(),
            sends: vec![input(0, 0)],
            offsets: Vec::new(),
        };
        ("producer-0", kind, value)
    };
    let f9 = f9_history(false);
    let mut ops = vec![upstream(OpKind::Invoke), upstream(OpKind::Fail)];
    ops.extend(
        f9.ops
            .iter()
            .map(|op| (op.process.as_str(), op.kind, op.value.clone())),
    );
    let result = found(&history(ops));
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}
