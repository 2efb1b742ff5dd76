//! The server node end to end over the simulated network: sessions, batches, lock waits,
//! crash.

use super::fixtures::{kv_table, kv_upsert as upsert};
use super::service::*;
use super::*;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(5);

fn start_server(world: &PostgresWorld) -> madsim::runtime::NodeHandle {
    let w = world.clone();
    Handle::current()
        .create_node()
        .name("postgres")
        .ip(postgres_ip())
        .init(move || serve_postgres(w.clone()))
        .build()
}

fn client_node(last_octet: u8) -> madsim::runtime::NodeHandle {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 9, last_octet));
    Handle::current()
        .create_node()
        .name(format!("client-{last_octet}"))
        .ip(ip)
        .build()
}

async fn rpc(endpoint: &Endpoint, request: Request) -> Response {
    crate::net::call(endpoint, postgres_addr(), request, TIMEOUT)
        .await
        .expect("a response")
}

async fn connect(endpoint: &Endpoint) -> SessionId {
    match rpc(endpoint, Request::Connect).await {
        Response::Connected(s) => s,
        other => panic!("expected a session, got {other:?}"),
    }
}

#[madsim::test]
async fn a_batch_without_a_transaction_commits_whole_or_not_at_all() {
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    start_server(&world);
    let client = client_node(1);
    let w = world.clone();
    client
        .spawn(async move {
            let ep = Endpoint::bind("0.0.0.0:0").await.unwrap();
            let s = connect(&ep).await;
            let statements = vec![kv_table(), upsert(1, "a"), upsert(2, "b")];
            let ok = rpc(
                &ep,
                Request::ExecuteBatch {
                    session: s,
                    statements,
                },
            )
            .await;
            assert!(
                matches!(ok, Response::Batch(Ok(ref r)) if r.len() == 3),
                "{ok:?}"
            );
            let bad = vec![upsert(3, "c"), upsert(4, "d"), {
                let mut st = upsert(5, "e");
                if let Statement::Insert(i) = &mut st {
                    i.rows[0][0] = Value::text("five");
                }
                st
            }];
            let failed = rpc(
                &ep,
                Request::ExecuteBatch {
                    session: s,
                    statements: bad,
                },
            )
            .await;
            let Response::Batch(Err(e)) = failed else {
                panic!("expected an error: {failed:?}")
            };
            assert_eq!(
                (e.index, e.error.code),
                (2, SqlState::InvalidTextRepresentation)
            );
            assert_eq!(w.db.lock().unwrap().table_rows("kv").unwrap().len(), 2);
        })
        .await
        .unwrap();
}

#[madsim::test]
async fn a_statement_blocked_by_a_lock_runs_when_the_holder_commits() {
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    start_server(&world);
    let w = world.clone();
    client_node(2)
        .spawn(async move {
            let ep = Endpoint::bind("0.0.0.0:0").await.unwrap();
            let (a, b) = (connect(&ep).await, connect(&ep).await);
            rpc(
                &ep,
                Request::Execute {
                    session: a,
                    statement: kv_table(),
                },
            )
            .await;
            rpc(&ep, Request::Begin { session: a }).await;
            rpc(
                &ep,
                Request::Execute {
                    session: a,
                    statement: upsert(1, "a"),
                },
            )
            .await;
            let ep2 = Endpoint::bind("0.0.0.0:0").await.unwrap();
            let waiter = madsim::task::spawn(async move {
                rpc(
                    &ep2,
                    Request::Execute {
                        session: b,
                        statement: upsert(1, "b"),
                    },
                )
                .await
            });
            madsim::time::sleep(Duration::from_millis(500)).await;
            assert!(!waiter.is_finished(), "b waits for a's row lock");
            let committed = rpc(&ep, Request::Commit { session: a }).await;
            assert_eq!(committed, Response::Committed(Ok(TxnEnd::Committed)));
            let got = waiter.await.unwrap();
            assert_eq!(got, Response::Executed(Ok(Reply::Affected(1))));
            let rows = w.db.lock().unwrap().table_rows("kv").unwrap();
            assert_eq!(rows, vec![vec![Value::Int(1), Value::text("b")]]);
        })
        .await
        .unwrap();
}

#[madsim::test]
async fn a_crash_keeps_committed_rows_and_ends_every_session() {
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    let server = start_server(&world);
    let client = client_node(3);
    let ep = client
        .spawn(async { Endpoint::bind("0.0.0.0:0").await.unwrap() })
        .await
        .unwrap();
    let ep = std::sync::Arc::new(ep);
    let e = ep.clone();
    let s = client
        .spawn(async move {
            let s = connect(&e).await;
            rpc(
                &e,
                Request::Execute {
                    session: s,
                    statement: kv_table(),
                },
            )
            .await;
            rpc(
                &e,
                Request::Execute {
                    session: s,
                    statement: upsert(1, "a"),
                },
            )
            .await;
            rpc(&e, Request::Begin { session: s }).await;
            rpc(
                &e,
                Request::Execute {
                    session: s,
                    statement: upsert(2, "b"),
                },
            )
            .await;
            s
        })
        .await
        .unwrap();
    Handle::current().kill(server.id());
    world.crash();
    Handle::current().restart(server.id());
    let e = ep.clone();
    // The restarted server may not listen yet: retry like a reconnecting client would.
    let after = client
        .spawn(async move {
            for _ in 0..50 {
                let call = crate::net::call(
                    &e,
                    postgres_addr(),
                    Request::Commit { session: s },
                    Duration::from_millis(200),
                );
                if let Ok(response) = call.await {
                    return response;
                }
            }
            panic!("the restarted server never answered")
        })
        .await
        .unwrap();
    let Response::Committed(Err(err)) = after else {
        panic!("expected 08003: {after:?}")
    };
    assert_eq!(err.code, SqlState::ConnectionDoesNotExist);
    let rows = world.db.lock().unwrap().table_rows("kv").unwrap();
    assert_eq!(rows, vec![vec![Value::Int(1), Value::text("a")]]);
}

#[madsim::test]
async fn a_dead_client_process_releases_its_locks() {
    let world = PostgresWorld::new(Database::new(DbConfig::default()));
    start_server(&world);
    let dead = client_node(4);
    dead.spawn(async move {
        let ep = Endpoint::bind("0.0.0.0:0").await.unwrap();
        let s = connect(&ep).await;
        rpc(
            &ep,
            Request::Execute {
                session: s,
                statement: kv_table(),
            },
        )
        .await;
        rpc(&ep, Request::Begin { session: s }).await;
        rpc(
            &ep,
            Request::Execute {
                session: s,
                statement: upsert(1, "zombie"),
            },
        )
        .await;
    })
    .await
    .unwrap();
    Handle::current().kill(dead.id());
    world.client_gone(IpAddr::V4(Ipv4Addr::new(10, 0, 9, 4)));
    let got = client_node(5)
        .spawn(async move {
            let ep = Endpoint::bind("0.0.0.0:0").await.unwrap();
            let s = connect(&ep).await;
            rpc(
                &ep,
                Request::Execute {
                    session: s,
                    statement: upsert(1, "owner"),
                },
            )
            .await
        })
        .await
        .unwrap();
    assert_eq!(got, Response::Executed(Ok(Reply::Affected(1))));
}
