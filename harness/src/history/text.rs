//! One-line text renderings of history ops, as the terminal, `eosim replay` and the reports
//! show them: `t=12.345s nemesis kill broker-2`,
//! `t=0.120s producer-0 ok send id=3 key=k3 tp=events-1 offset=5`.

use super::{Op, OpKind, Value};
use eosim_sim::kafka::{Offset, TopicPartition};

/// Ids listed per poll or write line before eliding the rest.
const IDS_SHOWN_MAX: usize = 8;

/// One op as a line: `t=12.345s nemesis kill broker-2`,
/// `t=0.120s producer-0 ok send id=3 key=k3 tp=events-1 offset=5`.
pub fn format_op(op: &Op) -> String {
    let t = format!(
        "t={}.{:03}s",
        op.time_ns / 1_000_000_000,
        op.time_ns / 1_000_000 % 1_000
    );
    let body = match &op.value {
        // Faults read as the nemesis's verbs, without the phase.
        Value::Fault { name, detail } => format!("{name} {detail}").trim_end().to_string(),
        // Effects read as what happened: `effect messages.duplicate: Produce ... twice`.
        Value::Effect { kind, detail } => format!("effect {kind}: {detail}"),
        value => format!("{} {}", kind_name(op.kind), format_value(value)),
    };
    let mut line = format!("{t} {} {body}", op.process);
    if let Some(error) = &op.error {
        line.push_str(&format!(" error={error:?}"));
    }
    line
}

/// The phase as the history spells it: `invoke`, `ok`, `fail`, `info`.
pub fn kind_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Invoke => "invoke",
        OpKind::Ok => "ok",
        OpKind::Fail => "fail",
        OpKind::Info => "info",
    }
}

fn format_value(value: &Value) -> String {
    match value {
        Value::Send {
            id,
            key,
            tp,
            offset,
        } => {
            let mut s = format!("send id={id}");
            if let Some(key) = key {
                s.push_str(&format!(" key={key}"));
            }
            if let Some(tp) = tp {
                s.push_str(&format!(" tp={tp}"));
            }
            if let Some(offset) = offset {
                s.push_str(&format!(" offset={offset}"));
            }
            s
        }
        Value::Poll { records } => format!("poll {}", ids(records.iter().map(|r| r.id))),
        Value::Write { rows } => format!("write {}", ids(rows.iter().map(|r| r.id))),
        Value::SinkState { rows } => format!("sink-state {}", ids(rows.iter().map(|r| r.id))),
        Value::Commit { offsets } => format!("commit {}", offsets_text(offsets)),
        Value::CommittedOffsets { offsets } => {
            format!("committed-offsets {}", offsets_text(offsets))
        }
        Value::LogState { tp, records } => {
            format!("log-state tp={tp} {}", ids(records.iter().map(|r| r.id)))
        }
        Value::RecordsDeleted {
            tp,
            log_start_offset,
            records,
        } => format!(
            "records-deleted tp={tp} log_start_offset={log_start_offset} {}",
            ids(records.iter().map(|r| r.id))
        ),
        Value::Txn {
            id,
            transactional_id,
            sends,
            offsets,
        } => format!(
            "txn id={id} transactional_id={transactional_id} sends {} offsets {}",
            ids(sends.iter().map(|r| r.id)),
            offsets_text(offsets)
        ),
        Value::PartitionState {
            tp,
            high_watermark,
            last_stable_offset,
        } => format!(
            "partition-state tp={tp} high_watermark={high_watermark} \
             last_stable_offset={last_stable_offset}"
        ),
        Value::StreamsInput { tp, records } => {
            format!(
                "streams-input tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::StreamsTable { tp, records } => {
            format!(
                "streams-table tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::StreamsRepartition { tp, records } => {
            format!(
                "streams-repartition tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::StreamsOutput { tp, records } => format!(
            "streams-output tp={tp} updates={} last={}",
            records.len(),
            records.last().map_or(String::new(), |u| format!(
                "{}@{}->{}",
                u.key, u.window_start_ms, u.count
            ))
        ),
        Value::StreamsTopology { topology } => format!("streams-topology {topology}"),
        Value::StreamsRecords { tp, records } => format!(
            "streams-records tp={tp} n={} last={}",
            records.len(),
            records
                .last()
                .map_or(String::new(), |r| format!("{}->{}", r.key, r.value))
        ),
        Value::StreamsRecover { reason, tasks } => {
            format!("streams-recover tasks={tasks:?} reason={reason}")
        }
        Value::StreamsWindow {
            window_size_ms,
            cache_max_bytes,
        } => match cache_max_bytes {
            None => format!("streams-window window_size_ms={window_size_ms}"),
            Some(c) => format!("streams-window window_size_ms={window_size_ms} cache={c}"),
        },
        Value::StreamsCommit {
            guarantee,
            records,
            offsets,
        } => format!(
            "streams-commit {guarantee} records={records} offsets {}",
            offsets_text(offsets)
        ),
        Value::StreamsRestore {
            tp,
            store,
            from_offset,
            restored,
        } => format!(
            "streams-restore tp={tp} store={store} from_offset={from_offset} restored={restored}"
        ),
        Value::CommittedLogState { tp, records } => {
            format!(
                "committed-log-state tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::Fault { name, detail } => format!("{name} {detail}"),
        Value::LoadErrors { label, rows } => {
            format!(
                "load-errors label={label} {}",
                ids(rows.iter().map(|r| r.id))
            )
        }
        Value::DorisState { jobs, txns } => format!(
            "doris-state jobs={} txns={} {}",
            jobs.len(),
            txns.len(),
            jobs.iter()
                .map(|j| format!(
                    "{}={} loaded={} errors={}",
                    j.name, j.state, j.loaded_rows, j.error_rows
                ))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Value::Drain => "drain".to_string(),
        other => other.connect_text().unwrap_or_default(),
    }
}

fn ids(ids: impl ExactSizeIterator<Item = u64>) -> String {
    let n = ids.len();
    let shown: Vec<String> = ids.take(IDS_SHOWN_MAX).map(|id| id.to_string()).collect();
    let more = if n > IDS_SHOWN_MAX { ",…" } else { "" };
    format!("n={n} ids=[{}{more}]", shown.join(","))
}

fn offsets_text(offsets: &[(TopicPartition, Offset)]) -> String {
    let parts: Vec<String> = offsets.iter().map(|(tp, o)| format!("{tp}={o}")).collect();
    parts.join(" ")
}

/// The op's `f`, as `history.jsonl` spells it (the kebab-case variant name): `send`,
/// `write`, `streams-commit`, `fault`.
pub fn value_name(value: &Value) -> &'static str {
    match value {
        Value::Send { .. } => "send",
        Value::Poll { .. } => "poll",
        Value::Commit { .. } => "commit",
        Value::Write { .. } => "write",
        Value::SinkState { .. } => "sink-state",
        Value::CommittedOffsets { .. } => "committed-offsets",
        Value::LogState { .. } => "log-state",
        Value::RecordsDeleted { .. } => "records-deleted",
        Value::Txn { .. } => "txn",
        Value::PartitionState { .. } => "partition-state",
        Value::CommittedLogState { .. } => "committed-log-state",
        Value::StreamsInput { .. } => "streams-input",
        Value::StreamsTable { .. } => "streams-table",
        Value::StreamsRepartition { .. } => "streams-repartition",
        Value::StreamsOutput { .. } => "streams-output",
        Value::StreamsWindow { .. } => "streams-window",
        Value::StreamsTopology { .. } => "streams-topology",
        Value::StreamsRecords { .. } => "streams-records",
        Value::StreamsCommit { .. } => "streams-commit",
        Value::StreamsRecover { .. } => "streams-recover",
        Value::StreamsRestore { .. } => "streams-restore",
        Value::Fault { .. } => "fault",
        Value::Effect { .. } => "effect",
        Value::Drain => "drain",
        Value::ConnectorConfig { .. } => "connector-config",
        Value::TaskStatus { .. } => "task-status",
        Value::RestartTask { .. } => "restart-task",
        Value::SourceLog { .. } => "source-log",
        Value::TableRead { .. } => "table-read",
        Value::TableState { .. } => "table-state",
        Value::DlqState { .. } => "dlq-state",
        Value::LoadErrors { .. } => "load-errors",
        Value::DorisState { .. } => "doris-state",
        Value::SourceOffsets { .. } => "source-offsets",
        Value::ChangeLog { .. } => "change-log",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_names_are_the_jsonl_f_tags() {
        let values = [
            Value::Drain,
            Value::StreamsWindow {
                window_size_ms: 5,
                cache_max_bytes: None,
            },
            Value::Fault {
                name: "kill".into(),
                detail: String::new(),
            },
            Value::CommittedOffsets { offsets: vec![] },
            Value::StreamsRepartition {
                tp: TopicPartition::new("t", 0),
                records: vec![],
            },
            Value::StreamsTopology {
                topology: "aggregate-ids".into(),
            },
            Value::StreamsTable {
                tp: TopicPartition::new("t", 0),
                records: vec![],
            },
            Value::StreamsRecords {
                tp: TopicPartition::new("t", 0),
                records: vec![],
            },
        ];
        for value in values {
            let json = serde_json::to_value(&value).unwrap();
            assert_eq!(json["f"], value_name(&value), "{value:?}");
        }
    }
}
