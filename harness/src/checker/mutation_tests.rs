//! Mutation tests: the bench tests its own checkers (issue 11, item 4).
//!
//! For each checker family (Kafka consume, record sink, transactional copy, read_committed
//! consume, Streams aggregates, change data) a small known-good history is built, and
//! [`check_all`] must find no anomaly in it under every claim: a baseline with an anomaly
//! would make the mutations prove nothing. Then each named [`Mutation`] breaks the history
//! in one way — drops, duplicates or reorders an op, moves a committed offset past the
//! data, makes an aborted record visible, tears a transaction, inflates a count — and the
//! anomaly it stands for must be reported under every claim, with an `Invalid` verdict
//! under each claim that forbids it.
//!
//! [`every_anomaly_has_a_mutation_or_a_stated_exception`] walks [`Anomaly::ALL`]: an
//! anomaly added later without a mutation here (or an exception in [`EXCEPTIONS`] saying
//! why no mutation can produce it) fails that test.

use super::test_support::*;
use super::*;
use crate::history::{Op, OpKind, RecordRef, Value};
use serde_json::{json, Value as Json};

/// The claims every history is checked under.
const CLAIMS: [Claim; 3] = [Claim::ExactlyOnce, Claim::AtLeastOnce, Claim::AtMostOnce];

/// Anomalies that no mutation of a history produces, with the reason. Empty: every
/// anomaly is inferred from ops, so some edit of ops produces it. Keep it so.
const EXCEPTIONS: &[(Anomaly, &str)] = &[];

/// A checker family: a known-good history and the options it is checked under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    /// Producers, a consumer with manual assignment, the final log.
    KafkaConsume,
    /// A sink that writes then commits each record, its final state and offsets.
    RecordSink,
    /// Consume-transform-produce with one aborted transaction and its committed retry.
    TransactionalCopy,
    /// A transactional producer (one abort, one commit) and a read_committed reader.
    ReadCommitted,
    /// A Streams count of one key over three inputs.
    StreamsAggregate,
    /// The stateless Streams topology: ids 1, 2 kept and mapped, 3 dropped by the filter.
    StreamsFilterMapValues,
    /// The id-assigning Streams aggregate: k0 (twice) gets id 0, k1 id 3.
    StreamsAggregateIds,
    /// The Streams stream-table join: stream records 1 (k1) and 3 (k1) joined with k1's
    /// versions 10 and 12, record 2 (k2) without a table value yet.
    StreamsTableJoin,
    /// A JDBC sink applying Debezium change events, with a poison record in the DLQ.
    ChangeData,
    /// A Doris Routine Load job: two loaded rows, one error row, its final statistics.
    RoutineLoad,
    /// A sink behind a transactional upstream: one committed and one aborted transaction,
    /// read read_committed.
    TransactionalSink,
}

impl Family {
    const ALL: [Family; 11] = [
        Family::KafkaConsume,
        Family::RecordSink,
        Family::TransactionalCopy,
        Family::ReadCommitted,
        Family::StreamsAggregate,
        Family::StreamsFilterMapValues,
        Family::StreamsAggregateIds,
        Family::StreamsTableJoin,
        Family::ChangeData,
        Family::RoutineLoad,
        Family::TransactionalSink,
    ];

    fn baseline(self) -> History {
        match self {
            Family::KafkaConsume => kafka_baseline(),
            Family::RecordSink => sink_baseline(),
            Family::TransactionalCopy => txn_baseline(),
            Family::ReadCommitted => read_committed_baseline(),
            Family::StreamsAggregate => streams_history(3, &[1, 2, 3]),
            Family::StreamsFilterMapValues => filter_map_values_baseline(),
            Family::StreamsAggregateIds => aggregate_ids_baseline(),
            Family::StreamsTableJoin => stream_table_join_baseline(),
            Family::ChangeData => cdc_baseline(),
            Family::RoutineLoad => routine_load_baseline(),
            Family::TransactionalSink => txn_sink_baseline(),
        }
    }

    fn options(self, claim: Claim) -> CheckOptions {
        let base = CheckOptions {
            claim,
            ..kafka_only()
        };
        match self {
            // Manual assignment, so that poll order is promised.
            Family::KafkaConsume => CheckOptions {
                subscribe: false,
                ..base
            },
            Family::RecordSink | Family::RoutineLoad => CheckOptions::for_claim(claim),
            Family::TransactionalCopy | Family::ReadCommitted => CheckOptions {
                read_committed: true,
                ..base
            },
            Family::TransactionalSink => CheckOptions {
                read_committed: true,
                ..CheckOptions::for_claim(claim)
            },
            Family::StreamsAggregate
            | Family::StreamsFilterMapValues
            | Family::StreamsAggregateIds
            | Family::StreamsTableJoin
            | Family::ChangeData => base,
        }
    }
}

/// One way to break a known-good history, and the anomaly that must then be reported.
struct Mutation {
    /// What the mutation does, as a phrase.
    name: &'static str,
    /// Whose baseline it edits.
    family: Family,
    /// The edit.
    apply: fn(&mut History),
    /// The anomaly it stands for.
    expected: Anomaly,
}

fn m(name: &'static str, family: Family, apply: fn(&mut History), expected: Anomaly) -> Mutation {
    Mutation {
        name,
        family,
        apply,
        expected,
    }
}

fn mutations() -> Vec<Mutation> {
    let mut all = kafka_mutations();
    all.extend(sink_mutations());
    all.extend(txn_mutations());
    all.extend(read_committed_mutations());
    all.extend(streams_mutations());
    all.extend(streams_records_mutations());
    all.extend(cdc_mutations());
    all.extend(routine_load_mutations());
    all.extend(txn_sink_mutations());
    all
}

// ---------------------------------------------------------------------------------------
// Edits of ops, shared by the families.

/// Index of the first op matching `pred`; the baseline must have one.
fn index_of(h: &History, pred: impl Fn(&Op) -> bool) -> usize {
    h.ops
        .iter()
        .position(pred)
        .expect("the baseline has the op the mutation edits")
}

/// Op indexes are positions: renumber after ops moved.
fn reindex(h: &mut History) {
    for (i, op) in h.ops.iter_mut().enumerate() {
        op.index = i;
    }
}

fn drop_op(h: &mut History, i: usize) {
    h.ops.remove(i);
    reindex(h);
}

fn duplicate_op(h: &mut History, i: usize) {
    let copy = h.ops[i].clone();
    h.ops.insert(i + 1, copy);
    reindex(h);
}

fn move_op(h: &mut History, from: usize, to: usize) {
    let op = h.ops.remove(from);
    h.ops.insert(to, op);
    reindex(h);
}

fn swap_ops(h: &mut History, i: usize, j: usize) {
    h.ops.swap(i, j);
    reindex(h);
}

/// The records an op carries: polled, written, held, logged, or sent in a transaction.
fn records_mut(value: &mut Value) -> &mut Vec<RecordRef> {
    match value {
        Value::Poll { records }
        | Value::LogState { records, .. }
        | Value::CommittedLogState { records, .. } => records,
        Value::Write { rows } | Value::SinkState { rows } => rows,
        Value::Txn { sends, .. } => sends,
        other => panic!("no records in {other:?}"),
    }
}

/// Whether `op` is an `ok` op carrying record `id`.
fn carries(op: &Op, id: u64) -> bool {
    op.kind == OpKind::Ok
        && matches!(&op.value, Value::Poll { records } | Value::Write { rows: records }
            if records.iter().any(|r| r.id == id))
}

fn is_log(op: &Op) -> bool {
    matches!(op.value, Value::LogState { .. })
}

fn is_sink_state(op: &Op) -> bool {
    matches!(op.value, Value::SinkState { .. })
}

/// Removes record `id` from every op matching `pred`.
fn remove_record(h: &mut History, id: u64, pred: impl Fn(&Op) -> bool) {
    for op in h.ops.iter_mut().filter(|op| pred(op)) {
        records_mut(&mut op.value).retain(|r| r.id != id);
    }
}

// ---------------------------------------------------------------------------------------
// Kafka consume: sends 1..=4 acknowledged at t-0@0..4, polled as [1], [2, 3], [4].

fn kafka_baseline() -> History {
    use OpKind::{Invoke, Ok as Done};
    let mut ops = Vec::new();
    for id in 1..=4 {
        ops.push(("producer-0", Invoke, send(id, None)));
        ops.push(("producer-0", Done, send(id, Some(id as Offset - 1))));
    }
    ops.extend([
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("consumer-0", Done, poll(&[(2, 1), (3, 2)])),
        ("consumer-0", Done, poll(&[(4, 3)])),
        ("final", Done, log(&[(1, 0), (2, 1), (3, 2), (4, 3)])),
    ]);
    history(ops)
}

fn kafka_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let k = Family::KafkaConsume;
    vec![
        m(
            "drop an acked record from the final log",
            k,
            |h| remove_record(h, 4, is_log),
            LostWrite,
        ),
        m(
            "duplicate a record in the final log",
            k,
            duplicate_log_record,
            Duplicate,
        ),
        m(
            "move a polled record to another offset",
            k,
            move_polled_record,
            InconsistentOffsets,
        ),
        m(
            "acknowledge two sends at one offset",
            k,
            ack_at_a_taken_offset,
            InconsistentOffsets,
        ),
        m(
            "invoke send 3 before send 2 (a retried batch appended after a later one)",
            k,
            |h| {
                let invoke = |h: &History, id| {
                    index_of(h, |op| {
                        op.kind == OpKind::Invoke && op.value == send(id, None)
                    })
                };
                move_op(h, invoke(h, 3), invoke(h, 2));
            },
            NonmonotonicSend,
        ),
        m(
            "reorder two polls",
            k,
            |h| swap_ops(h, carrier(h, 2), carrier(h, 4)),
            NonmonotonicPoll,
        ),
        m(
            "reorder two records of one poll",
            k,
            |h| {
                let i = carrier(h, 2);
                records_mut(&mut h.ops[i].value).swap(0, 1)
            },
            NonmonotonicPoll,
        ),
        m(
            "duplicate a poll",
            k,
            |h| duplicate_op(h, carrier(h, 2)),
            NonmonotonicPoll,
        ),
        m(
            "drop a poll in the middle",
            k,
            |h| drop_op(h, carrier(h, 2)),
            PollSkip,
        ),
        m(
            "drop the last poll",
            k,
            |h| drop_op(h, carrier(h, 4)),
            Unseen,
        ),
        m(
            "fail a send and unwrite its record",
            k,
            fail_send,
            SendRejected,
        ),
    ]
}

/// Index of the first `ok` poll or write carrying record `id`.
fn carrier(h: &History, id: u64) -> usize {
    index_of(h, |op| carries(op, id))
}

/// Send 3's ack names offset 1, where the ack and the log have record 2.
fn ack_at_a_taken_offset(h: &mut History) {
    let i = index_of(h, |op| {
        op.kind == OpKind::Ok && op.value == send(3, Some(2))
    });
    h.ops[i].value = send(3, Some(1));
}

/// Record 1 appended again at t-0@4: a retry the broker did not deduplicate.
fn duplicate_log_record(h: &mut History) {
    let i = index_of(h, is_log);
    records_mut(&mut h.ops[i].value).push(rec(1, 4));
}

/// The poll of record 2 says offset 5; its ack and the log say 1.
fn move_polled_record(h: &mut History) {
    let i = carrier(h, 2);
    records_mut(&mut h.ops[i].value)[0].offset = 5;
}

/// Send 3 certainly failed (`fail`, MESSAGE_TOO_LARGE) and nothing holds or polled it.
fn fail_send(h: &mut History) {
    let i = index_of(h, |op| {
        op.kind == OpKind::Ok && op.value == send(3, Some(2))
    });
    h.ops[i].kind = OpKind::Fail;
    h.ops[i].value = send(3, None);
    h.ops[i].error = Some("broker error MessageTooLarge(10)".to_string());
    remove_record(h, 3, is_log);
    drop_op(h, index_of(h, |op| carries(op, 3)));
}

// ---------------------------------------------------------------------------------------
// Record sink: records 1, 2, 3 at t-0@0..3, each written, then its offset committed.

fn sink_baseline() -> History {
    use OpKind::Ok as Done;
    let committed = Value::CommittedOffsets {
        offsets: vec![(tp(), 3)],
    };
    history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("producer-0", Done, send(3, Some(2))),
        ("sink-0", Done, poll(&[(1, 0), (2, 1), (3, 2)])),
        ("sink-0", Done, write(&[(1, 0)])),
        ("sink-0", Done, commit(1)),
        ("sink-0", Done, write(&[(2, 1)])),
        ("sink-0", Done, commit(2)),
        ("sink-0", Done, write(&[(3, 2)])),
        ("sink-0", Done, commit(3)),
        ("final", Done, log(&[(1, 0), (2, 1), (3, 2)])),
        ("final", Done, sink(&[(1, 0), (2, 1), (3, 2)])),
        ("final", Done, committed),
    ])
}

fn is_write_of(op: &Op, id: u64) -> bool {
    matches!(&op.value, Value::Write { .. }) && carries(op, id)
}

fn is_commit_to(op: &Op, next: Offset) -> bool {
    op.kind == OpKind::Ok && op.value == commit(next)
}

fn sink_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let s = Family::RecordSink;
    vec![
        m(
            "drop a row from the final sink state",
            s,
            |h| remove_record(h, 2, is_sink_state),
            SinkLost,
        ),
        m(
            "replay a write into a table that does not deduplicate",
            s,
            replay_write,
            SinkDuplicate,
        ),
        m(
            "reorder two rows of one key in the sink",
            s,
            |h| {
                let i = index_of(h, is_sink_state);
                records_mut(&mut h.ops[i].value).swap(0, 1)
            },
            SinkReorder,
        ),
        // Sink-reorder is judged on the final storage order only; swapped writes with a
        // commit between them show as that commit running ahead of the data.
        m(
            "reorder two writes of one key",
            s,
            |h| {
                let (i, j) = (
                    index_of(h, |op| is_write_of(op, 1)),
                    index_of(h, |op| is_write_of(op, 2)),
                );
                swap_ops(h, i, j)
            },
            ProgressAheadOfData,
        ),
        m(
            "drop a sink write",
            s,
            |h| drop_op(h, index_of(h, |op| is_write_of(op, 2))),
            ProgressAheadOfData,
        ),
        m(
            "move a commit ahead of the write it covers",
            s,
            |h| {
                let (w, c) = (
                    index_of(h, |op| is_write_of(op, 3)),
                    index_of(h, |op| is_commit_to(op, 3)),
                );
                swap_ops(h, w, c)
            },
            ProgressAheadOfData,
        ),
        m(
            "move a committed offset past the sink",
            s,
            |h| {
                let i = index_of(h, |op| is_commit_to(op, 2));
                h.ops[i].value = commit(3)
            },
            ProgressAheadOfData,
        ),
    ]
}

/// The write of record 2 happens twice and the table keeps both rows.
fn replay_write(h: &mut History) {
    duplicate_op(h, index_of(h, |op| is_write_of(op, 2)));
    let i = index_of(h, is_sink_state);
    records_mut(&mut h.ops[i].value).push(rec(2, 1));
}

// ---------------------------------------------------------------------------------------
// Transactional copy, shaped like the `transactional-copy` workload (output ids are input
// ids): input 0, 1 at in-0@0..2. consumer-0 polled input 0 and transaction 1 copied it to
// out-0@0, then aborted (marker at @1); consumer-1, given the partition, polled both and
// transaction 2 copied them to @2, @3 and committed (marker at @4) with input offset 2.

fn txn_baseline() -> History {
    use OpKind::{Fail, Invoke, Ok as Done};
    let copied = [(0, 2), (1, 3)];
    let polled = |ids: &[u64]| Value::Poll {
        records: ids.iter().map(|&id| input(id, id as Offset)).collect(),
    };
    let input_log = Value::LogState {
        tp: TopicPartition::new("in", 0),
        records: vec![input(0, 0), input(1, 1)],
    };
    let committed = Value::CommittedOffsets {
        offsets: vec![(TopicPartition::new("in", 0), 2)],
    };
    history(vec![
        ("consumer-0", Done, polled(&[0])),
        ("consumer-0", Invoke, txn(1, &[(0, 0)], 1)),
        ("consumer-0", Fail, txn(1, &[(0, 0)], 1)),
        ("consumer-1", Done, polled(&[0, 1])),
        ("consumer-1", Invoke, txn(2, &copied, 2)),
        ("consumer-1", Done, txn(2, &copied, 2)),
        ("final", Done, input_log),
        ("final", Done, committed_view(&copied)),
        ("final", Done, partition_state(5, 5)),
        ("final", Done, committed),
    ])
}

fn is_view(op: &Op) -> bool {
    matches!(op.value, Value::CommittedLogState { .. })
}

fn is_txn(op: &Op, id: u64) -> bool {
    matches!(op.value, Value::Txn { id: t, .. } if t == id)
}

fn txn_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let t = Family::TransactionalCopy;
    vec![
        m(
            "make an aborted record visible in the committed view",
            t,
            |h| {
                let i = index_of(h, is_view);
                records_mut(&mut h.ops[i].value).insert(0, out(0, 0))
            },
            AbortedRead,
        ),
        m(
            "tear a committed transaction",
            t,
            |h| remove_record(h, 1, is_view),
            TornTransaction,
        ),
        m(
            "drop a committed transaction from the view",
            t,
            |h| {
                let i = index_of(h, is_view);
                records_mut(&mut h.ops[i].value).clear()
            },
            LostWrite,
        ),
        m(
            "leave a transaction hanging",
            t,
            |h| {
                let i = index_of(h, |op| matches!(op.value, Value::PartitionState { .. }));
                h.ops[i].value = partition_state(5, 3)
            },
            StuckLso,
        ),
        m(
            "commit input offsets without retrying aborted output",
            t,
            |h| remove_record(h, 0, |op| is_txn(op, 2) || is_view(op)),
            OffsetsForAbortedOutput,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Read committed: a transactional producer sent record 10 to out-0@0 and aborted (marker
// at @1), then sent 10 and 11 to @2, @3 and committed (marker at @4); after the commit
// request a read_committed reader polled 10 and 11.

/// Transaction `id` of `producer-0`, with no input offsets.
fn producer_txn(id: u64, sends: &[(u64, Offset)]) -> Value {
    Value::Txn {
        id,
        transactional_id: "producer-0".into(),
        sends: sends.iter().map(|&(i, o)| out(i, o)).collect(),
        offsets: Vec::new(),
    }
}

fn read_committed_baseline() -> History {
    use OpKind::{Fail, Invoke, Ok as Done};
    let sent = [(10, 2), (11, 3)];
    let reader_poll = Value::Poll {
        records: vec![out(10, 2), out(11, 3)],
    };
    history(vec![
        ("producer-0", Invoke, producer_txn(1, &[(10, 0)])),
        ("producer-0", Fail, producer_txn(1, &[(10, 0)])),
        ("producer-0", Invoke, producer_txn(2, &sent)),
        ("producer-0", Done, producer_txn(2, &sent)),
        ("reader-0", Done, reader_poll),
        ("final", Done, committed_view(&sent)),
        ("final", Done, partition_state(5, 5)),
    ])
}

fn is_poll(op: &Op) -> bool {
    matches!(op.value, Value::Poll { .. })
}

fn read_committed_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let r = Family::ReadCommitted;
    vec![
        m(
            "make an aborted record visible to a poll",
            r,
            |h| {
                let i = index_of(h, is_poll);
                records_mut(&mut h.ops[i].value).insert(0, out(10, 0))
            },
            AbortedRead,
        ),
        m(
            "move a poll ahead of the commit request",
            r,
            |h| {
                let (poll, invoke) = (index_of(h, is_poll), index_of(h, |op| is_txn(op, 2)));
                move_op(h, poll, invoke)
            },
            UncommittedRead,
        ),
        m(
            "tear a produced transaction",
            r,
            |h| remove_record(h, 10, is_view),
            TornTransaction,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Streams: k0 counted 1, 2, 3 over three committed inputs.

/// Edits the updates of the output, then renumbers their offsets.
fn edit_updates(h: &mut History, edit: impl FnOnce(&mut Vec<crate::history::StreamsUpdate>)) {
    let i = index_of(h, |op| matches!(op.value, Value::StreamsOutput { .. }));
    let Value::StreamsOutput { records, .. } = &mut h.ops[i].value else {
        unreachable!("index_of found a StreamsOutput");
    };
    edit(records);
    for (offset, u) in records.iter_mut().enumerate() {
        u.offset = offset as Offset;
    }
}

fn streams_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let s = Family::StreamsAggregate;
    vec![
        m(
            "inflate the final count",
            s,
            |h| {
                edit_updates(h, |u| {
                    let mut next = u[2].clone();
                    next.count = 4;
                    u.push(next)
                })
            },
            AggregateOverCount,
        ),
        m(
            "deflate the final count",
            s,
            |h| {
                edit_updates(h, |u| {
                    u.pop();
                })
            },
            AggregateUnderCount,
        ),
        m(
            "drop every update of a key",
            s,
            |h| edit_updates(h, Vec::clear),
            MissingAggregate,
        ),
        m(
            "add an update of a key without input",
            s,
            |h| {
                edit_updates(h, |u| {
                    let mut other = u[0].clone();
                    other.key = "k9".into();
                    u.push(other)
                })
            },
            ExtraAggregate,
        ),
        m(
            "duplicate an update",
            s,
            |h| edit_updates(h, |u| u.insert(2, u[1].clone())),
            AggregateSequence,
        ),
        m(
            "reorder two updates",
            s,
            |h| edit_updates(h, |u| u.swap(1, 2)),
            AggregateSequence,
        ),
        m(
            "move the committed offset behind the output",
            s,
            |h| {
                let i = index_of(h, |op| matches!(op.value, Value::CommittedOffsets { .. }));
                let Value::CommittedOffsets { offsets } = &mut h.ops[i].value else {
                    unreachable!("index_of found CommittedOffsets");
                };
                offsets[0].1 = 2
            },
            AggregateOverCount,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Streams topologies other than the count: the output records as text.

fn filter_map_values_baseline() -> History {
    let inputs = [(1, "k1"), (2, "k2"), (3, "k0")];
    let output = [("k1", "1,100,1"), ("k2", "2,200,4")];
    streams_records_history("filter-map-values", 3, &inputs, &output)
}

fn aggregate_ids_baseline() -> History {
    let inputs = [(1, "k0"), (2, "k1"), (3, "k0")];
    let output = [("k0", "0"), ("k1", "3"), ("k0", "0")];
    streams_records_history("aggregate-ids", 3, &inputs, &output)
}

fn stream_table_join_baseline() -> History {
    let stream = [(1, "k1"), (2, "k2"), (3, "k1")];
    let table = [(10, "k1"), (11, "k2"), (12, "k1")];
    streams_join_history(&stream, &table, &[("k1", "1,10"), ("k1", "3,12")])
}

/// Edits the output records, then renumbers their offsets.
fn edit_records(h: &mut History, edit: impl FnOnce(&mut Vec<crate::history::StreamsRecord>)) {
    let i = index_of(h, |op| matches!(op.value, Value::StreamsRecords { .. }));
    let Value::StreamsRecords { records, .. } = &mut h.ops[i].value else {
        unreachable!("index_of found a StreamsRecords");
    };
    edit(records);
    for (offset, r) in records.iter_mut().enumerate() {
        r.offset = offset as Offset;
    }
}

fn streams_records_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let (f, ids) = (Family::StreamsFilterMapValues, Family::StreamsAggregateIds);
    vec![
        m(
            "drop a kept record",
            f,
            |h| edit_records(h, |r| drop(r.remove(1))),
            SinkLost,
        ),
        m(
            "write a kept record twice",
            f,
            |h| edit_records(h, |r| r.push(r[0].clone())),
            SinkDuplicate,
        ),
        m(
            "write a record the filter drops",
            f,
            |h| {
                edit_records(h, |r| {
                    let mut dropped = r[0].clone();
                    (dropped.key, dropped.value) = ("k0".into(), "3,300,9".into());
                    r.push(dropped)
                })
            },
            UnexpectedOutput,
        ),
        m(
            "give a key a second id",
            ids,
            |h| edit_records(h, |r| r[2].value = "6".into()),
            IdReassigned,
        ),
        m(
            "give an id to a second key",
            ids,
            |h| edit_records(h, |r| r[1].value = "0".into()),
            IdReused,
        ),
        m(
            "drop every id of a key",
            ids,
            |h| edit_records(h, |r| drop(r.remove(1))),
            MissingAggregate,
        ),
        m(
            "give an id to a key without input",
            ids,
            |h| {
                edit_records(h, |r| {
                    let mut other = r[1].clone();
                    (other.key, other.value) = ("k9".into(), "9".into());
                    r.push(other)
                })
            },
            ExtraAggregate,
        ),
        m(
            "join a stream record with a version the table never committed",
            Family::StreamsTableJoin,
            |h| edit_records(h, |r| r[1].value = "3,13".into()),
            UnwrittenTableVersion,
        ),
        m(
            "join a stream record with a version superseded before its event time",
            Family::StreamsTableJoin,
            |h| edit_records(h, |r| r[1].value = "3,10".into()),
            StaleJoin,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Change data: create 1, a poison record (in the DLQ), create 2, update 1; two reads of
// row 1 going forward; the final table after every change.

fn cdc_baseline() -> History {
    let events = [c(1, "a"), "not json".to_string(), c(2, "b"), u(1, "a2")];
    let reads: &[&[(i64, &str)]] = &[&[(1, "a")], &[(1, "a2")]];
    cdc_history(&events, reads, &[(1, "a2"), (2, "b")], 4, &[1])
}

/// The final table's rows.
fn table_mut(h: &mut History) -> &mut Vec<Vec<Json>> {
    let i = index_of(h, |op| matches!(op.value, Value::TableState { .. }));
    let Value::TableState { rows, .. } = &mut h.ops[i].value else {
        unreachable!("index_of found a TableState");
    };
    rows
}

fn is_read(op: &Op) -> bool {
    matches!(op.value, Value::TableRead { .. })
}

fn cdc_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let d = Family::ChangeData;
    vec![
        m(
            "drop a row from the final table",
            d,
            |h| {
                table_mut(h).remove(1);
            },
            CdcFinalState,
        ),
        m(
            "revert a row to an older version",
            d,
            |h| table_mut(h)[0] = table_rows(&[(1, "a")]).remove(0),
            CdcFinalState,
        ),
        m(
            "add a row no event names",
            d,
            |h| table_mut(h).extend(table_rows(&[(9, "z")])),
            CdcFinalState,
        ),
        m(
            "duplicate a row of the final table",
            d,
            |h| {
                let row = table_mut(h)[1].clone();
                table_mut(h).push(row)
            },
            CdcDuplicateRow,
        ),
        m(
            "reorder two reads",
            d,
            |h| {
                let first = index_of(h, is_read);
                swap_ops(h, first, first + 1)
            },
            CdcRegression,
        ),
        m(
            "drop a record from the DLQ",
            d,
            |h| {
                let i = index_of(h, |op| matches!(op.value, Value::DlqState { .. }));
                let Value::DlqState { records, .. } = &mut h.ops[i].value else {
                    unreachable!("index_of found a DlqState");
                };
                records.clear()
            },
            CdcSkipped,
        ),
        m(
            "add a field the target lacks to an event",
            d,
            add_drifted_field,
            CdcDroppedField,
        ),
    ]
}

/// Schema drift: create 2 carries `email`, which `col.names` (id, v) lacks.
fn add_drifted_field(h: &mut History) {
    let i = index_of(h, |op| matches!(op.value, Value::SourceLog { .. }));
    let Value::SourceLog { records, .. } = &mut h.ops[i].value else {
        unreachable!("index_of found a SourceLog");
    };
    let after = json!({"id": 2, "v": "b", "email": "b@x"});
    records[2].value = Some(json!({"op": "c", "before": null, "after": after}).to_string());
}

// ---------------------------------------------------------------------------------------
// The tests.

/// What is wrong with `mutation`'s history under `claim`, if anything.
fn misjudged(mutation: &Mutation, h: &History, claim: Claim) -> Option<String> {
    let options = mutation.family.options(claim);
    let result = check_all(h, &options);
    let what = format!("{:?} `{}` under {claim:?}", mutation.family, mutation.name);
    if !result.anomalies.contains_key(&mutation.expected) {
        return Some(format!(
            "{what}: {} not reported; found {:?}",
            mutation.expected,
            result.case_texts(8)
        ));
    }
    let forbidden = options.forbidden_set().contains(&mutation.expected);
    let failed =
        result.validity == Validity::Invalid && result.forbidden.contains(&mutation.expected);
    if forbidden && !failed {
        return Some(format!(
            "{what}: {} is forbidden, yet validity {:?}, forbidden {:?}",
            mutation.expected, result.validity, result.forbidden
        ));
    }
    None
}

#[test]
fn every_baseline_is_clean_under_every_claim() {
    for family in Family::ALL {
        for claim in CLAIMS {
            let result = check_all(&family.baseline(), &family.options(claim));
            assert!(
                result.anomalies.is_empty(),
                "{family:?} under {claim:?}: {:?}",
                result.case_texts(8)
            );
            assert_eq!(
                result.validity,
                Validity::Valid,
                "{family:?}: {:?}",
                result.error
            );
        }
    }
}

#[test]
fn every_mutation_reports_its_anomaly_and_fails_the_claims_that_forbid_it() {
    let mut failures = Vec::new();
    for mutation in mutations() {
        let baseline = mutation.family.baseline();
        let mut h = baseline.clone();
        (mutation.apply)(&mut h);
        assert_ne!(h, baseline, "`{}` changed nothing", mutation.name);
        failures.extend(
            CLAIMS
                .iter()
                .filter_map(|&claim| misjudged(&mutation, &h, claim)),
        );
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_anomaly_has_a_mutation_or_a_stated_exception() {
    let all = mutations();
    let covered: BTreeSet<Anomaly> = all.iter().map(|m| m.expected).collect();
    let excepted: BTreeSet<Anomaly> = EXCEPTIONS.iter().map(|(a, _)| *a).collect();
    let missing: Vec<Anomaly> = Anomaly::ALL
        .into_iter()
        .filter(|a| !covered.contains(a) && !excepted.contains(a))
        .collect();
    assert!(
        missing.is_empty(),
        "anomalies no mutation produces: {missing:?}; add a mutation, or an exception saying \
         why none can"
    );
    let stale: Vec<&Anomaly> = covered.intersection(&excepted).collect();
    assert!(
        stale.is_empty(),
        "exceptions a mutation does produce: {stale:?}"
    );
    assert!(
        EXCEPTIONS.iter().all(|(_, why)| !why.is_empty()),
        "an exception needs its reason"
    );
    let families: BTreeSet<Family> = all.iter().map(|m| m.family).collect();
    assert_eq!(
        families.len(),
        Family::ALL.len(),
        "a family without mutations"
    );
    let names: BTreeSet<&str> = all.iter().map(|m| m.name).collect();
    assert_eq!(names.len(), all.len(), "two mutations share a name");
}

// ---------------------------------------------------------------------------------------
// Routine Load: records 1, 2, 3 at t-0@0..3; one task loads 1 and 3 and filters 2 (an
// error row) under label rl-1-task-1, VISIBLE; SHOW ROUTINE LOAD says 3 total, 2 loaded,
// 1 error.

fn load_errors(label: &str, rows: &[(u64, Offset)]) -> Value {
    Value::LoadErrors {
        label: label.into(),
        rows: rows.iter().map(|&(id, o)| rec(id, o)).collect(),
    }
}

fn routine_load_baseline() -> History {
    use OpKind::Ok as Done;
    let state = Value::DorisState {
        jobs: vec![doris_job(3, 2, 1)],
        txns: vec![doris_txn(1, "rl-1-task-1", "VISIBLE", Some("job"))],
    };
    history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("producer-0", Done, send(3, Some(2))),
        ("doris-be/task-0", Done, write(&[(1, 0), (3, 2)])),
        (
            "doris-be/task-0",
            Done,
            load_errors("rl-1-task-1", &[(2, 1)]),
        ),
        ("doris-be/task-0", Done, commit(3)),
        ("final", Done, log(&[(1, 0), (2, 1), (3, 2)])),
        ("final", Done, sink(&[(1, 0), (3, 2)])),
        (
            "final",
            Done,
            Value::CommittedOffsets {
                offsets: vec![(tp(), 3)],
            },
        ),
        ("final", Done, state),
    ])
}

fn is_doris_state(op: &Op) -> bool {
    matches!(op.value, Value::DorisState { .. })
}

/// Edits the final `DorisState`'s jobs and transactions with `edit`.
fn edit_doris_state(
    h: &mut History,
    edit: impl FnOnce(&mut Vec<crate::history::DorisJobFinal>, &mut Vec<crate::history::DorisTxnFinal>),
) {
    let i = index_of(h, is_doris_state);
    let Value::DorisState { jobs, txns } = &mut h.ops[i].value else {
        unreachable!("index_of found a DorisState")
    };
    edit(jobs, txns);
}

fn routine_load_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let r = Family::RoutineLoad;
    vec![
        m(
            "drop the error rows of a committed task",
            r,
            |h| {
                drop_op(
                    h,
                    index_of(h, |op| matches!(op.value, Value::LoadErrors { .. })),
                )
            },
            SinkLost,
        ),
        m(
            "abort the transaction that filtered the error row",
            r,
            |h| edit_doris_state(h, |_, txns| txns[0].status = "ABORTED".into()),
            SinkLost,
        ),
        m(
            "count a loaded row the table does not hold",
            r,
            |h| {
                edit_doris_state(h, |jobs, _| {
                    jobs[0].total_rows = 4;
                    jobs[0].loaded_rows = 3;
                })
            },
            RoutineLoadStatistic,
        ),
        m(
            "count an error row twice",
            r,
            |h| {
                edit_doris_state(h, |jobs, _| {
                    jobs[0].total_rows = 4;
                    jobs[0].error_rows = 2;
                })
            },
            RoutineLoadStatistic,
        ),
        m(
            "make totalRows differ from loaded + error + unselected",
            r,
            |h| edit_doris_state(h, |jobs, _| jobs[0].total_rows = 5),
            RoutineLoadStatistic,
        ),
        m(
            "commit the label a second time",
            r,
            |h| {
                edit_doris_state(h, |_, txns| {
                    txns.push(doris_txn(2, "rl-1-task-1", "VISIBLE", Some("job")));
                })
            },
            LabelLoadedTwice,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Transactional sink: an upstream transactional producer sent records 1, 2 to t-0@0, @1
// in transaction 0 and committed (marker at @2), then record 3 to @3 in transaction 1 and
// aborted (marker at @4). A read_committed sink polled 1 and 2 (3 filtered), wrote them
// and committed offset 5, past the aborted record and both markers. Record 3 is in the
// final (read_uncommitted) log and not in the sink, as it must be: no `sink-lost`, no
// `progress-ahead-of-data`, no `unseen`.

/// Transaction `id` of the upstream producer, its sends in `t-0`.
fn upstream_txn(id: u64, sends: &[(u64, Offset)]) -> Value {
    Value::Txn {
        id,
        transactional_id: "upstream".into(),
        sends: sends.iter().map(|&(i, o)| rec(i, o)).collect(),
        offsets: Vec::new(),
    }
}

fn txn_sink_baseline() -> History {
    use OpKind::{Fail, Invoke, Ok as Done};
    let committed = Value::CommittedOffsets {
        offsets: vec![(tp(), 5)],
    };
    history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("producer-0", Invoke, upstream_txn(0, &[(1, 0), (2, 1)])),
        ("producer-0", Done, upstream_txn(0, &[(1, 0), (2, 1)])),
        ("producer-0", Done, send(3, Some(3))),
        ("producer-0", Invoke, upstream_txn(1, &[(3, 3)])),
        ("producer-0", Fail, upstream_txn(1, &[(3, 3)])),
        ("sink-0", Done, poll(&[(1, 0), (2, 1)])),
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("sink-0", Done, commit(5)),
        ("final", Done, log(&[(1, 0), (2, 1), (3, 3)])),
        ("final", Done, sink(&[(1, 0), (2, 1)])),
        ("final", Done, committed),
    ])
}

fn is_upstream_txn(op: &Op, id: u64) -> bool {
    matches!(&op.value, Value::Txn { id: i, .. } if *i == id)
}

/// The sink read the aborted record 3 (read_uncommitted) and loaded it.
fn load_aborted_record(h: &mut History) {
    let w = index_of(h, |op| is_write_of(op, 2));
    records_mut(&mut h.ops[w].value).push(rec(3, 3));
    let i = index_of(h, is_sink_state);
    records_mut(&mut h.ops[i].value).push(rec(3, 3));
}

fn txn_sink_mutations() -> Vec<Mutation> {
    use Anomaly::*;
    let t = Family::TransactionalSink;
    vec![
        m(
            "load a record of an aborted transaction into the sink",
            t,
            load_aborted_record,
            AbortedInSink,
        ),
        // The same history with transaction 1 committed: record 3 is then data, and its
        // absence from the sink a loss. So the baseline is clean because of the abort.
        m(
            "commit the transaction the sink skipped",
            t,
            |h| {
                let i = h.ops.iter().rposition(|op| is_upstream_txn(op, 1));
                h.ops[i.expect("transaction 1 completes")].kind = OpKind::Ok
            },
            SinkLost,
        ),
    ]
}

/// An undecided transaction (its commit's outcome unknown) neither makes its record
/// expected in the sink nor forbidden there.
#[test]
fn an_undecided_transactions_record_is_neither_expected_nor_forbidden_in_the_sink() {
    use Anomaly::*;
    let undecided = |h: &mut History| {
        let i = h.ops.iter().rposition(|op| is_upstream_txn(op, 1));
        h.ops[i.expect("transaction 1 completes")].kind = OpKind::Info;
    };
    let mut skipped = txn_sink_baseline();
    undecided(&mut skipped);
    let mut loaded = skipped.clone();
    load_aborted_record(&mut loaded);
    for claim in CLAIMS {
        let options = Family::TransactionalSink.options(claim);
        for h in [&skipped, &loaded] {
            let result = check_all(h, &options);
            for anomaly in [SinkLost, AbortedInSink, ProgressAheadOfData] {
                assert!(
                    !result.anomalies.contains_key(&anomaly),
                    "{claim:?}: {:?}",
                    result.case_texts(8)
                );
            }
        }
    }
}

/// Change data behind a transactional upstream: transaction 0 wrote `c(1, "a")` at t-0@0
/// and committed, transaction 1 wrote `u(1, "a2")` at t-0@1 and aborted (`aborted`) or
/// committed; the final table holds `table`.
fn cdc_txn_history(table: &[(i64, &str)], aborted: bool) -> History {
    let mut h = cdc_history(&[c(1, "a"), u(1, "a2")], &[], table, 2, &[]);
    let second = if aborted { OpKind::Fail } else { OpKind::Ok };
    for (id, offset, end) in [(0, 0, OpKind::Ok), (1, 1, second)] {
        for kind in [OpKind::Invoke, end] {
            h.push(
                3,
                "producer-0",
                kind,
                upstream_txn(id, &[(id, offset)]),
                None,
            );
        }
    }
    h
}

/// The change-data form of the rule: the reference leaves out aborted events, and a table
/// that matches only with them applied is `aborted-in-sink`, not `cdc-final-state`.
#[test]
fn a_table_that_applied_an_aborted_change_event_is_aborted_in_sink() {
    use Anomaly::{AbortedInSink, CdcFinalState};
    for claim in CLAIMS {
        let options = Family::ChangeData.options(claim);
        let clean = check_all(&cdc_txn_history(&[(1, "a")], true), &options);
        assert!(clean.anomalies.is_empty(), "{:?}", clean.case_texts(8));
        let applied = check_all(&cdc_txn_history(&[(1, "a2")], true), &options);
        assert!(applied.forbidden.contains(&AbortedInSink), "{claim:?}");
        assert!(!applied.anomalies.contains_key(&CdcFinalState), "{claim:?}");
        assert_eq!(applied.validity, Validity::Invalid);
        // Had transaction 1 committed, the clean table would be the one missing a change.
        let committed = check_all(&cdc_txn_history(&[(1, "a")], false), &options);
        assert!(
            committed.anomalies.contains_key(&CdcFinalState),
            "{claim:?}"
        );
    }
}
