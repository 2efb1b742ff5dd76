//! The real sinks beside bulk loads of the same rows, side by side in one run (issue 15,
//! item 4): the JDBC sink in `insert` and `upsert` mode against `COPY` and one multi-row
//! `INSERT` into PostgreSQL 15, and the ClickHouse exactly-once sink (variant `seed`, its
//! state records in ZooKeeper) against one `INSERT` into ClickHouse 18.16, each in batches
//! of 500 records per `put` (Connect's default `max.poll.records`) and again of 5,000 (the
//! `consumer.override.max.poll.records` of the ClickHouse connector's basic configuration
//! recipe, `kafka-clickhouse-connect-sink.md`). Each line goes to stderr; the test checks
//! what was loaded, never how fast (speed is a figure, not a verdict). Runs only with
//! `EOSIM_REAL=1`.
#![cfg(not(madsim))]

mod real_support;

use eosim::client::real::clickhouse::RealClickHouseConfig;
use eosim::client::real::zookeeper::{ClickHouseWithZooKeeper, ZkKeeperMapConfig};
use eosim::client::real::RealPostgres;
use eosim::real::bulk::jdbc::{jdbc_sink_vs_bulk, JdbcLoad};
use eosim::real::bulk::{clickhouse_sink_vs_bulk, BulkRatio};
use eosim::real::provision::{ClickHouse, Postgres, ZooKeeper};
use eosim::sinks::jdbc::WriteMode;
use real_support::{real_enabled, runtime, service_dir, timed};

/// Records per `put`: Connect's default `max.poll.records`, and the ClickHouse connector
/// docs' recipe (`consumer.override.max.poll.records = 5000`).
const BATCH_ROWS: [u64; 2] = [500, 5_000];

/// Rows of each load.
const ROWS: u64 = 20_000;

fn print(ratio: &BulkRatio) {
    let line = format!("bulk-load ratio: {ratio}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

fn jdbc_ratios(pg: &Postgres, rt: &tokio::runtime::Runtime, batch_rows: u64) -> Vec<BulkRatio> {
    let client = || RealPostgres::from_connection_string(&pg.connection_string(), 30_000);
    let mut admin = client().expect("connection string");
    let mut out = Vec::new();
    let loads = [
        (WriteMode::Insert, "bulk_jdbc_insert", 0),
        (WriteMode::Upsert, "bulk_jdbc_upsert", 2_000),
    ];
    for ((mode, table, keys), rewrite) in loads.into_iter().flat_map(|l| [(l, false), (l, true)]) {
        let load = JdbcLoad {
            table: table.into(),
            mode,
            rows: ROWS,
            keys,
            batch_rows,
            rewrite_batched_inserts: rewrite,
        };
        let sink = client().expect("connection string");
        let ratios = rt
            .block_on(jdbc_sink_vs_bulk(&mut admin, sink, &load))
            .expect("measured");
        out.extend(ratios);
    }
    out
}

#[test]
fn real_sinks_beside_bulk_loads_of_the_same_rows() {
    if !real_enabled("real_sinks_beside_bulk_loads_of_the_same_rows") {
        return;
    }
    let (pg_dir, zk_dir, ch_dir) = (
        service_dir("postgres-bulk"),
        service_dir("zookeeper-bulk"),
        service_dir("clickhouse-bulk"),
    );
    let pg = timed("postgres start", || Postgres::start(pg_dir.path())).expect("postgres");
    let zk = timed("zookeeper start", || ZooKeeper::start(zk_dir.path())).expect("zookeeper");
    let ch = timed("clickhouse start", || {
        ClickHouse::start_with_zookeeper(ch_dir.path(), Some(&zk.connect_string()))
    })
    .expect("clickhouse");
    let rt = runtime();
    for batch_rows in BATCH_ROWS {
        let mut ratios = jdbc_ratios(&pg, &rt, batch_rows);
        let table = format!("eosim_bulk_{batch_rows}");
        let ch_ratio = rt.block_on(async {
            let client = ClickHouseWithZooKeeper::connect(
                RealClickHouseConfig::new(&ch.url()),
                ZkKeeperMapConfig::new(&zk.connect_string()),
            )
            .await
            .expect("clients connect");
            clickhouse_sink_vs_bulk(&client, &table, ROWS, batch_rows)
                .await
                .expect("measured")
        });
        ratios.push(ch_ratio);
        for r in &ratios {
            print(r);
            assert!(r.sink_rows_per_s > 0.0 && r.bulk_rows_per_s > 0.0, "{r}");
        }
        let ch = ratios.last().expect("pushed");
        // One batch of the seed design per `put`: a state read and two state writes each.
        let batches = ROWS / batch_rows;
        let state = (ch.state_reads, ch.state_writes);
        assert_eq!(state, (batches, 2 * batches), "{ch}");
        assert!(
            ch.state_time_s > 0.0 && ch.state_time_s < ch.sink_time_s,
            "{ch}"
        );
    }
}
