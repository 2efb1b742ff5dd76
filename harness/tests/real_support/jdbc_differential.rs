//! The JDBC sink's transaction shape, model against real PostgreSQL 15: the same
//! [`JdbcSinkTask`] (Confluent's `JdbcDbWriter.write`: one transaction per `put`, the
//! statements in `batch.size` chunks, a data error rolling the whole put back, its record
//! reported and the rest retried) writes generated puts once through the PostgreSQL model
//! (`eosim_sim::postgres::service::PostgresWorld`, the server the simulation runs) and once
//! through the real client into a real server. Per put they must agree on the outcome (ok,
//! or the error the task returns) and on which records went to the errant-record reporter
//! with which SQLSTATE; after the last put, on the table's rows.
//!
//! Generated: `writeMode` insert or upsert, `batch.size` 1..=4, 1..=5 puts of 1..=6
//! records over 4 keys: rows, rows whose integer column holds text (22P02) or a value out
//! of `integer`'s range (22003), rows without the key (23502), and tombstones
//! (`delete.enabled`). Under insert mode a second row of a key is a 23505, not a data
//! error: the put fails (`max.retries` 0) and the case stops there.

use super::real_support;
use async_trait::async_trait;
use eosim::client::postgres::{PgClientError, PostgresClient};
use eosim::client::real::RealPostgres;
use eosim::connect::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask};
use eosim::sinks::jdbc::{JdbcSinkConfig, JdbcSinkTask};
use eosim_sim::kafka::TopicPartition;
use eosim_sim::postgres::service::{PostgresWorld, Request, Response};
use eosim_sim::postgres::{Database, DbConfig, Reply, SessionId, SqlState, Statement};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// One generated record: a key (0..4) and what its value holds.
#[derive(Debug, Clone)]
pub enum Rec {
    /// `{"id": k, "v": "...", "n": n}`.
    Row(u8, i64),
    /// `"n"` is text: 22P02 into an integer column.
    BadInteger(u8),
    /// `"n"` past `integer`'s range: 22003.
    OutOfRange(u8),
    /// No `"id"`: 23502 on the primary key.
    NoKey,
    /// A tombstone for key k.
    Tombstone(u8),
}

/// A generated case: `writeMode` upsert (else insert), `batch.size`, the puts.
#[derive(Debug, Clone)]
pub struct JdbcCase {
    upsert: bool,
    batch_size: usize,
    puts: Vec<Vec<Rec>>,
}

fn rec() -> impl Strategy<Value = Rec> {
    prop_oneof![
        6 => (0u8..4, 0i64..100).prop_map(|(k, n)| Rec::Row(k, n)),
        1 => (0u8..4).prop_map(Rec::BadInteger),
        1 => (0u8..4).prop_map(Rec::OutOfRange),
        1 => Just(Rec::NoKey),
        1 => (0u8..4).prop_map(Rec::Tombstone),
    ]
}

/// The generator of [`JdbcCase`]s.
pub fn case_strategy() -> impl Strategy<Value = JdbcCase> {
    (
        any::<bool>(),
        1usize..=4,
        prop::collection::vec(prop::collection::vec(rec(), 1..=6), 1..=5),
    )
        .prop_map(|(upsert, batch_size, puts)| JdbcCase {
            upsert,
            batch_size,
            puts,
        })
}

fn sink_record(offset: i64, r: &Rec) -> SinkRecord {
    use serde_json::json;
    let (key, value) = match r {
        Rec::Row(k, n) => (
            json!({"id": k}),
            Some(json!({"id": k, "v": format!("v{n}"), "n": n})),
        ),
        Rec::BadInteger(k) => (
            json!({"id": k}),
            Some(json!({"id": k, "v": "x", "n": "abc"})),
        ),
        Rec::OutOfRange(k) => (
            json!({"id": k}),
            Some(json!({"id": k, "v": "x", "n": 30_000_000_000i64})),
        ),
        Rec::NoKey => (json!({}), Some(json!({"v": "x", "n": 1}))),
        Rec::Tombstone(k) => (json!({"id": k}), None),
    };
    SinkRecord {
        tp: TopicPartition::new("jdbc-diff", 0),
        offset,
        key: Some(key),
        value,
        headers: Vec::new(),
        timestamp_ms: 0,
    }
}

fn config(case: &JdbcCase, table: &str) -> JdbcSinkConfig {
    let raw: BTreeMap<String, String> = [
        ("connection.url", "jdbc:postgresql://127.0.0.1:5432/eosim"),
        ("target.tablename", table),
        ("col.names", "id,v,n"),
        ("col.types", "integer,text,integer"),
        ("pk.fields", "id"),
        ("writeMode", if case.upsert { "upsert" } else { "insert" }),
        ("batch.size", &case.batch_size.to_string()),
        ("auto.create", "true"),
        ("delete.enabled", "true"),
        ("max.retries", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    JdbcSinkConfig::parse(&raw, &["jdbc-diff".to_string()]).expect("the case's config parses")
}

/// Reports every errant record: (offset, the error's SQLSTATE or `parse`).
#[derive(Default)]
struct Reports(Vec<(i64, String)>);

impl ErrantRecordReporter for Reports {
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
        let code = error
            .strip_prefix("SQLSTATE ")
            .map_or("parse".to_string(), |rest| rest[..5].to_string());
        self.0.push((record.offset, code));
        Ok(())
    }
}

/// What one put did: its outcome (`ok`, or the error kind with its SQLSTATE when a
/// database refused it) and the records reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutObserved {
    outcome: String,
    reported: Vec<(i64, String)>,
}

/// What a case observed: each put, then the table's rows (`None` after a failed put).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    puts: Vec<PutObserved>,
    rows: Option<Vec<Vec<String>>>,
}

fn outcome(result: &Result<(), ConnectError>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(e) => {
            let text = e.to_string();
            let code = text
                .find("SQLSTATE ")
                .map(|i| text[i + 9..i + 14].to_string())
                .or_else(|| {
                    ["23505", "22P02", "22003", "23502"]
                        .iter()
                        .find(|c| text.contains(*c))
                        .map(|c| c.to_string())
                });
            let kind = match e {
                ConnectError::Retriable(_) => "retriable",
                ConnectError::Fatal(_) => "fatal",
            };
            format!("{kind} {}", code.unwrap_or_default())
        }
    }
}

/// Runs `case` through a task writing over `client`; `reader` reads the table back.
pub async fn run(
    case: &JdbcCase,
    table: &str,
    client: Box<dyn PostgresClient>,
    reader: &mut dyn PostgresClient,
) -> Observed {
    let mut task = JdbcSinkTask::new(config(case, table), client);
    let tp = TopicPartition::new("jdbc-diff", 0);
    task.open(std::slice::from_ref(&tp)).await.expect("open");
    let mut offset = 0;
    let mut puts = Vec::new();
    for put in &case.puts {
        let records: Vec<SinkRecord> = put
            .iter()
            .map(|r| {
                offset += 1;
                sink_record(offset, r)
            })
            .collect();
        let mut reports = Reports::default();
        let result = task.put(records, &mut reports).await;
        let failed = result.is_err();
        puts.push(PutObserved {
            outcome: outcome(&result),
            reported: reports.0,
        });
        if failed {
            return Observed { puts, rows: None };
        }
    }
    // `auto.create` runs before the task's first write: a case whose puts wrote nothing
    // (every record reported) leaves no table, on either side.
    let rows = match reader.select(table).await {
        Err(PgClientError::Db { error, .. }) if error.code == SqlState::UndefinedTable => {
            return Observed {
                puts,
                rows: Some(Vec::new()),
            };
        }
        read => read.expect("the table reads back"),
    };
    let rows = rows
        .rows
        .iter()
        .map(|row| row.iter().map(|v| format!("{v:?}")).collect())
        .collect();
    Observed {
        puts,
        rows: Some(rows),
    }
}

/// A [`PostgresClient`] over the model's server state, in process: one session, each call
/// one request as the simulated server handles it.
pub struct ModelPg {
    world: PostgresWorld,
    session: SessionId,
}

impl ModelPg {
    /// A fresh model server and one session on it.
    pub async fn new() -> Self {
        Self::on(PostgresWorld::new(Database::new(DbConfig::default()))).await
    }

    /// Another session on `world`.
    pub async fn on(world: PostgresWorld) -> Self {
        let peer = "127.0.0.1:1".parse().expect("address");
        let Response::Connected(session) = world.handle(Request::Connect, peer).await else {
            panic!("the model accepts a session")
        };
        Self { world, session }
    }
}

#[async_trait]
impl PostgresClient for ModelPg {
    async fn execute(&mut self, statement: Statement) -> Result<Reply, PgClientError> {
        let session = self.session;
        let request = Request::Execute { session, statement };
        let peer = "127.0.0.1:1".parse().expect("address");
        match self.world.handle(request, peer).await {
            Response::Executed(r) => r.map_err(|error| PgClientError::Db { index: None, error }),
            other => Err(PgClientError::Connection(format!("{other:?}"))),
        }
    }

    async fn execute_batch(
        &mut self,
        statements: Vec<Statement>,
    ) -> Result<Vec<Reply>, PgClientError> {
        let session = self.session;
        let request = Request::ExecuteBatch {
            session,
            statements,
        };
        let peer = "127.0.0.1:1".parse().expect("address");
        match self.world.handle(request, peer).await {
            Response::Batch(r) => r.map_err(|e| PgClientError::Db {
                index: Some(e.index),
                error: e.error,
            }),
            other => Err(PgClientError::Connection(format!("{other:?}"))),
        }
    }
}

/// Runs the suite against the real server at `conn` (a libpq connection string):
/// `cases` generated cases, each on its own table, the real writer with pgJDBC's
/// `reWriteBatchedInserts` set to `rewrite` (a put's one-row INSERTs sent as multi-row
/// ones must do what the model does with them one by one). Returns (agreed, ran, tally of
/// put outcomes and reported SQLSTATEs).
pub fn run_suite(
    rt: &tokio::runtime::Runtime,
    conn: &str,
    cases: u32,
    rewrite: bool,
) -> (u32, u32, BTreeMap<String, u32>) {
    let suite = match rewrite {
        false => "JDBC sink transactions",
        true => "JDBC sink transactions, reWriteBatchedInserts",
    };
    real_support::run_differential(suite, cases, 64, case_strategy(), |n, case| {
        // Each suite on its own tables: the two share one server.
        let table = format!("jdbc_diff_{}{n}", if rewrite { "rw_" } else { "" });
        let model = rt.block_on(async {
            let writer = ModelPg::new().await;
            let mut reader = ModelPg::on(writer.world.clone()).await;
            run(&case, &table, Box::new(writer), &mut reader).await
        });
        let client = || {
            RealPostgres::from_connection_string(conn, 10_000)
                .map_err(|e| TestCaseError::fail(e.to_string()))
        };
        let (writer, mut reader) = (client()?, client()?);
        let writer = writer.with_rewrite_batched_inserts(rewrite);
        let real = rt.block_on(run(&case, &table, Box::new(writer), &mut reader));
        prop_assert_eq!(
            &model,
            &real,
            "model (left) and real PostgreSQL (right) differ"
        );
        let mut kinds = Vec::new();
        for put in &real.puts {
            kinds.push(format!("put {}", put.outcome));
            kinds.extend(
                put.reported
                    .iter()
                    .map(|(_, code)| format!("reported {code}")),
            );
        }
        Ok(kinds)
    })
}
