//! cases.md F8 (a produce request that arrives after its transaction ended) and the
//! KAFKA-17754 delayed EndTxn, under each [`TxnProtocol`] (models-reference C.9).

use super::*;

/// The epoch the producer uses after EndTxn: the same in TV1, the bumped one in TV2.
fn epoch_after(end: &Response, ids: (i64, i16)) -> (i64, i16) {
    match end {
        Response::EndTxn => ids,
        Response::EndTxnV5 {
            producer_id,
            producer_epoch,
        } => (*producer_id, *producer_epoch),
        other => panic!("EndTxn failed: {other:?}"),
    }
}

/// Txn1 writes a1 (seq 0) to p0; a2 (seq 1) is delayed; the producer aborts txn1.
/// Returns the producer's ids for the next transaction and a2's header.
fn txn1_aborted_with_a2_in_flight(w: &mut World) -> ((i64, i16), ProducerBatchHeader) {
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["a1"]));
    let a2 = header(ids.0, ids.1, 1, true);
    let end = w.end("tx", ids, false);
    w.settle();
    assert_eq!(w.state("tx"), TxnState::CompleteAbort);
    (epoch_after(&end, ids), a2)
}

/// F8(a): a2 is delivered just after the abort marker. Returns a2's answer.
fn f8a(protocol: TxnProtocol) -> (World, Response) {
    let mut w = World::new(protocol);
    let (_, a2) = txn1_aborted_with_a2_in_flight(&mut w);
    let r = w.produce(&tp(0), a2, &["a2"]);
    // Another producer commits on the same partition afterwards.
    let other = w.init("other");
    w.add("other", other, &[tp(0)]);
    offset(&w.produce(&tp(0), header(other.0, other.1, 0, true), &["o1"]));
    w.end("other", other, true);
    w.settle();
    w.tick_for(120_000);
    (w, r)
}

#[test]
fn f8a_before_kip_890_a_produce_delayed_past_the_abort_marker_hangs_the_partition() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let (mut w, r) = f8a(TxnProtocol::PreKip890);
    crate::marks::assert_hit(&["kafka:produce-outside-coordinator-txn"]);
    let a2_offset = offset(&r);
    assert_eq!(w.lso(&tp(0)), a2_offset, "LSO stuck at the hanging batch");
    assert!(w.hw(&tp(0)) > a2_offset + 1);
    assert!(
        w.read_committed(&tp(0)).is_empty(),
        "every read_committed consumer stalls"
    );
    assert_eq!(
        w.state("tx"),
        TxnState::CompleteAbort,
        "the coordinator knows no transaction"
    );
}

#[test]
fn f8a_with_kip_890_part_1_the_late_produce_is_rejected_with_invalid_txn_state() {
    let (mut w, r) = f8a(TxnProtocol::Kip890Part1);
    assert_eq!(err(&r), KafkaError::InvalidTxnState);
    assert_eq!(w.lso(&tp(0)), w.hw(&tp(0)), "LSO keeps advancing");
    assert_eq!(w.read_committed(&tp(0)), vec!["o1"]);
}

#[test]
fn f8a_with_transaction_version_2_the_late_produce_is_fenced_by_the_bumped_epoch() {
    let (mut w, r) = f8a(TxnProtocol::Tv2);
    assert_eq!(err(&r), KafkaError::InvalidProducerEpoch);
    assert_eq!(w.lso(&tp(0)), w.hw(&tp(0)));
    assert_eq!(w.read_committed(&tp(0)), vec!["o1"]);
}

/// F8(b): the producer begins txn2 on p0, then a2 is delivered, then b1, then commit.
/// Returns what read_committed sees and a2's answer.
fn f8b(protocol: TxnProtocol) -> (Vec<String>, Response, World) {
    let mut w = World::new(protocol);
    let (ids, a2) = txn1_aborted_with_a2_in_flight(&mut w);
    w.add("tx", ids, &[tp(0)]);
    let r = w.produce(&tp(0), a2, &["a2"]);
    // The producer continues its sequence in TV1 (a2 was sent); a new epoch starts at 0.
    let seq = if ids.1 == a2.producer_epoch { 2 } else { 0 };
    offset(&w.produce(&tp(0), header(ids.0, ids.1, seq, true), &["b1"]));
    let end = w.end("tx", ids, true);
    epoch_after(&end, ids);
    w.settle();
    (w.read_committed(&tp(0)), r, w)
}

#[test]
fn f8b_before_kip_890_a_produce_delayed_into_the_next_transaction_joins_it() {
    let (seen, r, _) = f8b(TxnProtocol::PreKip890);
    offset(&r);
    assert_eq!(
        seen,
        vec!["a2", "b1"],
        "a2 of the aborted txn1 committed with txn2"
    );
}

#[test]
fn f8b_with_kip_890_part_1_a_produce_delayed_into_the_next_transaction_still_joins_it() {
    let (seen, r, _) = f8b(TxnProtocol::Kip890Part1);
    offset(&r);
    assert_eq!(
        seen,
        vec!["a2", "b1"],
        "part 1 does not fix F8(b): same epoch"
    );
}

#[test]
fn f8b_with_transaction_version_2_the_late_produce_is_fenced_and_never_visible() {
    let (seen, r, w) = f8b(TxnProtocol::Tv2);
    assert_eq!(err(&r), KafkaError::InvalidProducerEpoch);
    assert_eq!(seen, vec!["b1"]);
    assert_eq!(w.lso(&tp(0)), w.hw(&tp(0)));
}

/// KAFKA-17754: txn n's EndTxn(commit) is duplicated; the copy is delayed until the
/// producer has begun txn n+1 and written x1; then x2 follows. Returns what
/// read_committed sees, the delayed EndTxn's answer and x2's.
fn delayed_end_txn(protocol: TxnProtocol) -> (Vec<String>, Response, Response) {
    let mut w = World::new(protocol);
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["n"]));
    let next = epoch_after(&w.end("tx", ids, true), ids);
    w.settle();
    w.add("tx", next, &[tp(0)]);
    let seq = if next.1 == ids.1 { 1 } else { 0 };
    offset(&w.produce(&tp(0), header(next.0, next.1, seq, true), &["x1"]));
    let late = w.end("tx", ids, true);
    w.settle();
    let x2 = w.produce(&tp(0), header(next.0, next.1, seq + 1, true), &["x2"]);
    (w.read_committed(&tp(0)), late, x2)
}

#[test]
fn kafka_17754_with_transaction_version_1_a_delayed_end_txn_commits_the_next_transaction_torn() {
    for protocol in [TxnProtocol::PreKip890, TxnProtocol::Kip890Part1] {
        let (seen, late, x2) = delayed_end_txn(protocol);
        assert_eq!(late, Response::EndTxn, "{protocol:?}");
        assert_eq!(
            seen,
            vec!["n", "x1"],
            "{protocol:?}: x1 committed without x2"
        );
        if protocol == TxnProtocol::Kip890Part1 {
            assert_eq!(err(&x2), KafkaError::InvalidTxnState);
        }
    }
}

#[test]
fn kafka_17754_with_transaction_version_2_the_delayed_end_txn_is_fenced() {
    let (seen, late, x2) = delayed_end_txn(TxnProtocol::Tv2);
    assert_eq!(err(&late), KafkaError::ProducerFenced);
    offset(&x2);
    assert_eq!(seen, vec!["n"], "txn n+1 still open");
}

#[test]
fn with_transaction_version_2_every_end_txn_bumps_the_epoch_and_a_retry_is_answered_again() {
    let mut w = World::new(TxnProtocol::Tv2);
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    let end = w.end("tx", ids, true);
    let next = epoch_after(&end, ids);
    assert_eq!(next, (ids.0, ids.1 + 1));
    assert_eq!(
        err(&w.end("tx", ids, true)),
        KafkaError::ConcurrentTransactions
    );
    w.settle();
    assert_eq!(w.end("tx", ids, true), end, "retry after completion");
    assert_eq!(err(&w.end("tx", ids, false)), KafkaError::InvalidTxnState);
    assert_eq!(
        err(&w.end("tx", next, true)),
        KafkaError::InvalidTxnState,
        "no txn with the new epoch"
    );
}

#[test]
fn with_transaction_version_2_the_first_transactional_produce_adds_the_partition_implicitly() {
    let mut w = World::new(TxnProtocol::Tv2);
    let ids = w.init("tx");
    offset(&w.produce(&tp(1), header(ids.0, ids.1, 0, true), &["implicit"]));
    assert_eq!(w.state("tx"), TxnState::Ongoing);
    assert!(w
        .cluster
        .transactions()
        .txn("tx")
        .unwrap()
        .partitions
        .contains(&tp(1)));
    w.end("tx", ids, true);
    w.settle();
    assert_eq!(w.read_committed(&tp(1)), vec!["implicit"]);
}

#[test]
fn a_non_transactional_batch_from_a_producer_with_an_open_transaction_is_rejected_with_48() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["t"]));
    let r = w.produce(&tp(0), header(ids.0, ids.1, 1, false), &["plain"]);
    assert_eq!(err(&r), KafkaError::InvalidTxnState);
}
