//! The rdkafka transactional producer ([`RealTransactionalProducer`]) against Apache Kafka
//! 4.x started natively (KRaft, one broker): committed records are visible to read_committed
//! readers and aborted ones are not, a second producer with the same `transactional.id`
//! fences the first and aborts its open transaction, and offsets sent with a transaction
//! are committed with it (and not when it aborts); and the transactional differential
//! suite against the model (`real_support/txn_differential.rs`). Runs only with
//! `EOSIM_REAL=1`.
#![cfg(not(madsim))]

#[path = "real_support/real_cluster.rs"]
mod real_cluster;
mod real_support;
#[path = "real_support/txn_differential.rs"]
mod txn_differential;
#[allow(dead_code)]
#[path = "real_support/wire.rs"]
mod wire;

use bytes::Bytes;
use eosim::client::real::{RealAdmin, RealConsumer, RealTransactionalProducer, RealTxnConfig};
use eosim::client::Consumer;
use eosim::client::{
    Admin, AutoOffsetReset, ConsumerConfig, ConsumerGroupMetadata, ProducerRecord,
    TransactionalProducer, TxnErrorClass,
};
use eosim_sim::kafka::{Isolation, TopicConfig, TopicPartition};
use real_support::{one_broker, real_enabled, runtime, service_dir, timed};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

fn record(topic: &str, value: &str) -> ProducerRecord {
    ProducerRecord {
        topic: topic.into(),
        partition: Some(0),
        key: None,
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: Vec::new(),
    }
}

fn producer(bootstrap: &str, id: &str) -> RealTransactionalProducer {
    let mut config = RealTxnConfig::new(id);
    config.transaction_timeout_ms = 10_000;
    RealTransactionalProducer::new(bootstrap, config).expect("producer configuration")
}

/// One transaction sending `values` to partition 0 of `topic`, then committed or aborted.
async fn transaction(p: &RealTransactionalProducer, topic: &str, values: &[&str], commit: bool) {
    p.begin_transaction().expect("begin");
    for v in values {
        p.send(record(topic, v))
            .await
            .expect("send in a transaction");
    }
    let end = match commit {
        true => p.commit_transaction(TIMEOUT).await,
        false => p.abort_transaction(TIMEOUT).await,
    };
    end.expect("end of the transaction");
}

/// Every value a fresh member of `group` reads from `topic` with `isolation` within a few
/// seconds after at least `expected` arrived.
async fn read_all(
    bootstrap: &str,
    topic: &str,
    group: &str,
    isolation: Isolation,
    expected: usize,
) -> Vec<String> {
    let mut config = ConsumerConfig::new(group);
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.isolation_level = isolation;
    config.fetch_max_wait_ms = 100;
    let mut consumer = RealConsumer::new(bootstrap, config).expect("consumer");
    consumer
        .subscribe(&[topic.to_string()])
        .await
        .expect("subscribe");
    let started = Instant::now();
    let mut values = Vec::new();
    let mut settled_at = None;
    while started.elapsed() < Duration::from_secs(60) {
        for r in consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
        {
            let v = r.value.map(|b| String::from_utf8_lossy(&b).into_owned());
            values.push(v.unwrap_or_default());
        }
        // Keep reading 2 s past the expected count: nothing more may come.
        if values.len() >= expected {
            let at = *settled_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
    }
    consumer.close().await;
    values
}

#[test]
fn real_transactions_commit_abort_fence_and_carry_offsets() {
    if !real_enabled("real_transactions_commit_abort_fence_and_carry_offsets") {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-txn");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        let admin = RealAdmin::new(&bootstrap, TIMEOUT).unwrap();
        for topic in [
            "txn-visible",
            "txn-fence",
            "txn-offsets",
            "txn-in",
            "txn-open",
        ] {
            let created = admin
                .create_topic(topic, 1, 1, TopicConfig::default())
                .await;
            assert_eq!(created, Ok(()), "{topic}");
        }
        committed_visible_aborted_not(&bootstrap).await;
        a_second_producer_fences_the_first(&bootstrap).await;
        offsets_commit_with_the_transaction(&bootstrap).await;
        an_open_transaction_shows_in_the_stability_probe_until_it_commits(&bootstrap).await;
    });
    timed("stop kafka", || kafka.stop());
}

/// The real drain's `StabilityProbe` (canary of its open-transaction wait): an open
/// transaction's acked send leaves the LSO below the HW and is reported; once the
/// transaction commits and its marker is written, nothing is.
async fn an_open_transaction_shows_in_the_stability_probe_until_it_commits(bootstrap: &str) {
    use eosim::real::run::cluster::StabilityProbe;
    let probe = StabilityProbe::new(bootstrap, &["txn-open".to_string()], 1).expect("probe");
    assert_eq!(probe.open_transactions(), Ok(Vec::new()), "an empty topic");
    let p = producer(bootstrap, "t-open");
    p.init_transactions(TIMEOUT).await.expect("init");
    p.begin_transaction().expect("begin");
    p.send(record("txn-open", "pending"))
        .await
        .expect("send in the open transaction");
    let open = probe.open_transactions().expect("watermarks");
    assert_eq!(open.len(), 1, "the open transaction is seen: {open:?}");
    assert!(
        open[0].starts_with("txn-open-0: last stable offset 0 < high watermark 1"),
        "{open:?}"
    );
    p.commit_transaction(TIMEOUT).await.expect("commit");
    let started = Instant::now();
    loop {
        let open = probe.open_transactions().expect("watermarks");
        if open.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "still open after the commit: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Committed, aborted, committed: read_committed sees the two committed transactions in
/// order, read_uncommitted sees the aborted records too.
async fn committed_visible_aborted_not(bootstrap: &str) {
    let p = producer(bootstrap, "t-visible");
    p.init_transactions(TIMEOUT).await.expect("init");
    transaction(&p, "txn-visible", &["c0", "c1", "c2"], true).await;
    transaction(&p, "txn-visible", &["a0", "a1"], false).await;
    transaction(&p, "txn-visible", &["c3"], true).await;
    let committed = read_all(
        bootstrap,
        "txn-visible",
        "g-rc",
        Isolation::ReadCommitted,
        4,
    )
    .await;
    assert_eq!(committed, ["c0", "c1", "c2", "c3"]);
    let all = read_all(
        bootstrap,
        "txn-visible",
        "g-ru",
        Isolation::ReadUncommitted,
        6,
    )
    .await;
    assert_eq!(all, ["c0", "c1", "c2", "a0", "a1", "c3"]);
}

/// The second `init_transactions` of one transactional.id bumps the epoch: the first
/// producer's open transaction is aborted and its next call fails fatally.
async fn a_second_producer_fences_the_first(bootstrap: &str) {
    let first = producer(bootstrap, "t-fence");
    first.init_transactions(TIMEOUT).await.expect("init first");
    first.begin_transaction().expect("begin");
    first
        .send(record("txn-fence", "zombie"))
        .await
        .expect("send before the fence");
    let second = producer(bootstrap, "t-fence");
    second
        .init_transactions(TIMEOUT)
        .await
        .expect("init second");
    transaction(&second, "txn-fence", &["fresh"], true).await;
    let fenced = match first.send(record("txn-fence", "late")).await {
        Err(e) => e,
        Ok(_) => first
            .commit_transaction(TIMEOUT)
            .await
            .expect_err("the fenced producer cannot commit"),
    };
    assert_eq!(fenced.class, TxnErrorClass::Fatal, "{fenced}");
    let committed = read_all(
        bootstrap,
        "txn-fence",
        "g-fence",
        Isolation::ReadCommitted,
        1,
    )
    .await;
    assert_eq!(committed, ["fresh"]);
}

/// Offsets sent with a committed transaction become the group's committed offsets; those
/// of an aborted one do not.
async fn offsets_commit_with_the_transaction(bootstrap: &str) {
    let group = ConsumerGroupMetadata {
        group_id: "g-copy".into(),
        generation: -1,
        member_id: String::new(),
    };
    let input = TopicPartition::new("txn-in", 0);
    let p = producer(bootstrap, "t-offsets");
    p.init_transactions(TIMEOUT).await.expect("init");
    for (next, commit) in [(5, true), (9, false)] {
        p.begin_transaction().expect("begin");
        p.send(record("txn-offsets", &format!("up to {next}")))
            .await
            .expect("send");
        p.send_offsets_to_transaction(&[(input.clone(), next)], &group, TIMEOUT)
            .await
            .expect("offsets into the transaction");
        let end = match commit {
            true => p.commit_transaction(TIMEOUT).await,
            false => p.abort_transaction(TIMEOUT).await,
        };
        end.expect("end of the transaction");
    }
    // The generation and member id reach the group coordinator (KIP-447): a member the
    // group does not know is refused and the transaction cannot commit.
    let ghost = ConsumerGroupMetadata {
        generation: 7,
        member_id: "ghost".into(),
        ..group.clone()
    };
    p.begin_transaction().expect("begin");
    let refused = p
        .send_offsets_to_transaction(&[(input.clone(), 12)], &ghost, TIMEOUT)
        .await
        .expect_err("offsets of an unknown member");
    assert_ne!(refused.class, TxnErrorClass::Retriable, "{refused}");
    eprintln!("offsets of an unknown member: {refused}");
    if refused.class == TxnErrorClass::Abortable {
        p.abort_transaction(TIMEOUT).await.expect("abort");
    }
    let mut config = ConsumerConfig::new("g-copy");
    config.isolation_level = Isolation::ReadCommitted;
    let mut reader = RealConsumer::new(bootstrap, config).expect("consumer");
    let committed = reader
        .committed(std::slice::from_ref(&input))
        .await
        .expect("committed");
    assert_eq!(committed, [(input, 5)]);
    reader.close().await;
}

/// Generated sequences of transactional sends, offsets, commits, aborts, fencing by a new
/// instance, zombie sends, idempotent sends and reads at both isolation levels run against
/// one real broker and against `eosim_sim::kafka::model::Cluster`; every offset, error
/// class, read and committed offset must be equal. Prints the agreement rate. See
/// `real_support/txn_differential.rs`.
#[test]
fn model_and_real_kafka_agree_on_transactions() {
    if !real_enabled("model_and_real_kafka_agree_on_transactions") {
        return;
    }
    let tally = txn_differential_on(1, 8);
    real_support::assert_exercised(
        &tally,
        &[
            "Send ok",
            "Commit ok",
            "Abort ok",
            "Fence ok",
            "ZombieSend Fatal",
        ],
    );
}

/// The transactional differential on three brokers (replication factor 3,
/// `min.insync.replicas` 2): every case kills one broker (a partition's leader, the
/// transaction coordinator's or the group coordinator's) part-way, goes on with two, and
/// starts it again. Prints the agreement rate.
#[test]
fn model_and_real_kafka_agree_on_transactions_with_three_brokers_and_a_kill() {
    if !real_enabled("model_and_real_kafka_agree_on_transactions_with_three_brokers_and_a_kill") {
        return;
    }
    let tally = txn_differential_on(3, 6);
    real_support::assert_exercised(
        &tally,
        &[
            "Send ok",
            "Commit ok",
            "Kill TxnCoordinator, transaction open",
            "Revive ok",
        ],
    );
}

/// Runs the transactional differential on a fresh cluster of `brokers` brokers,
/// `EOSIM_DIFF_CASES` or `default_cases` cases, reports the agreement and returns the tally.
fn txn_differential_on(
    brokers: u32,
    default_cases: u32,
) -> std::collections::BTreeMap<String, u32> {
    let dir = service_dir(&format!("kafka-txn-differential-{brokers}"));
    let cluster = timed(&format!("kafka ({brokers} brokers) start"), || {
        real_cluster::RealCluster::start(dir.path(), brokers)
    })
    .expect("kafka starts");
    let cases = real_support::diff_cases(default_cases);
    let (agreed, ran, tally) = timed(
        &format!("transactional differential, {brokers} brokers, {cases} cases"),
        || txn_differential::run(&cluster, cases),
    );
    let suite = match brokers {
        1 => "Kafka transactions, fencing and restarts".to_string(),
        _ => "Kafka transactions, 3 brokers, kill and restart".to_string(),
    };
    real_support::report_agreement(&suite, agreed, ran, &tally);
    cluster.stop();
    tally
}
