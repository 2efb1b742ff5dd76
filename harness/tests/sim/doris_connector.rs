//! The Doris Kafka connector on Connect workers (pipeline `doris-sink`, scenarios
//! `p4-kc-*`): exactly_once holds under worker kills and recovers its progress from a
//! VISIBLE label; at_least_once without two-phase commit duplicates but loses nothing;
//! the offsets-before-2PC bug switch loses the pre-committed loads; under BE restarts a
//! failed flush of a buffer spanning puts loses records while one-record loads hold. Then
//! the task alone against the Doris nodes: a label collision, recovery from labels, and a
//! 2PC commit answered "already committed".

use super::support::{catalogue, run_checked, run_holding};
use eosim::checker::{Anomaly, Validity};

#[test]
fn exactly_once_under_worker_kills_holds_and_recovers_progress_from_a_label() {
    let (outcome, _) = run_holding("p4-kc-eos-worker-kills.toml", 2);
    assert!(outcome
        .marks
        .contains_key("doris-kc:progress-recovered-from-label"));
    // A killed task's pre-committed loads were aborted by the FE, not by the connector.
    assert!(outcome.marks.contains_key("doris:precommitted-timeout"));
}

#[test]
fn offsets_committed_before_the_2pc_commit_lose_the_loads_a_kill_leaves_precommitted() {
    let s = catalogue("p4-kc-bug-offsets-before-2pc-commit-loses.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(!result.anomalies[&Anomaly::SinkLost].is_empty());
    assert!(outcome.marks.contains_key("doris:precommitted-timeout"));
}

#[test]
fn at_least_once_without_2pc_loads_records_twice_after_a_kill_but_loses_none() {
    let s = catalogue("p4-kc-alo-worker-kills-duplicates.toml");
    let (_, result) = run_checked(&s, 2);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(!result.anomalies[&Anomaly::SinkDuplicate].is_empty());
    let lost = result.anomalies.get(&Anomaly::SinkLost);
    assert!(lost.is_none_or(|cases| cases.is_empty()), "{lost:?}");
}

#[test]
fn a_failed_flush_of_a_buffer_spanning_puts_loses_the_earlier_puts_records() {
    // The loss needs a BE restart to fail a flush whose buffer spans puts: the first of
    // seeds 1..=5 where it does.
    let s = catalogue("p4-kc-eos-be-restarts-buffer-spans-puts-loses.toml");
    let (outcome, result) = (1..=5)
        .map(|seed| run_checked(&s, seed))
        .find(|(_, result)| result.validity == Validity::Invalid)
        .expect("violated in one of seeds 1..=5");
    assert!(!result.anomalies[&Anomaly::SinkLost].is_empty());
    assert!(outcome
        .marks
        .contains_key("doris-kc:failed-flush-dropped-earlier-puts"));
}

#[test]
fn one_record_loads_hold_under_be_restarts() {
    let (outcome, _) = run_holding("p4-kc-eos-be-restarts.toml", 1);
    assert!(outcome.marks.contains_key("doris:be-restart"));
    assert!(outcome.marks.contains_key("doris-kc:put-retried"));
}

/// The task driven directly on a node, against `doris-fe` and `doris-be`.
mod task {
    use eosim::client::sim::doris::SimDoris;
    use eosim::connect::task::{
        ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
    };
    use eosim::sinks::doris::task::DorisSinkTask;
    use eosim::sinks::doris::DorisSinkConfig;
    use eosim_sim::doris::model::{Doris, DorisConfig};
    use eosim_sim::doris::service::{be_ip, fe_ip, serve_be, serve_fe, DorisWorld};
    use eosim_sim::doris::stream_load::{StreamLoad, StreamLoadStatus};
    use eosim_sim::doris::txn::TransactionStatus;
    use eosim_sim::doris::types::{LoadSpec, TableDef};
    use eosim_sim::kafka::TopicPartition;
    use std::collections::BTreeMap;
    use std::future::Future;

    struct NoReporter;

    impl ErrantRecordReporter for NoReporter {
        fn report(&mut self, _record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
            panic!("nothing is errant here: {error}")
        }
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("clicklog", 0)
    }

    fn click(id: i64) -> serde_json::Value {
        serde_json::json!({"clickTime": "2023-05-01 10:00:00", "type": "webset",
            "id": id.to_string(), "user": "u"})
    }

    /// Records at `offsets` of `clicklog-0`, id = offset.
    fn records(offsets: std::ops::Range<i64>) -> Vec<SinkRecord> {
        offsets
            .map(|offset| SinkRecord {
                tp: tp(),
                offset,
                key: None,
                value: Some(click(offset)),
                headers: Vec::new(),
                timestamp_ms: 0,
            })
            .collect()
    }

    /// A Doris with `db.clicklog`, already holding a VISIBLE one-row load per label.
    fn doris_with(labels: &[&str]) -> DorisWorld {
        let mut d = Doris::new(DorisConfig::default());
        d.create_database("db");
        d.create_table("db", TableDef::clicklog()).unwrap();
        for (i, label) in labels.iter().enumerate() {
            let load = StreamLoad {
                db: "db".into(),
                table: "clicklog".into(),
                label: Some(label.to_string()),
                spec: LoadSpec::default(),
                max_filter_ratio: 0.0,
                two_phase_commit: false,
                group_commit: Default::default(),
                lines: vec![click(1_000 + i as i64).to_string()],
            };
            assert_eq!(d.stream_load(0, load).status, StreamLoadStatus::Success);
        }
        d.tick(1, true);
        DorisWorld::new(d)
    }

    /// A task of `pairs` (over the connector's required keys, two records a load), its
    /// label suffixes starting at 5.
    async fn task(pairs: &[(&str, &str)]) -> DorisSinkTask {
        let base = [
            ("doris.urls", "doris-fe"),
            ("doris.user", "root"),
            ("doris.database", "db"),
            ("buffer.count.records", "2"),
        ];
        let raw: BTreeMap<String, String> = base
            .iter()
            .chain(pairs)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = DorisSinkConfig::parse(&raw).unwrap();
        let client = SimDoris::connect(1_000).await.unwrap();
        let mut task = DorisSinkTask::new(config, client).with_suffix_starts(|| 5);
        task.initialize(SinkTaskContext::new());
        task.open(&[tp()]).await.unwrap();
        task
    }

    /// Runs `body` on a worker node beside `doris-fe` and `doris-be` serving `world`.
    fn on_worker<F: Future<Output = ()> + Send + 'static>(
        world: DorisWorld,
        body: impl FnOnce(DorisWorld) -> F + Send + 'static,
    ) {
        let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
        runtime.block_on(async move {
            let handle = madsim::runtime::Handle::current();
            let w = world.clone();
            let fe = move || serve_fe(w.clone());
            handle
                .create_node()
                .name("doris-fe")
                .ip(fe_ip())
                .init(fe)
                .build();
            let w = world.clone();
            let be = move || serve_be(w.clone());
            handle
                .create_node()
                .name("doris-be")
                .ip(be_ip())
                .init(be)
                .build();
            let worker = handle
                .create_node()
                .name("connect-1")
                .ip([10, 0, 4, 1].into())
                .build();
            worker.spawn(body(world)).await.expect("the worker ran");
        });
    }

    fn ids(world: &DorisWorld) -> Vec<String> {
        let rows = world.lock().select("db", "clicklog").unwrap();
        let mut ids: Vec<String> = rows
            .iter()
            .map(|r| r["id"].as_str().unwrap().into())
            .collect();
        ids.sort();
        ids
    }

    /// The label of the first load (offsets 0..=1, suffix 5) is taken by an earlier
    /// VISIBLE load: the Stream Load answers `Label Already Exists`, `put` asks Connect to
    /// redeliver, and the redelivered batch goes under the next suffix, so (with
    /// at_least_once) the batch is loaded even though the label said it was.
    #[test]
    fn a_label_already_used_fails_the_put_and_the_retry_loads_under_the_next_suffix() {
        let world = doris_with(&["clicklog__KC_0__KC_db_clicklog__KC_1__KC_5"]);
        on_worker(world, |world| async move {
            let mut task = task(&[]).await;
            let refused = task.put(records(0..2), &mut NoReporter).await;
            assert!(
                matches!(&refused, Err(ConnectError::Retriable(e)) if e.contains("Label [")),
                "{refused:?}"
            );
            task.put(records(0..2), &mut NoReporter).await.unwrap();
            let label = "clicklog__KC_0__KC_db_clicklog__KC_1__KC_6";
            let txn = world
                .lock()
                .transaction_by_label("db", label)
                .cloned()
                .unwrap();
            assert_eq!(txn.status, TransactionStatus::Precommitted);
            let offsets = BTreeMap::from([(tp(), 2)]);
            let committed = task.pre_commit(&offsets).await.unwrap();
            assert_eq!(committed, offsets);
            madsim::time::sleep(std::time::Duration::from_millis(300)).await;
            assert_eq!(ids(&world), ["0", "1", "1000"]);
        });
        assert!(eosim::marks::take().contains_key("doris-kc:label-already-exists"));
    }

    /// exactly_once: the writer reads its partition's labels before its first record and
    /// skips every record at or below the newest VISIBLE label's offset (9 here; a label
    /// of another partition does not count), so a replay from offset 0 loads only 10..
    /// PRECOMMITTED labels do not count either.
    #[test]
    fn exactly_once_skips_records_up_to_the_newest_visible_label_of_its_partition() {
        let world = doris_with(&[
            "clicklog__KC_0__KC_db_clicklog__KC_3__KC_1",
            "clicklog__KC_0__KC_db_clicklog__KC_9__KC_2",
            "clicklog__KC_1__KC_db_clicklog__KC_50__KC_3",
        ]);
        on_worker(world, |world| async move {
            let mut task = task(&[("delivery.guarantee", "exactly_once")]).await;
            task.put(records(0..12), &mut NoReporter).await.unwrap();
            let committed = task
                .pre_commit(&BTreeMap::from([(tp(), 12)]))
                .await
                .unwrap();
            assert_eq!(committed, BTreeMap::from([(tp(), 12)]));
            madsim::time::sleep(std::time::Duration::from_millis(300)).await;
            assert_eq!(ids(&world), ["10", "1000", "1001", "1002", "11"]);
        });
        let marks = eosim::marks::take();
        assert!(marks.contains_key("doris-kc:progress-recovered-from-label"));
        assert!(marks.contains_key("doris-kc:record-skipped-as-loaded"));
    }

    /// A 2PC commit whose transaction someone already committed is answered `transaction
    /// [n] is already committed, not pre-committed.`, which `DorisCommitter` takes as done.
    #[test]
    fn a_2pc_commit_answered_already_committed_counts_as_committed() {
        on_worker(doris_with(&[]), |world| async move {
            let mut task = task(&[]).await;
            task.put(records(0..2), &mut NoReporter).await.unwrap();
            let label = "clicklog__KC_0__KC_db_clicklog__KC_1__KC_5";
            let txn_id = world
                .lock()
                .transaction_by_label("db", label)
                .unwrap()
                .txn_id;
            let op = eosim_sim::doris::stream_load::TxnOperation::Commit;
            world.lock().stream_load_2pc(0, "db", txn_id, op).unwrap();
            let committed = task.pre_commit(&BTreeMap::from([(tp(), 2)])).await.unwrap();
            assert_eq!(committed, BTreeMap::from([(tp(), 2)]));
        });
        assert!(eosim::marks::take().contains_key("doris-kc:2pc-commit-already-committed"));
    }
}
