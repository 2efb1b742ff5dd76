//! One test per applicable line of models-reference checklists B and C, plus F8 and F10.

use super::*;

// ------------------------------------------------------------------------ transactions core

#[test]
fn a_committed_transaction_is_visible_to_read_committed_once_its_markers_are_written() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    assert_eq!(ids.1, 0);
    let r = w.add("tx", ids, &[tp(0), tp(1)]);
    assert!(matches!(r, Response::AddPartitionsToTxn { .. }), "{r:?}");
    assert_eq!(w.state("tx"), TxnState::Ongoing);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["a", "b"]));
    offset(&w.produce(&tp(1), header(ids.0, ids.1, 0, true), &["c"]));
    assert!(
        w.read_committed(&tp(0)).is_empty(),
        "open transaction invisible"
    );
    assert_eq!(w.read(&tp(0), Isolation::ReadUncommitted), vec!["a", "b"]);
    assert_eq!(w.lso(&tp(0)), 0);
    assert_eq!(w.end("tx", ids, true), Response::EndTxn);
    w.settle();
    assert_eq!(w.state("tx"), TxnState::CompleteCommit);
    assert_eq!(w.read_committed(&tp(0)), vec!["a", "b"]);
    assert_eq!(w.read_committed(&tp(1)), vec!["c"]);
    assert_eq!(w.lso(&tp(0)), w.hw(&tp(0)));
    assert_eq!(w.hw(&tp(0)), 3, "two records and one marker");
}

#[test]
fn no_read_committed_consumer_receives_a_record_of_an_aborted_transaction_nor_any_at_or_above_lso()
{
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["x1", "x2"]));
    assert_eq!(w.end("tx", ids, false), Response::EndTxn);
    w.settle();
    assert_eq!(w.state("tx"), TxnState::CompleteAbort);
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 2, true), &["y1"]));
    w.end("tx", ids, true);
    w.settle();
    offset(&w.produce(&tp(0), ProducerBatchHeader::NONE, &["plain"]));
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 3, true), &["open"]));
    assert_eq!(w.read_committed(&tp(0)), vec!["y1", "plain"]);
    assert_eq!(
        w.read(&tp(0), Isolation::ReadUncommitted),
        vec!["x1", "x2", "y1", "plain", "open"]
    );
    assert_eq!(w.lso(&tp(0)), 6, "the open transaction starts at offset 6");
}
