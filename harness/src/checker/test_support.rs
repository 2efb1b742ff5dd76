//! Helpers shared by the checker tests: small constructors for the ops of each checker
//! family, so that a test history reads as a list of what happened.
//!
//! # Sections
//! - [`history`]: a history from `(process, kind, value)` triples.
//! - Kafka and sink records of partition `t-0`, key `k`: [`send`], [`poll`], [`log`],
//!   [`write`], [`sink`], [`commit`].
//! - Transactions copying `in-0` to `out-0`: [`txn`], [`committed_view`],
//!   [`partition_state`].
//! - Streams: [`streams_history`]. Change data: [`cdc_history`] with [`c`] and [`u`].
//! - Doris (table `db.clicklog`, job `job`): [`doris_job`], [`doris_txn`].

use super::*;
use crate::history::{DlqRecord, OpKind, RecordRef, SourceRecord, Value};
use crate::history::{StreamsInputRecord, StreamsUpdate};
use serde_json::{json, Value as Json};

/// A history of `ops`, one millisecond apart.
pub fn history(ops: Vec<(&str, OpKind, Value)>) -> History {
    let mut h = History::default();
    for (i, (process, kind, value)) in ops.into_iter().enumerate() {
        h.push(i as u64 * 1_000_000, process, kind, value, None);
    }
    h
}

/// The partition of the Kafka and sink helpers, `t-0`.
pub fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// Record `id` at `t-0@offset`, key `k`.
pub fn rec(id: u64, offset: Offset) -> RecordRef {
    RecordRef {
        id,
        key: Some("k".to_string()),
        tp: tp(),
        offset,
    }
}

fn recs(records: &[(u64, Offset)]) -> Vec<RecordRef> {
    records.iter().map(|&(id, o)| rec(id, o)).collect()
}

/// A send of `id` to `t-0`: acknowledged at `offset`, or not yet placed (`None`).
pub fn send(id: u64, offset: Option<Offset>) -> Value {
    let tp = offset.map(|_| tp());
    Value::Send {
        id,
        key: Some("k".to_string()),
        tp,
        offset,
    }
}

/// A poll returning `(id, offset)` records of `t-0`.
pub fn poll(records: &[(u64, Offset)]) -> Value {
    Value::Poll {
        records: recs(records),
    }
}

/// The final log of `t-0`.
pub fn log(records: &[(u64, Offset)]) -> Value {
    Value::LogState {
        tp: tp(),
        records: recs(records),
    }
}

/// The final sink state.
pub fn sink(rows: &[(u64, Offset)]) -> Value {
    Value::SinkState { rows: recs(rows) }
}

/// A sink write.
pub fn write(rows: &[(u64, Offset)]) -> Value {
    Value::Write { rows: recs(rows) }
}

/// An offset commit of `t-0` up to `next`.
pub fn commit(next: Offset) -> Value {
    Value::Commit {
        offsets: vec![(tp(), next)],
    }
}

/// Default options for a history without a sink.
pub fn kafka_only() -> CheckOptions {
    CheckOptions {
        sink: false,
        ..CheckOptions::default()
    }
}

/// Output record `id` at `out-0@offset`, no key.
pub fn out(id: u64, offset: Offset) -> RecordRef {
    RecordRef {
        id,
        key: None,
        tp: TopicPartition::new("out", 0),
        offset,
    }
}

/// Input record `id` at `in-0@offset`, no key.
pub fn input(id: u64, offset: Offset) -> RecordRef {
    RecordRef {
        id,
        key: None,
        tp: TopicPartition::new("in", 0),
        offset,
    }
}

/// Transaction `id` of `copier-0`: `sends` to `out-0`, input offset `next` of `in-0`.
pub fn txn(id: u64, sends: &[(u64, Offset)], next: Offset) -> Value {
    Value::Txn {
        id,
        transactional_id: "copier-0".into(),
        sends: sends.iter().map(|&(i, o)| out(i, o)).collect(),
        offsets: vec![(TopicPartition::new("in", 0), next)],
    }
}

/// The final read_committed view of `out-0`.
pub fn committed_view(records: &[(u64, Offset)]) -> Value {
    let records = records.iter().map(|&(i, o)| out(i, o)).collect();
    Value::CommittedLogState {
        tp: TopicPartition::new("out", 0),
        records,
    }
}

/// The final HW and LSO of `out-0`.
pub fn partition_state(high_watermark: Offset, last_stable_offset: Offset) -> Value {
    let tp = TopicPartition::new("out", 0);
    Value::PartitionState {
        tp,
        high_watermark,
        last_stable_offset,
    }
}

/// A history of a Streams topology other than the count (`topology`, as
/// `streams-topology` names it): input records `(id, key)` at offsets 0.. of partition 0
/// with event time `100 × id`, committed up to `committed`; output records `(key, value)`
/// at offsets 0.. of output partition 0.
pub fn streams_records_history(
    topology: &str,
    committed: Offset,
    inputs: &[(u64, &str)],
    output: &[(&str, &str)],
) -> History {
    let (input_tp, output_tp) = (
        TopicPartition::new("input", 0),
        TopicPartition::new("output", 0),
    );
    let input = keyed_records(inputs, 100);
    let records = (output.iter().enumerate())
        .map(|(offset, (key, value))| crate::history::StreamsRecord {
            key: key.to_string(),
            value: value.to_string(),
            offset: offset as Offset,
        })
        .collect();
    let finals = [
        Value::StreamsTopology {
            topology: topology.into(),
        },
        Value::StreamsInput {
            tp: input_tp.clone(),
            records: input,
        },
        Value::CommittedOffsets {
            offsets: vec![(input_tp, committed)],
        },
        Value::StreamsRecords {
            tp: output_tp,
            records,
        },
    ];
    let mut h = History::default();
    for value in finals {
        h.push(0, "final", OpKind::Ok, value, None);
    }
    h
}

/// Records `(id, key)` at offsets 0.., event time `ms_per_id × id`.
fn keyed_records(rows: &[(u64, &str)], ms_per_id: i64) -> Vec<StreamsInputRecord> {
    (rows.iter().enumerate())
        .map(|(offset, (id, key))| StreamsInputRecord {
            id: *id,
            key: key.to_string(),
            timestamp_ms: ms_per_id * *id as i64,
            offset: offset as Offset,
        })
        .collect()
}

/// A history of the stream-table join: stream records `(id, key)` all consumed (event time
/// `100 × id`), table updates `(version, key)` at offsets 0.. of table partition 0
/// (committed, event time `10 × version`), output records
/// `(key, value)` as [`streams_records_history`] writes them.
pub fn streams_join_history(
    stream: &[(u64, &str)],
    table: &[(u64, &str)],
    output: &[(&str, &str)],
) -> History {
    let committed = stream.len() as Offset;
    let mut h = streams_records_history("stream-table-join", committed, stream, output);
    let records = keyed_records(table, 10);
    let tp = TopicPartition::new("table", 0);
    h.push(
        0,
        "final",
        OpKind::Ok,
        Value::StreamsTable { tp, records },
        None,
    );
    h
}

/// A Streams history. Input: `k0` three times in window 0 (offsets 0..3), committed up to
/// `committed`; output: the given counts for `k0@0`; no record cache.
pub fn streams_history(committed: Offset, counts: &[u64]) -> History {
    streams_history_cached(committed, counts, None)
}

/// [`streams_history`] of a topology whose record cache holds `cache_max_bytes`.
pub fn streams_history_cached(
    committed: Offset,
    counts: &[u64],
    cache_max_bytes: Option<u64>,
) -> History {
    let (input_tp, output_tp) = (
        TopicPartition::new("input", 0),
        TopicPartition::new("output", 0),
    );
    let mut h = History::default();
    let input = (0..3)
        .map(|i| StreamsInputRecord {
            id: i,
            key: "k0".into(),
            timestamp_ms: 100 * i as i64,
            offset: i as Offset,
        })
        .collect();
    let output = counts
        .iter()
        .enumerate()
        .map(|(i, c)| StreamsUpdate {
            key: "k0".into(),
            window_start_ms: 0,
            count: *c,
            offset: i as Offset,
        })
        .collect();
    let window = Value::StreamsWindow {
        window_size_ms: 5000,
        cache_max_bytes,
    };
    let offsets = vec![(input_tp.clone(), committed)];
    let finals = [
        window,
        Value::StreamsInput {
            tp: input_tp,
            records: input,
        },
        Value::CommittedOffsets { offsets },
        Value::StreamsOutput {
            tp: output_tp,
            records: output,
        },
    ];
    for value in finals {
        h.push(0, "final", OpKind::Ok, value, None);
    }
    h
}

/// A JDBC sink connector's configuration: topic `t`, columns `id,v`, key `id`, upsert,
/// schemaless JSON, DLQ `dlq`.
pub fn cdc_config() -> BTreeMap<String, String> {
    let pairs = [
        ("name", "s"),
        (
            "connector.class",
            "io.confluent.connect.jdbc.JdbcSinkConnector",
        ),
        ("topics", "t"),
        ("connection.url", "jdbc:postgresql://10.0.5.1:5432/db"),
        ("col.names", "id,v"),
        ("pk.fields", "id"),
        ("writeMode", "upsert"),
        ("value.converter.schemas.enable", "false"),
        ("key.converter.schemas.enable", "false"),
        ("errors.deadletterqueue.topic.name", "dlq"),
    ];
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Debezium create of row `{id, v}`.
pub fn c(id: i64, v: &str) -> String {
    json!({"op": "c", "before": null, "after": {"id": id, "v": v}}).to_string()
}

/// A Debezium update of row `id` to `v`.
pub fn u(id: i64, v: &str) -> String {
    json!({"op": "u", "before": {"id": id}, "after": {"id": id, "v": v}}).to_string()
}

/// Rows `(id, v)` as JSON values.
pub fn table_rows(rows: &[(i64, &str)]) -> Vec<Vec<Json>> {
    rows.iter().map(|(i, v)| vec![json!(i), json!(v)]).collect()
}

/// A change-data history: connector config, source log of `values` (record `i` has id and
/// offset `i`), optional reads, the final table, committed offset `committed`, a DLQ
/// holding the records with ids `dlq`.
pub fn cdc_history(
    values: &[String],
    reads: &[&[(i64, &str)]],
    table: &[(i64, &str)],
    committed: i64,
    dlq: &[u64],
) -> History {
    let tp = TopicPartition::new("t", 0);
    let columns = || vec!["id".to_string(), "v".to_string()];
    let mut h = History::default();
    let ok = OpKind::Ok;
    let config = Value::ConnectorConfig {
        connector: "s".into(),
        config: cdc_config(),
    };
    h.push(0, "operator", ok, config, None);
    for read in reads {
        let value = Value::TableRead {
            table: "t".into(),
            columns: columns(),
            rows: table_rows(read),
        };
        h.push(1, "reader", ok, value, None);
    }
    let records = values.iter().enumerate().map(|(i, v)| SourceRecord {
        id: i as u64,
        offset: i as i64,
        key: None,
        value: Some(v.clone()),
    });
    let dlq_records = dlq.iter().enumerate().map(|(i, &id)| DlqRecord {
        id,
        tp: TopicPartition::new("dlq", 0),
        offset: i as Offset,
        headers: Vec::new(),
    });
    let finals = [
        Value::SourceLog {
            tp: tp.clone(),
            records: records.collect(),
        },
        Value::TableState {
            table: "t".into(),
            columns: columns(),
            rows: table_rows(table),
        },
        Value::DlqState {
            topic: "dlq".into(),
            records: dlq_records.collect(),
        },
        Value::CommittedOffsets {
            offsets: vec![(tp, committed)],
        },
    ];
    for value in finals {
        h.push(2, "final", ok, value, None);
    }
    h
}

/// A Routine Load job `job` loading `db.clicklog`, RUNNING, one committed task, with
/// `SHOW ROUTINE LOAD`'s `totalRows`, `loadedRows` and `errorRows`.
pub fn doris_job(total: u64, loaded: u64, errors: u64) -> crate::history::DorisJobFinal {
    crate::history::DorisJobFinal {
        name: "job".into(),
        db: "db".into(),
        table: "clicklog".into(),
        state: "RUNNING".into(),
        reason: None,
        total_rows: total,
        loaded_rows: loaded,
        error_rows: errors,
        unselected_rows: 0,
        committed_task_num: 1,
        aborted_task_num: 0,
    }
}

/// A load transaction into `db.clicklog` with its label and status, begun by `job` (a
/// Routine Load job's name) or by none (a Stream Load).
pub fn doris_txn(
    txn_id: u64,
    label: &str,
    status: &str,
    job: Option<&str>,
) -> crate::history::DorisTxnFinal {
    crate::history::DorisTxnFinal {
        txn_id,
        db: "db".into(),
        table: "clicklog".into(),
        label: label.into(),
        status: status.into(),
        job: job.map(String::from),
    }
}
