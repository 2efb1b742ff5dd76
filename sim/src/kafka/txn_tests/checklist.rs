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
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
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
    crate::marks::assert_hit(&[
        "kafka:lso-held-by-open-txn",
        "kafka:fetch-lists-aborted-txns",
    ]);
}

// ------------------------------------------------------------------ B: idempotent producer

fn idempotent(w: &mut World) -> (i64, i16) {
    let req = Request::InitProducerId {
        transactional_id: None,
        transaction_timeout_ms: 0,
        producer_id: -1,
        producer_epoch: -1,
    };
    match w.send_to(1, req) {
        Response::InitProducerId {
            producer_id,
            producer_epoch,
        } => (producer_id, producer_epoch),
        other => panic!("{other:?}"),
    }
}

fn leo(w: &World, tp: &TopicPartition) -> Offset {
    let leader = w.cluster.leader(tp).expect("online");
    w.cluster.log_end_offset(tp, leader).expect("replica")
}

#[test]
fn a_retried_batch_among_the_last_5_is_acknowledged_with_its_original_offset_and_not_appended() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let (pid, epoch) = idempotent(&mut w);
    assert_eq!(epoch, 0);
    let mut offsets = Vec::new();
    for k in 0..5 {
        let seq = k * 2;
        offsets.push(offset(&w.produce(
            &tp(0),
            header(pid, epoch, seq, false),
            &["a", "b"],
        )));
    }
    let end = leo(&w, &tp(0));
    for k in 0..5 {
        let again = w.produce(&tp(0), header(pid, epoch, k * 2, false), &["a", "b"]);
        assert_eq!(
            offset(&again),
            offsets[k as usize],
            "duplicate {k} answered with its offset"
        );
    }
    assert_eq!(leo(&w, &tp(0)), end, "nothing appended twice");
    crate::marks::assert_hit(&["kafka:duplicate-batch"]);
}

#[test]
fn a_retried_batch_older_than_the_last_5_is_rejected_with_out_of_order_sequence_and_not_appended() {
    let mut w = World::new(TxnProtocol::default());
    let (pid, epoch) = idempotent(&mut w);
    for seq in 0..6 {
        offset(&w.produce(&tp(0), header(pid, epoch, seq, false), &["v"]));
    }
    let end = leo(&w, &tp(0));
    let r = w.produce(&tp(0), header(pid, epoch, 0, false), &["v"]);
    assert_eq!(err(&r), KafkaError::OutOfOrderSequenceNumber);
    assert_eq!(leo(&w, &tp(0)), end);
}

#[test]
fn a_sequence_gap_returns_45_and_a_lower_epoch_returns_47_and_neither_changes_leo() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let (pid, _) = idempotent(&mut w);
    offset(&w.produce(&tp(0), header(pid, 3, 0, false), &["v"]));
    let end = leo(&w, &tp(0));
    let gap = w.produce(&tp(0), header(pid, 3, 2, false), &["v"]);
    assert_eq!(err(&gap), KafkaError::OutOfOrderSequenceNumber);
    let stale = w.produce(&tp(0), header(pid, 2, 1, false), &["v"]);
    assert_eq!(err(&stale), KafkaError::InvalidProducerEpoch);
    let new_epoch_not_at_zero = w.produce(&tp(0), header(pid, 4, 5, false), &["v"]);
    assert_eq!(
        err(&new_epoch_not_at_zero),
        KafkaError::OutOfOrderSequenceNumber
    );
    assert_eq!(leo(&w, &tp(0)), end);
    offset(&w.produce(&tp(0), header(pid, 4, 0, false), &["v"]));
    crate::marks::assert_hit(&["kafka:out-of-order-sequence", "kafka:produce-fenced"]);
}

#[test]
fn a_batch_from_an_unknown_producer_id_is_accepted_with_any_sequence() {
    let mut w = World::new(TxnProtocol::default());
    let r = w.produce(&tp(0), header(777_777, 5, 4242, false), &["v"]);
    assert_eq!(offset(&r), 0);
    let next = w.produce(&tp(0), header(777_777, 5, 4243, false), &["w"]);
    assert_eq!(offset(&next), 1);
}

/// cases.md F10: the leader appends and replicates the batch, the answer is lost, the leader
/// dies and the producer retries at the new leader.
fn f10_retry_after_failover(survives: bool) -> (Vec<String>, Offset, Offset) {
    let mut w = World::with(ClusterConfig {
        producer_state_survives_failover: survives,
        ..ClusterConfig::default()
    });
    let (pid, epoch) = idempotent(&mut w);
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let first = offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &values));
    w.tick_for(100);
    let old = w.cluster.leader(&tp(0)).unwrap();
    w.kill(old);
    assert_ne!(w.cluster.leader(&tp(0)), Some(old), "leadership moved");
    let retry = offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &values));
    w.tick_for(100);
    (w.read(&tp(0), Isolation::ReadUncommitted), first, retry)
}

#[test]
fn after_leader_failover_the_new_leader_deduplicates_retries_of_every_batch_it_had_replicated() {
    let (log, first, retry) = f10_retry_after_failover(true);
    assert_eq!(log.len(), 10, "the batch once");
    assert_eq!(
        first, retry,
        "the retry is answered with the original offset"
    );
}

#[test]
fn f10_with_producer_state_lost_on_failover_the_retry_is_appended_twice() {
    let (log, first, retry) = f10_retry_after_failover(false);
    assert_eq!(log.len(), 20, "the bug switch duplicates the batch");
    assert_ne!(first, retry);
}

#[test]
fn a_client_clock_set_back_expires_a_producer_that_is_still_writing_and_its_retry_duplicates() {
    // B.6: `lastTimestamp` is the batch's max timestamp, assigned (not maxed) on each
    // append, so one batch stamped by a clock two days behind makes the entry look idle.
    let mut w = World::with(ClusterConfig {
        producer_id_expiration_ms: 86_400_000,
        producer_id_expiration_check_interval_ms: 1_000,
        ..ClusterConfig::default()
    });
    let (pid, epoch) = idempotent(&mut w);
    offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &["a"]));
    w.tick_for(2_000);
    let behind_ms = w.now as i64 - 2 * 86_400_000;
    let first = offset(&w.produce_stamped(&tp(0), header(pid, epoch, 1, false), &["b"], behind_ms));
    let leader = w.cluster.leader(&tp(0)).unwrap();
    let entry = |w: &World| {
        w.cluster
            .producer_state(&tp(0), leader)
            .unwrap()
            .entry(pid)
            .is_some()
    };
    assert!(entry(&w), "not yet scanned");
    w.tick_for(1_500);
    assert!(
        !entry(&w),
        "expired at the next scan though it wrote 1.5 s ago"
    );
    // The response to `b` was lost; the client retries the same batch (same sequence).
    let retry = w.produce_stamped(&tp(0), header(pid, epoch, 1, false), &["b"], behind_ms);
    assert_eq!(offset(&retry), first + 1, "appended a second time");
}

#[test]
fn a_producer_whose_clock_is_right_keeps_its_state_across_scans_and_a_retry_is_deduplicated() {
    let mut w = World::with(ClusterConfig {
        producer_id_expiration_ms: 86_400_000,
        producer_id_expiration_check_interval_ms: 1_000,
        ..ClusterConfig::default()
    });
    let (pid, epoch) = idempotent(&mut w);
    let first = offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &["a"]));
    w.tick_for(3_000);
    let retry = w.produce(&tp(0), header(pid, epoch, 0, false), &["a"]);
    assert_eq!(
        offset(&retry),
        first,
        "the retained batch answers the retry"
    );
}

#[test]
fn after_producer_id_expiration_of_inactivity_the_entry_is_gone_and_a_retry_duplicates() {
    let mut w = World::with(ClusterConfig {
        producer_id_expiration_ms: 60_000,
        producer_id_expiration_check_interval_ms: 10_000,
        ..ClusterConfig::default()
    });
    let (pid, epoch) = idempotent(&mut w);
    offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &["v"]));
    w.tick_for(30_000);
    let leader = w.cluster.leader(&tp(0)).unwrap();
    assert!(w
        .cluster
        .producer_state(&tp(0), leader)
        .unwrap()
        .entry(pid)
        .is_some());
    w.tick_for(50_000);
    assert!(
        w.cluster
            .producer_state(&tp(0), leader)
            .unwrap()
            .entry(pid)
            .is_none(),
        "expired"
    );
    let retry = w.produce(&tp(0), header(pid, epoch, 0, false), &["v"]);
    assert_eq!(
        offset(&retry),
        1,
        "appended again: the documented limit of idempotence"
    );
}

#[test]
fn producer_state_after_restart_and_truncation_equals_a_replay_of_the_surviving_log() {
    use crate::kafka::producer_state::ProducerState;
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    let (pid, epoch) = idempotent(&mut w);
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["t1"]));
    offset(&w.produce(&tp(0), header(pid, epoch, 0, false), &["a"]));
    w.end("tx", ids, false);
    w.settle();
    let old = w.cluster.leader(&tp(0)).unwrap();
    // Cut the leader off, let it take acks=1 writes the others never see, then bring it back.
    w.env.cut.extend(
        [(1, 2), (1, 3), (2, 3)]
            .into_iter()
            .filter(|&(a, b)| a == old || b == old),
    );
    let req = Request::Produce {
        tp: tp(0),
        acks: Acks::Leader,
        timeout_ms: 1000,
        header: header(pid, epoch, 1, false),
        records: vec![record("lost", 0)],
    };
    w.send_to(old, req);
    w.cluster.crash_broker(w.now, old, CrashMode::ProcessKill);
    w.env.down.insert(old);
    w.tick_for(10_000);
    w.env.cut.clear();
    w.restart(old);
    w.tick_for(5_000);
    for b in 1..=3 {
        let batches = w.cluster.replica_log_batches(&tp(0), b);
        let hw = w.cluster.replica_high_watermark(&tp(0), b).unwrap();
        let replayed = ProducerState::rebuild(&batches, hw);
        assert_eq!(
            w.cluster.producer_state(&tp(0), b),
            Some(&replayed),
            "broker {b}"
        );
    }
    assert!(!w
        .read(&tp(0), Isolation::ReadUncommitted)
        .contains(&"lost".to_string()));
}

// ------------------------------------------------------------------------ C: transactions

#[test]
fn a_coordinator_timeout_abort_happens_no_earlier_than_start_plus_timeout_and_fences_the_producer()
{
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let tid = "tx";
    let b = w.txn_coordinator(tid);
    let init = Request::InitProducerId {
        transactional_id: Some(tid.into()),
        transaction_timeout_ms: 15_000,
        producer_id: -1,
        producer_epoch: -1,
    };
    let Response::InitProducerId {
        producer_id,
        producer_epoch,
    } = w.send_to(b, init)
    else {
        panic!()
    };
    let ids = (producer_id, producer_epoch);
    w.tick_for(5_000);
    w.add(tid, ids, &[tp(0)]);
    let start = w.now;
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["z"]));
    while w.state(tid) == TxnState::Ongoing {
        w.tick_for(TICK_MS);
        assert!(w.now < start + 40_000, "never timed out");
    }
    assert!(
        w.now > start + 15_000,
        "aborted at {} before start {start} + 15000",
        w.now
    );
    w.settle();
    assert_eq!(w.state(tid), TxnState::CompleteAbort);
    assert_eq!(err(&w.end(tid, ids, true)), KafkaError::ProducerFenced);
    assert_eq!(err(&w.add(tid, ids, &[tp(0)])), KafkaError::ProducerFenced);
    let late = w.produce(&tp(0), header(ids.0, ids.1, 1, true), &["late"]);
    assert_eq!(err(&late), KafkaError::InvalidProducerEpoch);
    assert!(w.read_committed(&tp(0)).is_empty());
    assert_eq!(w.lso(&tp(0)), w.hw(&tp(0)));
    crate::marks::assert_hit(&[
        "kafka:txn-timed-out-aborted",
        "kafka:end-txn-fenced",
        "kafka:txn-request-fenced",
        "kafka:produce-fenced",
    ]);
}

#[test]
fn init_producer_id_on_an_ongoing_txn_aborts_it_returns_51_then_epoch_at_least_old_plus_2() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let zombie = w.init("tx");
    w.add("tx", zombie, &[tp(0)]);
    offset(&w.produce(&tp(0), header(zombie.0, zombie.1, 0, true), &["zombie"]));
    let req = Request::InitProducerId {
        transactional_id: Some("tx".into()),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    };
    assert_eq!(err(&w.txn("tx", req)), KafkaError::ConcurrentTransactions);
    let fresh = w.init("tx");
    assert_eq!(fresh.0, zombie.0);
    assert!(
        fresh.1 >= zombie.1 + 2,
        "epoch {} after {}",
        fresh.1,
        zombie.1
    );
    assert_eq!(err(&w.end("tx", zombie, true)), KafkaError::ProducerFenced);
    let z = w.produce(&tp(0), header(zombie.0, zombie.1, 1, true), &["zombie2"]);
    assert_eq!(err(&z), KafkaError::InvalidProducerEpoch);
    assert!(w.read_committed(&tp(0)).is_empty());
    crate::marks::assert_hit(&[
        "kafka:txn-fenced-by-init-aborted",
        "kafka:concurrent-transactions",
        "kafka:end-txn-fenced",
    ]);
}

#[test]
fn a_produce_with_an_epoch_below_the_partitions_stored_epoch_gets_47_and_is_not_appended() {
    let mut w = World::new(TxnProtocol::PreKip890);
    let old = w.init("tx");
    w.add("tx", old, &[tp(0)]);
    offset(&w.produce(&tp(0), header(old.0, old.1, 0, true), &["a"]));
    w.end("tx", old, true);
    w.settle();
    let new = w.init("tx");
    w.add("tx", new, &[tp(0)]);
    offset(&w.produce(&tp(0), header(new.0, new.1, 0, true), &["b"]));
    let end = leo(&w, &tp(0));
    for transactional in [true, false] {
        let r = w.produce(&tp(0), header(old.0, old.1, 1, transactional), &["stale"]);
        assert_eq!(err(&r), KafkaError::InvalidProducerEpoch);
    }
    assert_eq!(leo(&w, &tp(0)), end);
}

#[test]
fn end_txn_commit_returns_before_the_markers_and_lso_advances_only_once_the_marker_is_below_hw() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["a"]));
    // The coordinator cannot reach the partition leader: the marker waits.
    let (c, l) = (w.txn_coordinator("tx"), w.cluster.leader(&tp(0)).unwrap());
    let cut_ok = c != l;
    if cut_ok {
        w.env.cut.insert((c.min(l), c.max(l)));
    }
    assert_eq!(w.end("tx", ids, true), Response::EndTxn);
    assert_eq!(
        w.state("tx"),
        TxnState::PrepareCommit,
        "answered before any marker"
    );
    assert_eq!(w.lso(&tp(0)), 0);
    assert!(w.read_committed(&tp(0)).is_empty());
    if cut_ok {
        w.tick_for(1_000);
        assert_eq!(
            w.lso(&tp(0)),
            0,
            "no marker while the coordinator is cut off"
        );
        w.env.cut.clear();
    }
    w.settle();
    assert_eq!(w.lso(&tp(0)), 2);
    assert_eq!(w.read_committed(&tp(0)), vec!["a"]);
}

#[test]
fn committing_twice_returns_none_and_aborting_after_a_completed_commit_returns_48() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    assert_eq!(w.end("tx", ids, true), Response::EndTxn);
    assert_eq!(
        err(&w.end("tx", ids, true)),
        KafkaError::ConcurrentTransactions,
        "still PrepareCommit"
    );
    w.settle();
    assert_eq!(w.end("tx", ids, true), Response::EndTxn);
    assert_eq!(err(&w.end("tx", ids, false)), KafkaError::InvalidTxnState);
    let fresh = w.init("tx");
    assert_eq!(
        err(&w.end("tx", fresh, true)),
        KafkaError::InvalidTxnState,
        "Empty + EndTxn"
    );
}

#[test]
fn add_partitions_checks_the_producer_id_mapping_and_the_epoch() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    assert_eq!(
        err(&w.add("tx", (ids.0 + 1, ids.1), &[tp(0)])),
        KafkaError::InvalidProducerIdMapping
    );
    assert_eq!(
        err(&w.add("nobody", ids, &[tp(0)])),
        KafkaError::InvalidProducerIdMapping
    );
    assert_eq!(
        err(&w.add("tx", (ids.0, ids.1 + 1), &[tp(0)])),
        KafkaError::ProducerFenced
    );
    let unknown = TopicPartition::new("missing", 0);
    assert_eq!(
        err(&w.add("tx", ids, &[unknown])),
        KafkaError::UnknownTopicOrPartition
    );
    let too_long = Request::InitProducerId {
        transactional_id: Some("tx".into()),
        transaction_timeout_ms: 900_001,
        producer_id: -1,
        producer_epoch: -1,
    };
    assert_eq!(
        err(&w.txn("tx", too_long)),
        KafkaError::InvalidTransactionTimeout
    );
}

#[test]
fn transaction_requests_at_a_broker_that_is_not_the_coordinator_get_not_coordinator() {
    let mut w = World::new(TxnProtocol::default());
    let c = w.txn_coordinator("tx");
    let other = if c == 1 { 2 } else { 1 };
    let req = Request::InitProducerId {
        transactional_id: Some("tx".into()),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    };
    assert_eq!(err(&w.send_to(other, req)), KafkaError::NotCoordinator);
}

#[test]
fn the_coordinator_moves_with_its_partition_leader_and_completes_the_transaction_there() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0), tp(1)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["a"]));
    offset(&w.produce(&tp(1), header(ids.0, ids.1, 0, true), &["b"]));
    let old = w.txn_coordinator("tx");
    w.kill(old);
    let new = w.txn_coordinator("tx");
    assert_ne!(new, old);
    assert_eq!(w.state("tx"), TxnState::Ongoing, "state reloaded");
    assert_eq!(w.end("tx", ids, true), Response::EndTxn);
    w.settle();
    assert_eq!(w.read_committed(&tp(0)), vec!["a"]);
    assert_eq!(w.read_committed(&tp(1)), vec!["b"]);
    crate::marks::assert_hit(&["kafka:txn-coordinator-move"]);
}

#[test]
fn a_new_coordinator_answers_load_in_progress_until_it_loaded_its_partition() {
    crate::marks::take();
    let mut w = World::with(ClusterConfig {
        coordinator_load_ms: 5_000,
        ..ClusterConfig::default()
    });
    // The first leaders have nothing to load.
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    offset(&w.produce(&tp(0), header(ids.0, ids.1, 0, true), &["a"]));
    let (member, generation) = join(&mut w, "g");
    let old = w.txn_coordinator("tx");
    w.kill(old); // the controller moves the leaderships ~1 s before this returns
    let new = w.txn_coordinator("tx");
    assert_ne!(new, old);
    let end = Request::EndTxn {
        transactional_id: "tx".into(),
        producer_id: ids.0,
        producer_epoch: ids.1,
        commit: true,
    };
    assert_eq!(
        err(&w.send_to(new, end.clone())),
        KafkaError::CoordinatorLoadInProgress
    );
    let group = w.group_coordinator("g");
    let beat = Request::Heartbeat {
        group_id: "g".into(),
        generation,
        member_id: member.clone(),
    };
    if group != old {
        assert_eq!(w.send_to(group, beat.clone()), Response::Heartbeat);
    } else {
        assert_eq!(
            err(&w.send_to(w.group_coordinator("g"), beat.clone())),
            KafkaError::CoordinatorLoadInProgress
        );
    }
    w.tick_for(5_000);
    assert_eq!(w.send_to(new, end), Response::EndTxn);
    w.settle();
    assert_eq!(w.read_committed(&tp(0)), vec!["a"]);
    crate::marks::assert_hit(&["kafka:coordinator-load-in-progress"]);
}

// --------------------------------------------------------------- C.7: offsets (KIP-447)

/// Joins `group` as its only member: (member id, generation).
fn join(w: &mut World, group: &str) -> (String, i32) {
    let c = w.group_coordinator(group);
    let mut member = String::new();
    for _ in 0..2 {
        let req = Request::JoinGroup {
            group_id: group.into(),
            member_id: member.clone(),
            group_instance_id: None,
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 30_000,
            topics: vec!["t".into()],
            protocols: GroupProtocols::offering(&["range"]),
        };
        match w.send_to(c, req) {
            Response::MemberIdRequired { member_id } => member = member_id,
            Response::JoinGroup {
                generation,
                member_id,
                ..
            } => {
                let sync = Request::SyncGroup {
                    group_id: group.into(),
                    generation,
                    member_id: member_id.clone(),
                    assignments: [(member_id.clone(), vec![tp(0)])].into_iter().collect(),
                };
                w.send_to(c, sync);
                return (member_id, generation);
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("never joined")
}

fn txn_commit(
    w: &mut World,
    ids: (i64, i16),
    member: &str,
    generation: i32,
    at: Offset,
) -> Response {
    let c = w.group_coordinator("g");
    let req = Request::TxnOffsetCommit {
        transactional_id: "tx".into(),
        group_id: "g".into(),
        producer_id: ids.0,
        producer_epoch: ids.1,
        generation,
        member_id: member.into(),
        offsets: vec![(tp(1), at)],
    };
    w.send_to(c, req)
}

fn add_offsets(w: &mut World, ids: (i64, i16)) -> Response {
    let req = Request::AddOffsetsToTxn {
        transactional_id: "tx".into(),
        producer_id: ids.0,
        producer_epoch: ids.1,
        group_id: "g".into(),
    };
    w.txn("tx", req)
}

fn fetch_stable(w: &mut World) -> Response {
    let c = w.group_coordinator("g");
    w.send_to(
        c,
        Request::OffsetFetchStable {
            group_id: "g".into(),
            partitions: vec![tp(1)],
        },
    )
}

#[test]
fn txn_offset_commit_with_a_stale_generation_returns_illegal_generation_and_is_never_applied() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let (member, generation) = join(&mut w, "g");
    let ids = w.init("tx");
    assert_eq!(add_offsets(&mut w, ids), Response::AddOffsetsToTxn);
    let r = txn_commit(&mut w, ids, &member, generation + 1, 5);
    assert_eq!(err(&r), KafkaError::IllegalGeneration);
    let r = txn_commit(&mut w, ids, "consumer-999", generation, 5);
    assert_eq!(err(&r), KafkaError::UnknownMemberId);
    w.end("tx", ids, true);
    w.settle();
    assert!(w.cluster.committed_offsets("g").is_empty());
    crate::marks::assert_hit(&[
        "kafka:illegal-generation",
        "kafka:unknown-member-id",
        "kafka:txn-offset-commit-refused",
    ]);
}

#[test]
fn pending_offsets_become_visible_exactly_when_the_commit_marker_is_written_and_vanish_on_abort() {
    let mut w = World::new(TxnProtocol::default());
    let (member, generation) = join(&mut w, "g");
    let ids = w.init("tx");
    add_offsets(&mut w, ids);
    assert!(matches!(
        txn_commit(&mut w, ids, &member, generation, 7),
        Response::TxnOffsetCommit { .. }
    ));
    assert_eq!(err(&fetch_stable(&mut w)), KafkaError::UnstableOffsetCommit);
    assert!(
        w.cluster.committed_offsets("g").is_empty(),
        "pending, invisible"
    );
    w.end("tx", ids, false);
    w.settle();
    assert!(
        w.cluster.committed_offsets("g").is_empty(),
        "dropped on abort"
    );
    assert!(matches!(fetch_stable(&mut w), Response::OffsetFetch { .. }));
    add_offsets(&mut w, ids);
    txn_commit(&mut w, ids, &member, generation, 9);
    w.end("tx", ids, true);
    assert!(
        w.cluster.committed_offsets("g").is_empty(),
        "not before the marker"
    );
    w.settle();
    assert_eq!(w.cluster.committed_offsets("g"), vec![(tp(1), 9)]);
}

#[test]
fn a_fenced_producer_cannot_commit_offsets_through_its_transaction() {
    let mut w = World::new(TxnProtocol::default());
    let (member, generation) = join(&mut w, "g");
    let zombie = w.init("tx");
    add_offsets(&mut w, zombie);
    let _fresh = w.init("tx");
    let r = txn_commit(&mut w, zombie, &member, generation, 3);
    assert_eq!(err(&r), KafkaError::ProducerFenced);
}

#[test]
fn sequences_wrap_from_i32_max_to_zero() {
    let mut w = World::new(TxnProtocol::default());
    let (pid, epoch) = idempotent(&mut w);
    offset(&w.produce(
        &tp(0),
        header(pid, epoch, i32::MAX - 1, false),
        &["a", "b", "c"],
    ));
    let wrong = w.produce(&tp(0), header(pid, epoch, i32::MAX, false), &["d"]);
    assert_eq!(err(&wrong), KafkaError::OutOfOrderSequenceNumber);
    assert_eq!(
        offset(&w.produce(&tp(0), header(pid, epoch, 1, false), &["d"])),
        3
    );
}

#[test]
fn an_expired_transactional_id_answers_its_old_producer_id_with_invalid_producer_id_mapping() {
    let mut w = World::with(ClusterConfig {
        transactional_id_expiration_ms: 60_000,
        transaction_remove_expired_transaction_cleanup_interval_ms: 10_000,
        ..ClusterConfig::default()
    });
    let ids = w.init("tx");
    w.tick_for(90_000);
    assert!(w.cluster.transactions().txn("tx").is_none(), "expired");
    assert_eq!(
        err(&w.add("tx", ids, &[tp(0)])),
        KafkaError::InvalidProducerIdMapping
    );
    let fresh = w.init("tx");
    assert_ne!(fresh.0, ids.0, "a new producer id");
}

#[test]
fn the_transaction_coordinator_is_not_available_while_its_state_partition_is_under_min_isr() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    let c = w.txn_coordinator("tx");
    let others: Vec<BrokerId> = (1..=3).filter(|&b| b != c).collect();
    for b in others {
        w.cluster.crash_broker(w.now, b, CrashMode::ProcessKill);
        w.env.down.insert(b);
    }
    w.tick_for(40_000);
    assert_eq!(w.txn_coordinator("tx"), c, "still leads, alone in the ISR");
    assert_eq!(
        err(&w.add("tx", ids, &[tp(0)])),
        KafkaError::CoordinatorNotAvailable
    );
}

/// `InitProducerId` for `tx` expecting the producer id and epoch `ids` (KIP-360).
fn bump(ids: (i64, i16)) -> Request {
    Request::InitProducerId {
        transactional_id: Some("tx".into()),
        transaction_timeout_ms: 60_000,
        producer_id: ids.0,
        producer_epoch: ids.1,
    }
}

/// Bumps `tx`'s epoch from `ids` ([`bump`]); returns the new (producer id, epoch).
///
/// # Panics
/// When the bump is refused.
fn bumped(w: &mut World, ids: (i64, i16)) -> (i64, i16) {
    let Response::InitProducerId {
        producer_id,
        producer_epoch,
    } = w.txn("tx", bump(ids))
    else {
        panic!("KIP-360 bump refused")
    };
    (producer_id, producer_epoch)
}

#[test]
fn init_producer_id_retried_with_the_last_epoch_after_the_bump_gets_the_same_answer() {
    let mut w = World::new(TxnProtocol::default());
    let first = w.init("tx");
    let (producer_id, producer_epoch) = bumped(&mut w, first);
    assert_eq!((producer_id, producer_epoch), (first.0, first.1 + 1));
    let again = w.txn("tx", bump(first));
    assert_eq!(
        again,
        Response::InitProducerId {
            producer_id,
            producer_epoch
        },
        "a retry"
    );
    let unknown = w.txn("tx", bump((first.0, first.1 + 7)));
    assert_eq!(err(&unknown), KafkaError::ProducerFenced);
}

/// `TransactionMetadata.prepareIncrementProducerEpoch` (4.x, KIP-360): an InitProducerId
/// without an expected epoch (a new instance) sets the last epoch to -1, so the instance it
/// fenced cannot re-init with its own epoch and be answered as a retry with the new one.
#[test]
fn a_new_instance_init_resets_the_last_epoch_so_the_fenced_instance_cannot_re_init_into_it() {
    let mut w = World::new(TxnProtocol::default());
    let first = w.init("tx");
    let (producer_id, producer_epoch) = bumped(&mut w, first);
    let zombie = (producer_id, producer_epoch);
    let owner = w.init("tx");
    assert_eq!(
        owner,
        (first.0, zombie.1 + 1),
        "the new instance fences the old"
    );
    assert_eq!(err(&w.txn("tx", bump(zombie))), KafkaError::ProducerFenced);
    assert_eq!(
        w.cluster
            .transactions()
            .txn("tx")
            .unwrap()
            .last_producer_epoch,
        -1
    );
    // The owner itself still recovers with its current epoch.
    let again = w.txn("tx", bump(owner));
    assert!(
        matches!(again, Response::InitProducerId { producer_epoch, .. }
        if producer_epoch == owner.1 + 1),
        "{again:?}"
    );
}

#[test]
fn with_kip_890_txn_offset_commit_outside_the_transaction_is_rejected_but_tv2_adds_it() {
    for (protocol, accepted) in [(TxnProtocol::Kip890Part1, false), (TxnProtocol::Tv2, true)] {
        let mut w = World::new(protocol);
        let (member, generation) = join(&mut w, "g");
        let ids = w.init("tx");
        let r = txn_commit(&mut w, ids, &member, generation, 4);
        assert_eq!(
            matches!(r, Response::TxnOffsetCommit { .. }),
            accepted,
            "{protocol:?}: {r:?}"
        );
        if accepted {
            w.end("tx", ids, true);
            w.settle();
            assert_eq!(w.cluster.committed_offsets("g"), vec![(tp(1), 4)]);
        } else {
            assert_eq!(err(&r), KafkaError::InvalidTxnState);
        }
    }
}

#[test]
fn a_partitioned_ex_coordinator_that_still_believes_it_leads_changes_nothing() {
    let mut w = World::new(TxnProtocol::default());
    let ids = w.init("tx");
    w.add("tx", ids, &[tp(0)]);
    let old = w.txn_coordinator("tx");
    for b in (1..=3).filter(|&b| b != old) {
        w.env.cut.insert((old.min(b), old.max(b)));
    }
    w.env.no_controller.insert(old);
    w.tick_for(15_000);
    assert_ne!(
        w.txn_coordinator("tx"),
        old,
        "the controller moved the coordinator"
    );
    let end = Request::EndTxn {
        transactional_id: "tx".into(),
        producer_id: ids.0,
        producer_epoch: ids.1,
        commit: true,
    };
    assert_eq!(err(&w.send_to(old, end)), KafkaError::NotCoordinator);
    assert_eq!(w.state("tx"), TxnState::Ongoing);
}

/// `GroupCoordinatorService` (4.x): group requests are writes to `__consumer_offsets`, which
/// a deposed leader cannot commit; the zombie coordinator changes no group state.
#[test]
fn a_partitioned_ex_group_coordinator_that_still_believes_it_leads_changes_nothing() {
    crate::marks::take();
    let mut w = World::new(TxnProtocol::default());
    let (member, generation) = join(&mut w, "g");
    let old = w.group_coordinator("g");
    for b in (1..=3).filter(|&b| b != old) {
        w.env.cut.insert((old.min(b), old.max(b)));
    }
    w.env.no_controller.insert(old);
    w.tick_for(15_000);
    assert_ne!(w.group_coordinator("g"), old, "the controller moved it");
    let commit = Request::OffsetCommit {
        group_id: "g".into(),
        generation,
        member_id: member.clone(),
        offsets: vec![(tp(0), 7)],
    };
    assert_eq!(err(&w.send_to(old, commit)), KafkaError::NotCoordinator);
    assert!(
        w.cluster.committed_offsets("g").is_empty(),
        "nothing committed"
    );
    let join_new = Request::JoinGroup {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        session_timeout_ms: 30_000,
        rebalance_timeout_ms: 30_000,
        topics: vec!["t".into()],
        protocols: GroupProtocols::offering(&["range"]),
    };
    assert_eq!(err(&w.send_to(old, join_new)), KafkaError::NotCoordinator);
    let beat = Request::Heartbeat {
        group_id: "g".into(),
        generation,
        member_id: member,
    };
    assert_eq!(err(&w.send_to(old, beat)), KafkaError::NotCoordinator);
    crate::marks::assert_hit(&["kafka:group-request-at-deposed-coordinator"]);
}
