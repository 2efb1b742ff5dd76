//! The doris-fe and doris-be nodes under madsim: a Routine Load task over RPC, a BE
//! restart mid-task, an FE restart, the FE ↔ BE link cut (commits refused).

use super::error::DorisError;
use super::fe_routine_load::{CreateRoutineLoad, TaskAssignment};
use super::model::{Doris, DorisConfig};
use super::routine_load::{JobState, KafkaOffset, RlTaskTxnCommitAttachment, RoutineLoadProps};
use super::service::*;
use super::txn::TransactionStatus;
use super::types::{LoadSpec, TableDef};
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

struct Nodes {
    world: DorisWorld,
    fe: NodeId,
    be: NodeId,
    client: madsim::runtime::NodeHandle,
}

fn start() -> Nodes {
    let handle = Handle::current();
    let world = DorisWorld::new(Doris::new(DorisConfig::default()));
    let w = world.clone();
    let fe = handle
        .create_node()
        .name("doris-fe")
        .ip(fe_ip())
        .init(move || serve_fe(w.clone()))
        .build();
    let w = world.clone();
    let be = handle
        .create_node()
        .name("doris-be")
        .ip(be_ip())
        .init(move || serve_be(w.clone()))
        .build();
    let client = handle
        .create_node()
        .name("client")
        .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 9, 8)))
        .build();
    Nodes {
        world,
        fe: fe.id(),
        be: be.id(),
        client,
    }
}

async fn fe(request: FeRequest) -> FeReply {
    let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind");
    let timeout = Duration::from_secs(5);
    crate::net::call(&endpoint, fe_addr(), request, timeout)
        .await
        .expect("the FE answers")
}

async fn be(request: BeRequest) -> BeReply {
    let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind");
    let timeout = Duration::from_secs(5);
    crate::net::call(&endpoint, be_addr(), request, timeout)
        .await
        .expect("the BE answers")
}

fn click(id: u32) -> String {
    format!(r#"{{"clickTime":"2023-05-01 10:00:00","type":"webset","id":"{id}","user":"u"}}"#)
}

async fn setup_job() -> TaskAssignment {
    madsim::time::sleep(Duration::from_millis(10)).await;
    fe(FeRequest::CreateDatabase("db".into())).await.unwrap();
    let def = TableDef::clicklog();
    fe(FeRequest::CreateTable {
        db: "db".into(),
        def,
    })
    .await
    .unwrap();
    let mut props = RoutineLoadProps {
        kafka_broker_list: "broker-1:9092".into(),
        kafka_topic: "clicks".into(),
        ..RoutineLoadProps::default()
    };
    props.kafka_default_offsets = KafkaOffset::Beginning;
    let req = CreateRoutineLoad {
        name: "rl".into(),
        db: "db".into(),
        table: "clicklog".into(),
        spec: LoadSpec::default(),
        props,
    };
    let partitions = vec![0];
    fe(FeRequest::CreateRoutineLoad {
        req: Box::new(req),
        partitions,
    })
    .await
    .unwrap();
    loop {
        madsim::time::sleep(Duration::from_millis(200)).await;
        if let Ok(FeResponse::Task(Some(t))) = fe(FeRequest::TakeTask).await {
            return *t;
        }
    }
}

fn attachment(t: &TaskAssignment, rows: u64, next: i64) -> RlTaskTxnCommitAttachment {
    RlTaskTxnCommitAttachment {
        job_id: t.job_id,
        task_id: t.task_id,
        total_rows: rows,
        next_offsets: [(0, next)].into(),
        ..Default::default()
    }
}

async fn write(t: &TaskAssignment, ids: std::ops::Range<u32>) -> BeReply {
    let inputs = ids.map(click).collect();
    let spec = t.spec.clone();
    be(BeRequest::Write {
        txn_id: t.txn_id,
        spec,
        inputs,
    })
    .await
}

#[madsim::test]
async fn a_routine_load_task_commits_over_rpc_and_is_published_by_the_fe() {
    let nodes = start();
    let rows = nodes
        .client
        .spawn(async move {
            let t = setup_job().await;
            write(&t, 0..3).await.unwrap();
            let commit = FeRequest::CommitTask {
                txn_id: t.txn_id,
                attachment: attachment(&t, 3, 3),
            };
            fe(commit).await.unwrap();
            madsim::time::sleep(Duration::from_millis(500)).await;
            fe(FeRequest::Select {
                db: "db".into(),
                table: "clicklog".into(),
            })
            .await
        })
        .await
        .unwrap();
    let Ok(FeResponse::Rows(rows)) = rows else {
        panic!("{rows:?}")
    };
    assert_eq!(rows.len(), 3);
}

#[madsim::test]
async fn a_be_restart_mid_task_makes_its_commit_fail_and_loses_nothing_committed() {
    let nodes = start();
    let world = nodes.world.clone();
    let be_id = nodes.be;
    let out = nodes
        .client
        .spawn(async move {
            let t = setup_job().await;
            write(&t, 0..3).await.unwrap();
            Handle::current().kill(be_id);
            Handle::current().restart(be_id);
            madsim::time::sleep(Duration::from_millis(50)).await;
            let commit = FeRequest::CommitTask {
                txn_id: t.txn_id,
                attachment: attachment(&t, 3, 3),
            };
            (t.txn_id, fe(commit).await)
        })
        .await
        .unwrap();
    let (txn_id, reply) = out;
    assert!(
        matches!(reply, Err(DorisError::BackendUnavailable(_))),
        "{reply:?}"
    );
    let d = world.lock();
    assert_eq!(
        d.transaction(txn_id).unwrap().status,
        TransactionStatus::Prepare
    );
    assert_eq!(
        d.fe.jobs[&1].progress[&0],
        KafkaOffset::Beginning,
        "progress did not move"
    );
}

#[madsim::test]
async fn an_fe_restart_requeues_the_job_from_its_journal() {
    let nodes = start();
    let world = nodes.world.clone();
    let fe_id = nodes.fe;
    let reply = nodes
        .client
        .spawn(async move {
            let t = setup_job().await;
            write(&t, 0..2).await.unwrap();
            let commit = FeRequest::CommitTask {
                txn_id: t.txn_id,
                attachment: attachment(&t, 2, 2),
            };
            fe(commit).await.unwrap();
            let t2 = loop {
                if let Ok(FeResponse::Task(Some(t))) = fe(FeRequest::TakeTask).await {
                    break *t;
                }
            };
            Handle::current().kill(fe_id);
            Handle::current().restart(fe_id);
            madsim::time::sleep(Duration::from_millis(50)).await;
            let late = FeRequest::CommitTask {
                txn_id: t2.txn_id,
                attachment: attachment(&t2, 0, 2),
            };
            fe(late).await
        })
        .await
        .unwrap();
    assert!(
        matches!(reply, Err(DorisError::TaskAborted { .. })),
        "{reply:?}"
    );
    let d = world.lock();
    assert_eq!(d.fe.jobs[&1].progress[&0], KafkaOffset::Next(2));
    assert_ne!(d.fe.jobs[&1].state, JobState::Paused);
}

#[madsim::test]
async fn a_cut_fe_be_link_refuses_commits_until_it_heals() {
    let nodes = start();
    let world = nodes.world.clone();
    let (fe_id, be_id) = (nodes.fe, nodes.be);
    let txn_id = nodes
        .client
        .spawn(async move {
            let t = setup_job().await;
            write(&t, 0..2).await.unwrap();
            let commit = FeRequest::CommitTask {
                txn_id: t.txn_id,
                attachment: attachment(&t, 2, 2),
            };
            let net = madsim::net::NetSim::current();
            net.clog_link(fe_id, be_id);
            net.clog_link(be_id, fe_id);
            let refused = fe(commit.clone()).await;
            assert!(
                matches!(refused, Err(DorisError::BackendUnavailable(_))),
                "{refused:?}"
            );
            net.unclog_link(fe_id, be_id);
            net.unclog_link(be_id, fe_id);
            fe(commit).await.unwrap();
            madsim::time::sleep(Duration::from_millis(500)).await;
            t.txn_id
        })
        .await
        .unwrap();
    assert_eq!(
        world.lock().transaction(txn_id).unwrap().status,
        TransactionStatus::Visible
    );
}
