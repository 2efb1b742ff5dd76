//! The scenario catalogue parses, stays within its budget, and malformed scenario files are
//! rejected with errors that name the file, the key and what was expected.

use eosim::scenario::{Pipeline, Scenario, ScenarioError, SECTION_READERS};
use std::path::{Path, PathBuf};

/// The catalogue must run in a few minutes: records and seeds per scenario stay small.
const RECORDS_MAX: u64 = 500;
const SEEDS_MIN: u64 = 10;
const SEEDS_MAX: u64 = 30;

/// The two keys every scenario needs.
const HEAD: &str = "pipeline = \"kafka-consume\"\nclaim = \"at-least-once\"\n";

/// The catalogue as `cargo xtask sim` runs it: `scenarios/*.toml`, then the field-case
/// library `scenarios/field/*.toml`.
fn catalogue() -> Vec<PathBuf> {
    let mut paths = toml_files("../scenarios");
    paths.extend(toml_files("../scenarios/field"));
    paths
}

/// The `.toml` files of `dir` (relative to the harness crate), sorted.
fn toml_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
}

/// Parses `HEAD` plus `body` as `scenarios/bad.toml` and returns the error text.
fn error_of(body: &str) -> String {
    let text = format!("{HEAD}{body}");
    match Scenario::parse(Path::new("scenarios/bad.toml"), &text) {
        Ok(s) => panic!("expected an error for {body:?}, parsed {s:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "{message:?} does not mention {part:?}"
        );
    }
}

#[test]
fn every_catalogue_file_parses_and_fits_the_budget() {
    let paths = catalogue();
    assert!(
        paths.len() >= 6,
        "expected at least 6 scenarios, found {paths:?}"
    );
    for path in paths {
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 stem");
        assert_eq!(
            scenario.name,
            stem,
            "{}: name differs from the file name",
            path.display()
        );
        assert!(
            !scenario.description.is_empty(),
            "{}: no description",
            path.display()
        );
        assert!(
            scenario.workload.records <= RECORDS_MAX,
            "{}: records",
            path.display()
        );
        let seeds = scenario.seeds;
        assert!(
            (SEEDS_MIN..=SEEDS_MAX).contains(&seeds),
            "{}: seeds {seeds}",
            path.display()
        );
        let text = std::fs::read_to_string(&path).expect("readable");
        assert!(
            text.starts_with('#'),
            "{}: opens without a comment",
            path.display()
        );
    }
}

#[test]
fn scenarios_that_demonstrate_failures_expect_violated() {
    for path in catalogue() {
        let scenario = Scenario::load(&path).expect("parses");
        // A scenario that demonstrates a failure says what goes wrong in its name; a
        // canary's unsafe half (`canary-<fault>-unsafe`) says which half it is.
        let demonstrates = ["loses", "duplicates", "corrupts", "reorders"]
            .iter()
            .any(|verb| scenario.name.contains(verb))
            || scenario.name.ends_with("-unsafe");
        let expect = scenario.check.expect.as_deref().unwrap_or("holds");
        assert_eq!(
            expect == "violated",
            demonstrates,
            "{}: expect = {expect}, but the name says otherwise",
            path.display()
        );
    }
}

/// The README's catalogue table lists every `scenarios/*.toml` with the verdict its file
/// expects (`[check] expect`, default `holds`), so the table a newcomer reads cannot drift
/// from the catalogue.
#[test]
fn the_readme_lists_every_catalogue_file_with_its_expected_verdict() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let mut missing = Vec::new();
    for path in toml_files("../scenarios") {
        let scenario = Scenario::load(&path).expect("parses");
        let file = path
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .to_string();
        let expect = scenario.check.expect.as_deref().unwrap_or("holds");
        let row = format!(
            "| `{file}` | {} | {} | {expect} |",
            scenario.pipeline.name(),
            scenario.claim.name()
        );
        if !readme.lines().any(|l| l.starts_with(&row)) {
            missing.push(row);
        }
    }
    assert!(
        missing.is_empty(),
        "README rows missing or stale:\n{}",
        missing.join("\n")
    );
}

#[test]
fn an_unknown_key_names_the_file_the_key_and_the_known_keys() {
    let message = error_of("[workload]\nrecord = 5\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`workload.record`",
            "unknown field `record`",
            "`records`",
        ],
    );
}

#[test]
fn a_wrong_type_for_records_names_the_key_and_the_expected_type() {
    let message = error_of("[workload]\nrecords = \"many\"\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`workload.records`",
            "string \"many\"",
            "expected a whole number",
        ],
    );
    assert_mentions(&message, &["line 4"]);
}

#[test]
fn a_negative_record_count_is_rejected() {
    let message = error_of("[workload]\nrecords = -3\n");
    assert_mentions(
        &message,
        &["`workload.records`", "expected a whole number >= 0"],
    );
}

#[test]
fn bad_acks_lists_the_accepted_values() {
    let message = error_of("[workload]\nacks = \"2\"\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`workload.acks`",
            r#""0", "1" or "all""#,
            r#"found "2""#,
        ],
    );
}

#[test]
fn acks_may_be_written_as_kafka_integers() {
    for (acks, expected) in [("1", "1"), ("-1", "all"), ("\"all\"", "all"), ("0", "0")] {
        let text = format!("{HEAD}[workload]\nacks = {acks}\n");
        let scenario = Scenario::parse(Path::new("ok.toml"), &text).expect("parses");
        let json = serde_json::to_value(&scenario.workload).expect("serializes");
        assert_eq!(json["acks"], expected, "acks = {acks}");
    }
}

#[test]
fn a_replication_factor_above_the_broker_count_is_rejected() {
    let message = error_of("[cluster]\nbrokers = 2\n[topic]\nreplication_factor = 3\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`topic.replication_factor`",
            "at most the 2 brokers",
            "found 3",
        ],
    );
}

#[test]
fn internal_topic_partition_counts_default_to_kafkas_and_zero_is_rejected() {
    let scenario = Scenario::parse(Path::new("ok.toml"), HEAD).expect("parses");
    let config = scenario.cluster.to_config();
    assert_eq!(config.offsets_topic_num_partitions, 50);
    assert_eq!(config.transaction_state_log_num_partitions, 50);
    let text = format!("{HEAD}[cluster]\noffsets_topic_num_partitions = 3\ntransaction_state_log_num_partitions = 5\n");
    let config = Scenario::parse(Path::new("ok.toml"), &text)
        .expect("parses")
        .cluster
        .to_config();
    assert_eq!(
        (
            config.offsets_topic_num_partitions,
            config.transaction_state_log_num_partitions
        ),
        (3, 5)
    );
    let message = error_of("[cluster]\ntransaction_state_log_num_partitions = 0\n");
    assert_mentions(
        &message,
        &[
            "`cluster.transaction_state_log_num_partitions`",
            "at least 1",
            "found 0",
        ],
    );
}

#[test]
fn min_insync_replicas_above_the_replication_factor_is_rejected() {
    let message = error_of("[topic]\nreplication_factor = 2\nmin_insync_replicas = 3\n");
    assert_mentions(
        &message,
        &[
            "`topic.min_insync_replicas`",
            "at most topic.replication_factor",
        ],
    );
}

#[test]
fn an_unknown_fault_names_its_schedule_entry_and_the_known_faults() {
    let message = error_of("[[faults.schedule]]\nat_ms = 5\nfault = \"explode\"\ntarget = []\n");
    assert_mentions(
        &message,
        &[
            "`faults.schedule[0]`",
            "unknown variant `explode`",
            "`kill`",
        ],
    );
}

#[test]
fn a_fault_on_a_node_that_does_not_exist_is_rejected() {
    let message =
        error_of("[[faults.schedule]]\nat_ms = 5\nfault = \"kill\"\ntarget = [\"broker-7\"]\n");
    assert_mentions(
        &message,
        &[
            "`faults.schedule[0].target`",
            "unknown node \"broker-7\"",
            "broker-1..=broker-3",
        ],
    );
}

#[test]
fn kill_leader_must_name_the_scenario_topic_and_an_existing_partition() {
    let fault = "[[faults.schedule]]\nat_ms = 5\nfault = \"kill-leader\"\n";
    let message = error_of(&format!("{fault}topic = \"orders\"\npartition = 0\n"));
    assert_mentions(&message, &["`faults.schedule[0].topic`", "\"events\""]);
    let message = error_of(&format!("{fault}topic = \"events\"\npartition = 3\n"));
    assert_mentions(
        &message,
        &["`faults.schedule[0].partition`", "expected 0..3"],
    );
}

#[test]
fn delete_records_is_checked_for_its_offset_its_group_and_its_pipeline() {
    let fault = "[[faults.schedule]]\nat_ms = 5\nfault = \"delete-records\"\ntopic = \"events\"\n";
    let message = error_of(&format!("{fault}before = -3\n"));
    assert_mentions(&message, &["`faults.schedule[0].before`", "found -3"]);
    let message = error_of(&format!("{fault}before = \"committed\"\n"));
    assert_mentions(&message, &["`faults.schedule[0].group`", "consumer group"]);
    let message = error_of(&format!(
        "{fault}before = \"high-watermark\"\ngroup = \"sink\"\n"
    ));
    assert_mentions(&message, &["`faults.schedule[0].group`", "read only with"]);
    let internal = fault.replace("\"events\"", "\"__consumer_offsets\"");
    let message = error_of(&format!("{internal}before = 10\n"));
    assert_mentions(&message, &["`faults.schedule[0].topic`", "internal topic"]);
    let message = error_of(&format!("{fault}before = 10\npartition = 3\n"));
    assert_mentions(
        &message,
        &["`faults.schedule[0].partition`", "expected 0..3"],
    );
    let text = format!("{HEAD}{fault}before = 10\n").replace("kafka-consume", "streams-count");
    let error = Scenario::parse(Path::new("scenarios/bad.toml"), &text)
        .expect_err("only kafka-consume deletes records");
    assert_mentions(
        &error.to_string(),
        &["`faults.schedule[0].fault`", "not `streams-count`"],
    );
    let ok = format!("{HEAD}{fault}before = \"committed\"\ngroup = \"sink\"\n");
    Scenario::parse(Path::new("scenarios/ok.toml"), &ok).expect("a committed purge parses");
}

#[test]
fn add_partitions_is_checked_for_its_topic_its_count_and_its_pipeline() {
    let fault = "[[faults.schedule]]\nat_ms = 5\nfault = \"add-partitions\"\n";
    let message = error_of(&format!("{fault}topic = \"events\"\ncount = 3\n"));
    assert_mentions(
        &message,
        &[
            "`faults.schedule[0].count`",
            "more than the topic's 3",
            "found 3",
        ],
    );
    let message = error_of(&format!("{fault}topic = \"other\"\ncount = 6\n"));
    assert_mentions(&message, &["`faults.schedule[0].topic`", "\"events\""]);
    let message = error_of(&format!("{fault}topic = \"events\"\n"));
    assert_mentions(&message, &["faults.schedule[0]", "count"]);
    let text = format!("{HEAD}{fault}topic = \"events\"\ncount = 6\n")
        .replace("kafka-consume", "streams-count");
    let error = Scenario::parse(Path::new("scenarios/bad.toml"), &text)
        .expect_err("only kafka-consume adds partitions");
    assert_mentions(
        &error.to_string(),
        &["`faults.schedule[0].fault`", "not `streams-count`"],
    );
    let ok = format!("{HEAD}{fault}topic = \"events\"\ncount = 6\n");
    let s = Scenario::parse(Path::new("scenarios/ok.toml"), &ok).expect("parses");
    assert_eq!(s.faults.schedule[0].fault.name(), "add-partitions");
}

#[test]
fn metadata_max_age_and_produce_start_take_kafka_defaults_and_are_read_where_they_apply() {
    let s = Scenario::parse(Path::new("scenarios/ok.toml"), HEAD).expect("parses");
    let mut consumer = eosim::client::ConsumerConfig::new("sink");
    s.consumer.apply(&mut consumer);
    assert_eq!(consumer.metadata_max_age_ms, 300_000);
    assert_eq!(
        s.workload.retrying_producer_config().metadata_max_age_ms,
        300_000
    );
    assert_eq!(s.workload.produce_start_ms, 0);
    let body = "[workload]\nproduce_start_ms = 1000\n\"metadata.max.age.ms\" = 1000\n\
                [consumer]\n\"metadata.max.age.ms\" = 5000\n";
    let s =
        Scenario::parse(Path::new("scenarios/ok.toml"), &format!("{HEAD}{body}")).expect("parses");
    s.consumer.apply(&mut consumer);
    assert_eq!(consumer.metadata_max_age_ms, 5_000);
    assert_eq!(
        s.workload.retrying_producer_config().metadata_max_age_ms,
        1_000
    );
    assert_eq!(s.workload.produce_start_ms, 1_000);
    let text = format!("{HEAD}[workload]\nproduce_start_ms = 1000\n")
        .replace("kafka-consume", "streams-count");
    let error = Scenario::parse(Path::new("scenarios/bad.toml"), &text)
        .expect_err("produce_start_ms is kafka-consume's");
    assert_mentions(
        &error.to_string(),
        &["`workload.produce_start_ms`", "not `streams-count`"],
    );
    let text = format!("{HEAD}[workload]\n\"metadata.max.age.ms\" = 1000\n")
        .replace("kafka-consume", "transactional-copy");
    Scenario::parse(Path::new("scenarios/bad.toml"), &text)
        .expect_err("transactional-copy's producers do not read the producer keys");
}

#[test]
fn delivery_timeout_is_kafkas_key_and_must_cover_linger_and_one_request() {
    let s = Scenario::parse(Path::new("scenarios/ok.toml"), HEAD).expect("parses");
    let w = &s.workload;
    let retrying = w.retrying_producer_config().delivery_timeout_ms;
    assert_eq!(retrying, w.request_timeout_ms * (u64::from(w.retries) + 1));
    let body = "[workload]\n\"linger.ms\" = 20\n\"delivery.timeout.ms\" = 9000\n";
    let s =
        Scenario::parse(Path::new("scenarios/ok.toml"), &format!("{HEAD}{body}")).expect("parses");
    assert_eq!(
        s.workload.retrying_producer_config().delivery_timeout_ms,
        9_000
    );
    assert_eq!(
        s.workload.one_attempt_producer_config().delivery_timeout_ms,
        9_000
    );
    let message = error_of(
        "[workload]\nrequest_timeout_ms = 5000\n\"linger.ms\" = 20\n\
                            \"delivery.timeout.ms\" = 5000\n",
    );
    assert_mentions(
        &message,
        &[
            "`workload.delivery.timeout.ms`",
            "at least",
            "5020",
            "found 5000",
        ],
    );
}

#[test]
fn check_expect_accepts_only_holds_or_violated() {
    let message = error_of("[check]\nexpect = \"maybe\"\n");
    assert_mentions(
        &message,
        &["`check.expect`", r#""holds" or "violated""#, "maybe"],
    );
}

#[test]
fn a_syntax_error_gives_its_line() {
    let message = error_of("[workload\n");
    assert_mentions(&message, &["scenarios/bad.toml", "line 3"]);
}

#[test]
fn a_missing_claim_names_the_key() {
    let error = Scenario::parse(Path::new("x.toml"), "pipeline = \"kafka-consume\"\n")
        .expect_err("claim is required");
    assert_mentions(&error.to_string(), &["x.toml", "missing field `claim`"]);
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let error = Scenario::load(Path::new("scenarios/does-not-exist.toml")).expect_err("missing");
    assert!(matches!(error, ScenarioError::Io { .. }), "{error:?}");
    assert_mentions(
        &error.to_string(),
        &["scenarios/does-not-exist.toml", "cannot read"],
    );
}

#[test]
fn an_unknown_key_in_a_schedule_entry_is_rejected() {
    let message = error_of(
        "[[faults.schedule]]\nat_ms = 5\nfault = \"kill\"\ntarget = [\"brokers\"]\nbogus = 1\n",
    );
    assert_mentions(
        &message,
        &["`faults.schedule[0]`", "unknown field `bogus`", "`target`"],
    );
    let message = error_of("[[faults.schedule]]\nfault = \"heal\"\n");
    assert_mentions(&message, &["`faults.schedule[0]`", "missing field `at_ms`"]);
}

#[test]
fn a_schedule_entry_reads_as_a_time_and_a_fault() {
    use eosim_sim::kafka::model::CrashMode;
    use eosim_sim::nemesis::Fault;
    let body = "[[faults.schedule]]\nat_ms = 26000\nfault = \"kill-leader\"\n\
                topic = \"events\"\npartition = 2\nmode = \"machine-crash\"\n";
    let scenario = Scenario::parse(Path::new("ok.toml"), &format!("{HEAD}{body}")).expect("ok");
    let entry = &scenario.faults.schedule[0];
    assert_eq!(entry.at_ms, 26_000);
    let expected = Fault::KillLeader {
        topic: "events".into(),
        partition: 2,
        mode: CrashMode::MachineCrash,
    };
    assert_eq!(entry.fault, expected);
}

#[test]
fn every_real_tier_scenario_parses() {
    let paths = toml_files("../scenarios/real");
    assert!(!paths.is_empty(), "no scenarios/real/*.toml");
    for path in paths {
        Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    }
}

const PIPELINES: [Pipeline; 7] = [
    Pipeline::KafkaConsume,
    Pipeline::ConnectJdbc,
    Pipeline::ClickhouseSink,
    Pipeline::TransactionalCopy,
    Pipeline::StreamsCount,
    Pipeline::DorisSink,
    Pipeline::ConnectSource,
];

/// Parses a scenario of `pipeline` whose body is `body`.
fn parse_for(pipeline: Pipeline, body: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        "pipeline = \"{}\"\nclaim = \"at-least-once\"\n{body}",
        pipeline.name()
    );
    Scenario::parse(Path::new("scenarios/bad.toml"), &text)
}

#[test]
fn a_section_of_another_pipeline_is_refused_naming_the_section_and_its_readers() {
    let error = parse_for(Pipeline::TransactionalCopy, "[sink]\ntasks = 1\n")
        .expect_err("[sink] is clickhouse-sink's");
    assert!(matches!(error, ScenarioError::Invalid { ref key, .. } if key == "sink"));
    assert_mentions(
        &error.to_string(),
        &[
            "scenarios/bad.toml",
            "section `[sink]` is not read by pipeline `transactional-copy`; \
             it is read by: clickhouse-sink",
        ],
    );
    // Every section under every pipeline that does not read it, written empty (all
    // defaults) so presence in the text is what counts.
    for (section, readers) in SECTION_READERS {
        let names: Vec<&str> = readers.iter().map(|p| p.name()).collect();
        for pipeline in PIPELINES.iter().filter(|p| !readers.contains(p)) {
            let error = parse_for(*pipeline, &format!("[{section}]\n"))
                .expect_err("a section the pipeline does not read");
            assert_mentions(
                &error.to_string(),
                &[
                    &format!("key `{section}`"),
                    &format!("not read by pipeline `{}`", pipeline.name()),
                    &format!("it is read by: {}", names.join(", ")),
                ],
            );
        }
    }
}

#[test]
fn a_section_written_inline_or_dotted_counts_as_present() {
    for body in ["copy = { process_ms = 5 }\n", "streams.instances = 2\n"] {
        let error = parse_for(Pipeline::KafkaConsume, body).expect_err(body);
        assert_mentions(
            &error.to_string(),
            &["is not read by pipeline `kafka-consume`"],
        );
    }
}

#[test]
fn a_section_under_its_own_pipeline_is_accepted() {
    for (pipeline, body) in [
        (Pipeline::ClickhouseSink, "[sink]\ntasks = 1\n"),
        (Pipeline::TransactionalCopy, "[copy]\nprocess_ms = 5\n"),
        (Pipeline::StreamsCount, "[streams]\n"),
        (
            Pipeline::ClickhouseSink,
            "[connect]\nworker = { \"session.timeout.ms\" = \"6000\" }\n",
        ),
    ] {
        if let Err(e) = parse_for(pipeline, body) {
            panic!("{} with {body:?}: {e}", pipeline.name());
        }
    }
    // The connect-jdbc sections need each other (a connector reading the topic, events),
    // so the refusal check alone is asked: it must let every reader through.
    for (section, readers) in SECTION_READERS {
        for pipeline in readers {
            if let Err(e) = parse_for(*pipeline, &format!("[{section}]\n")) {
                let message = e.to_string();
                assert!(!message.contains("is not read by"), "{message}");
            }
        }
    }
}

#[test]
fn every_scenario_written_out_reads_back_the_same() {
    // The shrinker writes its scenarios this way (`shrunk.toml`), to be replayed.
    for path in catalogue()
        .into_iter()
        .chain(toml_files("../scenarios/real"))
    {
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = scenario.to_toml().expect("serializes");
        let again = Scenario::parse(&path, &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again, scenario, "{}", path.display());
    }
}

#[test]
fn a_kop_setting_without_the_kop_flavour_is_rejected_naming_the_key() {
    let message = error_of("[cluster]\nkafkaTransactionCoordinatorEnabled = true\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`cluster.kafkaTransactionCoordinatorEnabled`",
            "expected flavour = \"kop\"",
        ],
    );
}

#[test]
fn an_unknown_broker_entry_metadata_interceptor_is_rejected() {
    let message = error_of(
        "[cluster]\nflavour = \"kop\"\nbrokerEntryMetadataInterceptors = [\"com.example.X\"]\n",
    );
    assert_mentions(
        &message,
        &[
            "`cluster.brokerEntryMetadataInterceptors`",
            "unknown interceptor \"com.example.X\"",
            "AppendIndexMetadataInterceptor",
        ],
    );
}

#[test]
fn an_unknown_flavour_is_rejected() {
    let message = error_of("[cluster]\nflavour = \"redpanda\"\n");
    assert_mentions(&message, &["cluster.flavour", "kafka", "kop"]);
}

#[test]
fn the_kop_flavour_takes_kops_defaults_where_its_keys_are_unset() {
    use eosim_sim::kafka::kop::{Flavour, KopConfig, OffsetScheme};
    let text = format!("{HEAD}[cluster]\nflavour = \"kop\"\n");
    let s = Scenario::parse(Path::new("scenarios/kop.toml"), &text).expect("parses");
    let Flavour::Kop(kop) = s.cluster.flavour() else {
        panic!("expected KoP");
    };
    assert_eq!(kop, KopConfig::default());
    assert!(
        !kop.kafka_transaction_coordinator_enabled,
        "KoP's default is off"
    );
    assert_eq!(kop.offset_scheme(), OffsetScheme::BrokerEntryIndex);
    let kafka = Scenario::parse(Path::new("scenarios/k.toml"), HEAD).expect("parses");
    assert_eq!(kafka.cluster.flavour(), Flavour::Kafka);
}

#[test]
fn a_stall_reason_without_an_expected_stall_is_rejected() {
    let message = error_of("[check]\nstall_reason = \"x\"\n");
    assert_mentions(
        &message,
        &[
            "`check.stall_reason`",
            "only with check.expect = \"stalled\"",
        ],
    );
}

#[test]
fn consumer_keys_take_kafka_names_and_defaults() {
    let scenario = Scenario::parse(Path::new("ok.toml"), HEAD).expect("parses");
    let c = &scenario.consumer;
    assert_eq!(
        (
            c.enable_auto_commit,
            c.auto_commit_interval_ms,
            c.max_poll_interval_ms,
            c.fetch_min_bytes,
            c.fetch_max_wait_ms
        ),
        (false, 5_000, 300_000, 1, None)
    );
    let mut config = eosim::client::ConsumerConfig::new("g");
    scenario.consumer.apply(&mut config);
    assert_eq!(config.fetch_max_wait_ms, 500, "unset: Kafka's default");
    let sink = scenario.sink_consumer_config("consumer-1");
    assert_eq!(
        (sink.group_id.as_str(), sink.auto_offset_reset),
        ("sink", eosim::client::AutoOffsetReset::Earliest)
    );
    assert_eq!(sink.group_instance_id, None, "dynamic members unless set");
    let text = format!(
        "{HEAD}[consumer]\n\"isolation.level\" = \"read_committed\"\n\
         \"auto.offset.reset\" = \"none\"\n\"enable.auto.commit\" = true\n\
         \"fetch.min.bytes\" = 4096\n\"fetch.max.wait.ms\" = 100\n"
    );
    let scenario = Scenario::parse(Path::new("ok.toml"), &text).expect("parses");
    let json = serde_json::to_value(&scenario.consumer).expect("serializes");
    assert_eq!(json["isolation.level"], "read_committed");
    assert_eq!(json["auto.offset.reset"], "none");
    assert_eq!(json["enable.auto.commit"], true);
    let mut config = eosim::client::ConsumerConfig::new("g");
    scenario.consumer.apply(&mut config);
    assert_eq!(
        (config.fetch_min_bytes, config.fetch_max_wait_ms),
        (4096, 100)
    );
    let text = format!("{HEAD}[consumer]\n\"group.instance.id\" = \"sink-app\"\n");
    let scenario = Scenario::parse(Path::new("ok.toml"), &text).expect("parses");
    let sink = scenario.sink_consumer_config("consumer-1");
    assert_eq!(
        sink.group_instance_id.as_deref(),
        Some("sink-app-consumer-1")
    );
}

#[test]
fn a_group_instance_id_kafka_refuses_is_refused_by_name() {
    for bad in ["", "..", "has space", "slash/no"] {
        let message = error_of(&format!("[consumer]\n\"group.instance.id\" = {bad:?}\n"));
        assert_mentions(&message, &["consumer.group.instance.id", "[a-zA-Z0-9._-]"]);
    }
    let message = error_of("[cluster]\nstatic_member_rejoin = \"kip-999\"\n");
    assert_mentions(&message, &["static_member_rejoin", "pre-kip814"]);
}

#[test]
fn a_bad_consumer_value_names_the_key() {
    let message = error_of("[consumer]\n\"auto.offset.reset\" = \"smallest\"\n");
    assert_mentions(
        &message,
        &["scenarios/bad.toml", "auto.offset.reset", "smallest"],
    );
    let message = error_of("[consumer]\n\"isolation.level\" = \"serializable\"\n");
    assert_mentions(&message, &["isolation.level", "read_committed"]);
    let message = error_of("[consumer]\n\"auto.commit.interval.ms\" = 0\n");
    assert_mentions(
        &message,
        &["consumer.auto.commit.interval.ms", "at least 1"],
    );
}

#[test]
fn the_assignment_strategy_takes_kafka_class_names_and_short_names() {
    use eosim::client::{AssignmentStrategy::*, ConsumerConfig};
    let scenario = Scenario::parse(Path::new("ok.toml"), HEAD).expect("parses");
    let mut config = ConsumerConfig::new("g");
    scenario.consumer.apply(&mut config);
    assert_eq!(
        config.partition_assignment_strategy,
        vec![Range, CooperativeSticky]
    );
    assert!(!config.cooperative(), "Kafka's default list is eager");
    for (value, expected, cooperative) in [
        ("cooperative-sticky", vec![CooperativeSticky], true),
        (
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            vec![CooperativeSticky],
            true,
        ),
        ("range", vec![Range], false),
        (
            "org.apache.kafka.clients.consumer.RangeAssignor, cooperative-sticky",
            vec![Range, CooperativeSticky],
            false,
        ),
    ] {
        let text = format!("{HEAD}[consumer]\n\"partition.assignment.strategy\" = \"{value}\"\n");
        let scenario = Scenario::parse(Path::new("ok.toml"), &text).expect("parses");
        let mut config = ConsumerConfig::new("g");
        scenario.consumer.apply(&mut config);
        assert_eq!(config.partition_assignment_strategy, expected, "{value}");
        assert_eq!(config.cooperative(), cooperative, "{value}");
    }
    let message = error_of(
        "[consumer]\n\"partition.assignment.strategy\" = \"\
         org.apache.kafka.clients.consumer.StickyAssignor\"\n",
    );
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "consumer.partition.assignment.strategy",
            "StickyAssignor",
            "CooperativeStickyAssignor (cooperative-sticky)",
        ],
    );
    let message = error_of("[consumer]\n\"partition.assignment.strategy\" = \"\"\n");
    assert_mentions(&message, &["partition.assignment.strategy", "found none"]);
}

#[test]
fn the_consumer_section_is_refused_where_no_pipeline_reads_it() {
    let text = "pipeline = \"streams-count\"\nclaim = \"exactly-once\"\n\
                [consumer]\n\"isolation.level\" = \"read_committed\"\n";
    let e = Scenario::parse(Path::new("scenarios/bad.toml"), text).expect_err("refused");
    assert_mentions(&e.to_string(), &["[consumer]", "kafka-consume"]);
}

#[test]
fn sink_consumer_overrides_reach_the_connector_and_bad_ones_are_refused() {
    let head = "pipeline = \"clickhouse-sink\"\nclaim = \"exactly-once\"\n[sink]\n";
    let ok = format!("{head}\"consumer.override.isolation.level\" = \"read_committed\"\n");
    let scenario = Scenario::parse(Path::new("ok.toml"), &ok).expect("parses");
    let props = scenario
        .sink
        .expect("sink")
        .connector_props("events", "clickhouse", 8123);
    assert_eq!(
        props
            .get("consumer.override.isolation.level")
            .map(String::as_str),
        Some("read_committed")
    );
    assert!(!props.contains_key("consumer.override.auto.offset.reset"));
    let bad = format!("{head}\"consumer.override.auto.offset.reset\" = \"smallest\"\n");
    let e = Scenario::parse(Path::new("scenarios/bad.toml"), &bad).expect_err("refused");
    assert_mentions(
        &e.to_string(),
        &[
            "sink.consumer.override.auto.offset.reset",
            "smallest",
            "earliest",
        ],
    );
}

/// A `doris-sink` connector: its keys are checked at load, a contradiction the connector
/// refuses (group commit with a forced 2PC) and a table the pipeline does not create are
/// refused naming the key.
#[test]
fn a_doris_connector_with_contradictory_or_unknown_keys_is_refused_naming_them() {
    let connector = |extra: &str| {
        format!(
            "[topic]\nname = \"clicklog\"\n[connector]\nname = \"d\"\n\
             \"connector.class\" = \"org.apache.doris.kafka.connector.DorisSinkConnector\"\n\
             topics = \"clicklog\"\n\"doris.urls\" = \"doris-fe\"\n\"doris.user\" = \"root\"\n\
             \"doris.database\" = \"db\"\n{extra}"
        )
    };
    parse_for(Pipeline::DorisSink, &connector("")).expect("a minimal connector");
    let cases = [
        (
            "\"enable.2pc\" = \"true\"\n\"sink.properties.group_commit\" = \"sync_mode\"\n",
            "disable two phase commit",
        ),
        ("\"buffer.count.record\" = \"5\"\n", "`buffer.count.record`"),
        (
            "\"doris.topic2table.map\" = \"clicklog:other\"\n",
            "doris.topic2table.map",
        ),
        ("\"load.model\" = \"copy_into\"\n", "not modelled"),
    ];
    for (extra, named) in cases {
        let error = parse_for(Pipeline::DorisSink, &connector(extra)).expect_err(extra);
        assert_mentions(&error.to_string(), &[named]);
    }
}

/// A source connector's keys are checked as a sink's: KIP-618's `exactly.once.support`
/// against the worker, `transaction.boundary = "connector"` (Debezium cannot define
/// transactions), `tasks.max` above one, a topic other than the scenario's, an unknown
/// worker value and an empty `[source]` are refused naming the file and the key.
#[test]
fn a_source_connector_with_unsupported_or_contradictory_keys_is_refused_naming_them() {
    let scenario = |worker: &str, extra: &str, source: &str| {
        format!(
            "[topic]\nname = \"db1.public.orders\"\n[connect.worker]\n{worker}\n\
             [connector]\nname = \"inventory\"\n\
             \"connector.class\" = \"io.debezium.connector.postgresql.PostgresConnector\"\n\
             \"topic.prefix\" = \"db1\"\n{extra}\n[source]\n{source}"
        )
    };
    let ok = parse_for(Pipeline::ConnectSource, &scenario("", "", "")).expect("minimal");
    assert_eq!(ok.source.transactions, 100);
    let enabled = "\"exactly.once.source.support\" = \"enabled\"";
    let required = "\"exactly.once.support\" = \"required\"";
    parse_for(Pipeline::ConnectSource, &scenario(enabled, required, "")).expect("KIP-618");
    let cases = [
        ("", required, "", "exactly.once.support"),
        (
            enabled,
            "\"transaction.boundary\" = \"connector\"",
            "",
            "transaction.boundary",
        ),
        ("", "\"tasks.max\" = \"2\"", "", "tasks.max"),
        (
            "",
            "\"table.include.list\" = \"public.items\"",
            "",
            "connector.topic.prefix",
        ),
        (
            "\"exactly.once.source.support\" = \"on\"",
            "",
            "",
            "exactly.once.source.support",
        ),
        ("", "\"topic.prefixx\" = \"x\"", "", "topic.prefixx"),
        (
            "",
            "",
            "rows_per_transaction = 0",
            "source.rows_per_transaction",
        ),
        ("", "", "rate = 5", "rate"),
    ];
    for (worker, extra, source, named) in cases {
        let error =
            parse_for(Pipeline::ConnectSource, &scenario(worker, extra, source)).expect_err(named);
        assert_mentions(&error.to_string(), &["scenarios/bad.toml", named]);
    }
}

#[test]
fn a_transactional_upstream_takes_kafkas_names_and_its_keys_need_the_id() {
    let ok =
        "[workload]\n\"transactional.id\" = \"up\"\ntransaction_records = 5\nabort_every = 3\n";
    let scenario = Scenario::parse(Path::new("ok.toml"), &format!("{HEAD}{ok}")).expect("ok");
    assert_eq!(scenario.workload.transactional_id.as_deref(), Some("up"));
    assert_eq!(scenario.workload.abort_every, Some(3));
    let message = error_of("[workload]\nabort_every = 3\n");
    assert_mentions(&message, &["workload.abort_every", "transactional.id"]);
    let message = error_of("[workload]\n\"transactional.id\" = \"up\"\ntransaction_records = 0\n");
    assert_mentions(&message, &["workload.transaction_records", "at least 1"]);
    let message = error_of("[workload]\n\"transactional.ids\" = \"up\"\n");
    assert_mentions(&message, &["transactional.ids", "transactional.id"]);
    for pipeline in [Pipeline::TransactionalCopy, Pipeline::StreamsCount] {
        let scenario = parse_for(pipeline, "[workload]\n\"transactional.id\" = \"up\"\n")
            .unwrap_or_else(|e| panic!("{}: {e}", pipeline.name()));
        assert_eq!(scenario.workload.transactional_id.as_deref(), Some("up"));
    }
    let error = parse_for(
        Pipeline::ConnectSource,
        "[workload]\n\"transactional.id\" = \"up\"\n",
    )
    .expect_err("a source connector's input is a database, not a producer");
    assert_mentions(
        &error.to_string(),
        &[
            "workload.transactional.id",
            "connect-source",
            "transactional-copy",
            "streams-count",
        ],
    );
}

#[test]
fn consumer_isolation_of_the_copy_and_of_streams_takes_kafkas_names() {
    let copy = parse_for(
        Pipeline::TransactionalCopy,
        "[copy]\n\"isolation.level\" = \"read_uncommitted\"\n",
    )
    .expect("a read_uncommitted copier");
    assert_eq!(
        copy.copy.isolation_level,
        eosim::client::IsolationLevel::ReadUncommitted
    );
    let default = parse_for(Pipeline::TransactionalCopy, "").expect("defaults");
    assert_eq!(
        default.copy.isolation_level,
        eosim::client::IsolationLevel::ReadCommitted,
        "the copier reads read_committed unless told otherwise"
    );
    let error = parse_for(
        Pipeline::TransactionalCopy,
        "[copy]\n\"isolation.level\" = \"committed\"\n",
    )
    .expect_err("not a level");
    assert_mentions(&error.to_string(), &["isolation.level", "read_committed"]);
    let alo = "[streams]\n\"consumer.isolation.level\" = \"read_committed\"\n";
    let scenario = parse_for(Pipeline::StreamsCount, alo).expect("at_least_once read_committed");
    assert_eq!(
        scenario.streams.consumer_isolation_level,
        Some(eosim::client::IsolationLevel::ReadCommitted)
    );
    let eos = "[streams]\nprocessing_guarantee = \"exactly_once_v2\"\n\
               \"consumer.isolation.level\" = \"read_uncommitted\"\n";
    let error = parse_for(Pipeline::StreamsCount, eos).expect_err("EOS reads read_committed");
    assert_mentions(
        &error.to_string(),
        &[
            "streams.consumer.isolation.level",
            "exactly_once_v2",
            "read_committed",
        ],
    );
}

#[test]
fn the_record_cache_size_is_refused_under_both_names_or_below_zero_naming_file_and_key() {
    let both = "[streams]\n\"statestore.cache.max.bytes\" = 1024\n\
                \"cache.max.bytes.buffering\" = 2048\n";
    let error = parse_for(Pipeline::StreamsCount, both).expect_err("both names");
    assert_mentions(
        &error.to_string(),
        &[
            "scenarios/bad.toml",
            "streams.cache.max.bytes.buffering",
            "set one, not both (found 2048 here and 1024 there)",
        ],
    );
    let negative = "[streams]\n\"statestore.cache.max.bytes\" = -1\n";
    let error = parse_for(Pipeline::StreamsCount, negative).expect_err("negative");
    assert_mentions(
        &error.to_string(),
        &["scenarios/bad.toml", "streams.statestore.cache.max.bytes"],
    );
    let alias = "[streams]\n\"cache.max.bytes.buffering\" = 0\n";
    let s = parse_for(Pipeline::StreamsCount, alias).expect("the deprecated name alone");
    assert_eq!(s.streams.cache_max_bytes(), 0);
}

#[test]
fn a_repartition_without_new_keys_or_an_unknown_group_by_names_the_file_and_the_key() {
    let parse = |streams: &str| {
        let text = format!("{HEAD}[streams]\n{streams}").replace("kafka-consume", "streams-count");
        Scenario::parse(Path::new("scenarios/bad.toml"), &text)
            .expect_err("refused")
            .to_string()
    };
    let message = parse("group_by = \"id-mod\"\ngroup_by_keys = 0\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`streams.group_by_keys`",
            "at least 1",
        ],
    );
    let message = parse("group_by = \"value\"\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`streams.group_by`",
            "input-key",
            "id-mod",
        ],
    );
}

#[test]
fn an_unknown_topology_or_a_key_it_cannot_take_names_the_file_and_the_key() {
    let parse = |streams: &str| {
        let text = format!("{HEAD}[streams]\n{streams}").replace("kafka-consume", "streams-count");
        Scenario::parse(Path::new("scenarios/bad.toml"), &text)
            .expect_err("refused")
            .to_string()
    };
    let message = parse("topology = \"join\"\n");
    assert_mentions(
        &message,
        &[
            "scenarios/bad.toml",
            "`streams.topology`",
            "count",
            "filter-map-values",
            "aggregate-ids",
            "stream-table-join",
        ],
    );
    let message = parse("topology = \"aggregate-ids\"\ngroup_by = \"id-mod\"\n");
    assert_mentions(
        &message,
        &["scenarios/bad.toml", "`streams.group_by`", "aggregate-ids"],
    );
    let message = parse("topology = \"filter-map-values\"\nnum_standby_replicas = 1\n");
    assert_mentions(&message, &["`streams.num_standby_replicas`", "no store"]);
    // The join's table must be co-partitioned with the 3 partitions of `[topic]`, and its
    // stream-time synchronisation is not modelled.
    let join_keys: [(&str, &[&str]); 2] = [
        (
            "table_partitions = 4",
            &[
                "`streams.table_partitions`",
                "topic.partitions = 3",
                "co-partitioned",
            ],
        ),
        (
            "\"max.task.idle.ms\" = 0",
            &["`streams.max.task.idle.ms`", "not modelled"],
        ),
    ];
    for (line, mentions) in join_keys {
        let message = parse(&format!("topology = \"stream-table-join\"\n{line}\n"));
        assert_mentions(&message, &[&["scenarios/bad.toml"], mentions].concat());
    }
}

#[test]
fn group_protocol_consumer_reaches_the_consumer_config_and_the_cluster_timeouts_the_model() {
    let text = format!(
        "{HEAD}[cluster]\ngroup_consumer_session_timeout_ms = 6000\n\
         group_consumer_heartbeat_interval_ms = 2000\n\
         [consumer]\n\"group.protocol\" = \"consumer\"\n\"group.remote.assignor\" = \"range\"\n"
    );
    let scenario = Scenario::parse(Path::new("ok.toml"), &text).expect("parses");
    let config = scenario.sink_consumer_config("consumer-0");
    assert_eq!(
        config.group_protocol,
        eosim::client::GroupProtocol::Consumer
    );
    assert_eq!(config.group_remote_assignor.as_deref(), Some("range"));
    let cluster = scenario.cluster.to_config();
    assert_eq!(
        (
            cluster.group_consumer_session_timeout_ms,
            cluster.group_consumer_heartbeat_interval_ms
        ),
        (6000, 2000)
    );
    let defaults = Scenario::parse(Path::new("ok.toml"), HEAD).expect("parses");
    let config = defaults.sink_consumer_config("consumer-0");
    assert_eq!(config.group_protocol, eosim::client::GroupProtocol::Classic);
    let cluster = defaults.cluster.to_config();
    assert_eq!(cluster.group_consumer_session_timeout_ms, 45_000);
    let json = serde_json::to_value(&defaults.consumer).expect("serializes");
    assert!(
        json.get("group.protocol").is_none(),
        "classic is not written out"
    );
}

/// Java's `ConsumerConfig.checkUnsupportedConfigsPostProcess`: the classic protocol's keys
/// under `group.protocol = consumer` and `group.remote.assignor` under `classic` are
/// refused; so are what the model lacks (KIP-848 static members, other assignors).
#[test]
fn keys_the_group_protocol_rules_out_are_refused_by_name() {
    let consumer = "[consumer]\n\"group.protocol\" = \"consumer\"\n";
    let cases = [
        (
            format!("{consumer}\"partition.assignment.strategy\" = \"range\"\n"),
            "consumer.partition.assignment.strategy",
        ),
        (
            format!("[workload]\nsession_timeout_ms = 6000\n{consumer}"),
            "workload.session_timeout_ms",
        ),
        (
            format!("{consumer}\"group.instance.id\" = \"app\"\n"),
            "consumer.group.instance.id",
        ),
        (
            "[consumer]\n\"group.remote.assignor\" = \"uniform\"\n".to_string(),
            "consumer.group.remote.assignor",
        ),
    ];
    for (body, key) in cases {
        let message = error_of(&body);
        assert_mentions(&message, &[key, "is not supported when group.protocol is"]);
    }
    let message = error_of(&format!(
        "{consumer}\"group.remote.assignor\" = \"sticky\"\n"
    ));
    assert_mentions(
        &message,
        &["consumer.group.remote.assignor", "uniform", "range"],
    );
    let message = error_of("[consumer]\n\"group.protocol\" = \"streams\"\n");
    assert_mentions(&message, &["group.protocol", "classic", "consumer"]);
}

#[test]
fn the_clickhouse_sink_takes_connects_consumer_override_names() {
    let sink = "[sink]\n\"consumer.override.max.poll.records\" = 30\n\
                \"consumer.override.group.protocol\" = \"consumer\"\n";
    let scenario = parse_for(Pipeline::ClickhouseSink, sink).expect("KIP-848 task consumers");
    let spec = scenario.sink.as_ref().expect("[sink]");
    assert_eq!(spec.batch_records_max, 30);
    let props = spec.connector_props("events", "clickhouse", 8123);
    assert_eq!(props["consumer.override.group.protocol"], "consumer");
    assert!(
        !props.contains_key("consumer.override.session.timeout.ms"),
        "a KIP-848 member takes no session timeout: {props:?}"
    );
    let classic = parse_for(Pipeline::ClickhouseSink, "[sink]\n").expect("defaults");
    let props = (classic.sink.as_ref().expect("[sink]")).connector_props("events", "h", 1);
    assert_eq!(props["consumer.override.session.timeout.ms"], "10000");
    // Connect's parser judges the overrides together, as Java's ConsumerConfig does.
    let strategy = "[sink]\n\"consumer.override.group.protocol\" = \"consumer\"\n\
                    \"consumer.override.partition.assignment.strategy\" = \"range\"\n";
    let error = parse_for(Pipeline::ClickhouseSink, strategy).expect_err("refused");
    assert_mentions(
        &error.to_string(),
        &[
            "consumer.override.partition.assignment.strategy",
            "group.protocol",
        ],
    );
    let bad = "[sink]\n\"consumer.override.group.protocol\" = \"eager\"\n";
    let error = parse_for(Pipeline::ClickhouseSink, bad).expect_err("not a protocol");
    assert_mentions(
        &error.to_string(),
        &["consumer.override.group.protocol", "eager"],
    );
}

#[test]
fn postgres_durability_settings_are_postgres_values_or_refused_naming_the_key() {
    let file = "../scenarios/p2-upsert-database-crash-synchronous-commit-off-loses.toml";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).expect("the file is there");
    let scenario = Scenario::parse(&path, &text).expect("the catalogue file parses");
    let config = scenario.postgres.db_config(7);
    assert!(!config.synchronous_commit);
    assert_eq!(
        (config.wal_writer_delay_ms, config.wal_writer_phase_ms),
        (10_000, 7)
    );
    let with = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        match Scenario::parse(&path, &text.replace(from, to)) {
            Ok(_) => panic!("{to} was accepted"),
            Err(e) => e.to_string(),
        }
    };
    let error = with("wal_writer_delay_ms = 10000", "wal_writer_delay_ms = 20000");
    assert_mentions(
        &error,
        &[
            "postgres.wal_writer_delay_ms",
            "20000: PostgreSQL takes 1 to 10000 ms",
        ],
    );
    let error = with(
        "synchronous_commit = \"off\"",
        "synchronous_commit = \"sometimes\"",
    );
    assert_mentions(&error, &["synchronous_commit", "sometimes", "remote_apply"]);
    // Every other value waits for the local flush.
    let local = text.replace(
        "synchronous_commit = \"off\"",
        "synchronous_commit = \"local\"",
    );
    let scenario = Scenario::parse(&path, &local).expect("local is PostgreSQL's");
    assert!(scenario.postgres.db_config(0).synchronous_commit);
}
