//! The simulated client's batches across a partition, against the server node.

use super::*;
use eosim_sim::postgres::fixtures::{kv_table, kv_upsert as upsert};
use eosim_sim::postgres::service::{postgres_ip, serve_postgres, PostgresWorld};
use eosim_sim::postgres::{Database, DbConfig};
use madsim::runtime::Handle;
use std::net::{IpAddr, Ipv4Addr};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 9, 2));

async fn rows(pg: &mut SimPostgres) -> usize {
    let select = Statement::Select { table: "kv".into() };
    match pg.execute(select).await.expect("select") {
        Reply::Rows { rows, .. } => rows.len(),
        other => panic!("expected rows, got {other:?}"),
    }
}

fn cut(cut: bool) {
    eosim_sim::net::set_link_cut(CLIENT, postgres_ip(), cut);
    eosim_sim::net::set_link_cut(postgres_ip(), CLIENT, cut);
}

/// A batch sent into a partition outlives its client's 2 s timeout (TCP retransmits it after
/// the heal) and reaches the server, but its transaction was never committed: the client
/// sends `COMMIT` only after the batch's answer, and closed the session at the timeout, a
/// close the server gets after the heal too. The table stays empty, as on PostgreSQL
/// (pgJDBC sends `BEGIN` with the batch and `COMMIT` in a second round trip).
#[madsim::test]
async fn a_batch_held_by_a_partition_past_the_timeout_never_commits() {
    eosim_sim::marks::take();
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    let w = world.clone();
    let handle = Handle::current();
    let server = handle
        .create_node()
        .name("postgres")
        .ip(postgres_ip())
        .init(move || serve_postgres(w.clone()))
        .build();
    eosim_sim::net::register_node(server.id(), postgres_ip(), "postgres");
    let client = handle.create_node().name("client").ip(CLIENT).build();
    eosim_sim::net::register_node(client.id(), CLIENT, "client");
    let applied_after_heal = client
        .spawn(async {
            madsim::time::sleep(Duration::from_millis(10)).await;
            let mut pg = SimPostgres::new(2_000);
            pg.execute(kv_table()).await.expect("create the table");
            cut(true);
            let result = pg.execute_batch(vec![upsert(1, "a"), upsert(2, "b")]).await;
            assert!(
                matches!(result, Err(PgClientError::Timeout { .. })),
                "{result:?}"
            );
            // Healed 2.8 s after the batch left: its retransmission at 3.0 s gets through,
            // and the close (sent at the 2 s timeout behind it) then ends its transaction.
            madsim::time::sleep(Duration::from_millis(800)).await;
            cut(false);
            madsim::time::sleep(Duration::from_secs(10)).await;
            let applied = rows(&mut pg).await;
            // The closed session left no row lock behind: key 1 is written at once.
            pg.execute_batch(vec![upsert(1, "c")])
                .await
                .expect("key 1 is not locked by the abandoned transaction");
            (applied, rows(&mut pg).await)
        })
        .await
        .expect("the client's task");
    assert_eq!(
        applied_after_heal,
        (0, 1),
        "a batch without its COMMIT committed"
    );
    // The batch crossed after the heal and ran; the close, which waited behind it, then
    // rolled its transaction back.
    let marks = eosim_sim::marks::take();
    assert_eq!(
        marks.get("net:held-packet-retransmitted-after-heal"),
        Some(&1),
        "{marks:?}"
    );
    assert!(
        marks.contains_key("postgres:close-rolled-back"),
        "{marks:?}"
    );
}

/// The same batch without a partition commits: another session sees it (the batch's own
/// session would see its rows before the `COMMIT` too).
#[madsim::test]
async fn a_batch_commits_when_its_commit_is_answered() {
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    let w = world.clone();
    let handle = Handle::current();
    handle
        .create_node()
        .name("postgres")
        .ip(postgres_ip())
        .init(move || serve_postgres(w.clone()))
        .build();
    let client = handle.create_node().name("client").ip(CLIENT).build();
    let n = client
        .spawn(async {
            madsim::time::sleep(Duration::from_millis(10)).await;
            let mut pg = SimPostgres::new(2_000);
            pg.execute(kv_table()).await.expect("create the table");
            let replies = pg
                .execute_batch(vec![upsert(1, "a"), upsert(2, "b")])
                .await
                .expect("the batch");
            assert_eq!(replies, vec![Reply::Affected(1), Reply::Affected(1)]);
            rows(&mut SimPostgres::new(2_000)).await
        })
        .await
        .expect("the client's task");
    assert_eq!(n, 2);
}
