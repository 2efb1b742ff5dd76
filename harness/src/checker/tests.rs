//! Checker tests: one per anomaly, named after it, on a literal history of a few ops, with a
//! valid history next to it.

use super::test_support::*;
use super::*;
use crate::history::{OpKind, Value};

fn kill() -> Value {
    Value::Fault {
        name: "kill".to_string(),
        detail: "broker-1".to_string(),
    }
}

use OpKind::{Info, Invoke, Ok as Done};

/// The ids of the cases of `anomaly`, in order.
fn ids(result: &CheckResult, anomaly: Anomaly) -> Vec<Vec<u64>> {
    result
        .anomalies
        .get(&anomaly)
        .map_or(Vec::new(), |c| c.iter().map(|c| c.ids.clone()).collect())
}

#[test]
fn lost_write() {
    // Send 2 was acknowledged at offset 1, a broker was killed, and the final log ends at
    // offset 0: an acknowledged write is gone.
    let h = history(vec![
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Invoke, send(2, None)),
        ("producer-0", Done, send(2, Some(1))),
        ("nemesis", Info, kill()),
        ("final", Done, log(&[(1, 0)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(ids(&result, Anomaly::LostWrite), vec![vec![2]]);
    assert_eq!(result.forbidden, vec![Anomaly::LostWrite]);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::LostWrite][0].ops, vec![3, 5]);
}

#[test]
fn lost_write_valid_history() {
    // The same sends, both in the final log.
    let h = history(vec![
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Invoke, send(2, None)),
        ("producer-0", Done, send(2, Some(1))),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(result.validity, Validity::Valid, "{result:?}");
    assert!(result.anomalies.is_empty(), "{result:?}");
}

#[test]
fn send_with_unknown_outcome_is_not_a_lost_write() {
    // Send 2 timed out (info): it may never have happened, so its absence proves nothing.
    let h = history(vec![
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Invoke, send(2, None)),
        ("producer-0", Info, send(2, None)),
        ("final", Done, log(&[(1, 0)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(result.validity, Validity::Valid, "{result:?}");
}

#[test]
fn lost_write_is_allowed_with_acks_0_and_forbidden_with_acks_1() {
    let h = history(vec![
        ("producer-0", Invoke, send(2, None)),
        ("producer-0", Done, send(2, Some(0))),
        ("final", Done, log(&[])),
    ]);
    let acks_0 = CheckOptions {
        acks: ProducerAcks::None,
        ..kafka_only()
    };
    let result = check_all(&h, &acks_0);
    assert_eq!(ids(&result, Anomaly::LostWrite), vec![vec![2]]);
    assert_eq!(result.validity, Validity::Valid);
    let acks_1 = CheckOptions {
        acks: ProducerAcks::Leader,
        ..kafka_only()
    };
    assert_eq!(check_all(&h, &acks_1).validity, Validity::Invalid);
}

#[test]
fn unseen() {
    // Both records are in the log but the consumer only ever polled record 1. Unseen is
    // informational: the run stays valid.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(ids(&result, Anomaly::Unseen), vec![vec![2]]);
    assert_eq!(result.validity, Validity::Valid);
}

#[test]
fn unseen_valid_history() {
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("consumer-0", Done, poll(&[(1, 0), (2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert!(result.anomalies.is_empty(), "{result:?}");
}

#[test]
fn duplicate() {
    // The first attempt of send 1 timed out, the retry was acknowledged at offset 1, and
    // the log holds record 1 at offsets 0 and 1: the broker did not deduplicate the retry.
    let h = history(vec![
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Info, send(1, None)),
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Done, send(1, Some(1))),
        ("final", Done, log(&[(1, 0), (1, 1)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(ids(&result, Anomaly::Duplicate), vec![vec![1]]);
    assert_eq!(result.anomalies[&Anomaly::Duplicate][0].offsets, vec![0, 1]);
    assert!(
        !result.anomalies.contains_key(&Anomaly::InconsistentOffsets),
        "{result:?}"
    );
    assert_eq!(result.validity, Validity::Invalid);
    let plain = CheckOptions {
        idempotent_producer: false,
        ..kafka_only()
    };
    assert_eq!(check_all(&h, &plain).validity, Validity::Valid);
}

#[test]
fn duplicate_valid_history() {
    // The retry was deduplicated: one copy in the log.
    let h = history(vec![
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Info, send(1, None)),
        ("producer-0", Invoke, send(1, None)),
        ("producer-0", Done, send(1, Some(0))),
        ("final", Done, log(&[(1, 0)])),
    ]);
    assert!(check_all(&h, &kafka_only()).anomalies.is_empty());
}

#[test]
fn inconsistent_offsets() {
    // acks=1 and an unclean election: send 2 was acknowledged at offset 1, the new leader
    // never had it and gave offset 1 to send 3. Offset 1 was seen holding two ids.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("nemesis", Info, kill()),
        ("producer-0", Done, send(3, Some(1))),
        ("final", Done, log(&[(1, 0), (3, 1)])),
    ]);
    let options = CheckOptions {
        acks: ProducerAcks::Leader,
        ..kafka_only()
    };
    let result = check_all(&h, &options);
    assert_eq!(ids(&result, Anomaly::InconsistentOffsets), vec![vec![2, 3]]);
    assert_eq!(ids(&result, Anomaly::LostWrite), vec![vec![2]]);
    assert_eq!(
        result.forbidden,
        vec![Anomaly::LostWrite, Anomaly::InconsistentOffsets]
    );
    assert_eq!(result.validity, Validity::Invalid);
}

#[test]
fn inconsistent_offsets_of_one_id() {
    // A consumer saw record 1 at offset 5, but the ack and the final log put it at 0.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("consumer-0", Done, poll(&[(1, 5)])),
        ("final", Done, log(&[(1, 0)])),
    ]);
    let result = check_all(&h, &kafka_only());
    assert_eq!(ids(&result, Anomaly::InconsistentOffsets), vec![vec![1]]);
    assert_eq!(
        result.anomalies[&Anomaly::InconsistentOffsets][0].offsets,
        vec![5]
    );
}

#[test]
fn inconsistent_offsets_valid_history() {
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(3, Some(1))),
        ("consumer-0", Done, poll(&[(1, 0), (3, 1)])),
        ("final", Done, log(&[(1, 0), (3, 1)])),
    ]);
    assert!(check_all(&h, &kafka_only()).anomalies.is_empty());
}

#[test]
fn nonmonotonic_poll() {
    // consumer-0 read offsets 0 and 1, then offset 0 again with no crash in between.
    // Forbidden with manual assignment; with subscription a rebalance may rewind.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("consumer-0", Done, poll(&[(1, 0), (2, 1)])),
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert_eq!(ids(&result, Anomaly::NonmonotonicPoll), vec![vec![2, 1]]);
    assert_eq!(
        result.anomalies[&Anomaly::NonmonotonicPoll][0].ops,
        vec![2, 3]
    );
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(check_all(&h, &kafka_only()).validity, Validity::Valid);
}

#[test]
fn nonmonotonic_poll_valid_history() {
    // The same rewind after consumer-0 crashed (an info op): a new process instance.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("consumer-0", Done, poll(&[(1, 0), (2, 1)])),
        ("consumer-0", Info, commit(2)),
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert!(
        !result.anomalies.contains_key(&Anomaly::NonmonotonicPoll),
        "{result:?}"
    );
    assert_eq!(result.validity, Validity::Valid);
}

#[test]
fn poll_skip() {
    // consumer-0 read offset 0, then offset 2; the log holds record 2 at offset 1.
    let h = history(vec![
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("consumer-0", Done, poll(&[(3, 2)])),
        ("final", Done, log(&[(1, 0), (2, 1), (3, 2)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert_eq!(ids(&result, Anomaly::PollSkip), vec![vec![2]]);
    assert_eq!(
        result.anomalies[&Anomaly::PollSkip][0].offsets,
        vec![0, 1, 2]
    );
    assert_eq!(result.validity, Validity::Invalid);
}

#[test]
fn poll_skip_valid_history() {
    // Offsets are not dense: offset 1 holds a transaction marker, no record. Reading 0 then
    // 2 skips nothing.
    let h = history(vec![
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("consumer-0", Done, poll(&[(3, 2)])),
        ("final", Done, log(&[(1, 0), (3, 2)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert!(result.anomalies.is_empty(), "{result:?}");
}

#[test]
fn aborted_read() {
    // Reserved: the history carries no transaction outcomes yet, so nothing is inferred;
    // the anomaly keeps its Jepsen name and is forbidden exactly under read_committed.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("final", Done, log(&[(1, 0)])),
    ]);
    let a = Analysis::new(&h, &kafka_only());
    assert!(aborted_read_cases(&a).is_empty());
    assert_eq!(
        serde_json::to_string(&Anomaly::AbortedRead).unwrap(),
        "\"aborted-read\""
    );
    let committed = CheckOptions {
        read_committed: true,
        ..kafka_only()
    };
    assert!(committed.forbidden_set().contains(&Anomaly::AbortedRead));
    assert!(!kafka_only().forbidden_set().contains(&Anomaly::AbortedRead));
}

#[test]
fn sink_lost() {
    // Records 1 and 2 are committed to Kafka; after the drain the sink holds only 1.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("sink-0", Done, write(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::ExactlyOnce));
    assert_eq!(ids(&result, Anomaly::SinkLost), vec![vec![2]]);
    assert_eq!(result.validity, Validity::Invalid);
    let at_most_once = CheckOptions::for_claim(Claim::AtMostOnce);
    assert_eq!(check_all(&h, &at_most_once).validity, Validity::Valid);
}

#[test]
fn sink_lost_valid_history() {
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("producer-0", Done, send(2, Some(1))),
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::ExactlyOnce));
    assert!(result.anomalies.is_empty(), "{result:?}");
    assert_eq!(result.validity, Validity::Valid);
}

#[test]
fn sink_duplicate() {
    // The sink wrote batch [1, 2], crashed before committing, and wrote it again on
    // replay: the table holds record 1 and 2 twice. Forbidden for exactly-once only.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("sink-0", Info, commit(2)),
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1), (1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::ExactlyOnce));
    assert_eq!(ids(&result, Anomaly::SinkDuplicate), vec![vec![1], vec![2]]);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.counts["sink-redelivered-ids"], 2);
    let at_least_once = CheckOptions::for_claim(Claim::AtLeastOnce);
    assert_eq!(check_all(&h, &at_least_once).validity, Validity::Valid);
}

#[test]
fn sink_duplicate_valid_history() {
    // The replayed batch was deduplicated by the target: each record held once.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("sink-0", Info, commit(2)),
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::ExactlyOnce));
    assert!(result.anomalies.is_empty(), "{result:?}");
}

#[test]
fn sink_reorder() {
    // Records 1 and 2 share key k, at offsets 0 and 1; the sink holds 2 before 1.
    let h = history(vec![
        ("sink-0", Done, write(&[(2, 1)])),
        ("sink-0", Done, write(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(2, 1), (1, 0)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::AtLeastOnce));
    assert_eq!(ids(&result, Anomaly::SinkReorder), vec![vec![2, 1]]);
    assert_eq!(result.validity, Validity::Invalid);
    let unordered = CheckOptions {
        per_key_order: false,
        ..CheckOptions::default()
    };
    assert_eq!(check_all(&h, &unordered).validity, Validity::Valid);
}

#[test]
fn sink_reorder_valid_history() {
    // A replay appends an older record again after a newer one; only the first row of each
    // id places it, so per-key order holds.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("sink-0", Done, write(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1), (1, 0)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::AtLeastOnce));
    assert!(
        !result.anomalies.contains_key(&Anomaly::SinkReorder),
        "{result:?}"
    );
    assert_eq!(result.validity, Validity::Valid);
}

#[test]
fn progress_ahead_of_data() {
    // The sink committed offset 2 (records at 0 and 1 consumed) before it wrote record 2:
    // a crash then would have skipped it. Forbidden for at-least-once.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0)])),
        ("sink-0", Invoke, commit(2)),
        ("sink-0", Done, commit(2)),
        ("sink-0", Done, write(&[(2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1)])),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::AtLeastOnce));
    assert_eq!(ids(&result, Anomaly::ProgressAheadOfData), vec![vec![2]]);
    assert_eq!(
        result.anomalies[&Anomaly::ProgressAheadOfData][0].ops,
        vec![2, 3]
    );
    assert_eq!(result.validity, Validity::Invalid);
    let exactly_once = CheckOptions::for_claim(Claim::ExactlyOnce);
    assert_eq!(check_all(&h, &exactly_once).validity, Validity::Valid);
}

#[test]
fn progress_ahead_of_data_in_the_final_offsets() {
    // After the drain the group's committed offset is 2 but the sink holds only record 1.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0)])),
        (
            "final",
            Done,
            Value::CommittedOffsets {
                offsets: vec![(tp(), 2)],
            },
        ),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::AtLeastOnce));
    assert_eq!(ids(&result, Anomaly::ProgressAheadOfData), vec![vec![2]]);
    assert_eq!(ids(&result, Anomaly::SinkLost), vec![vec![2]]);
}

#[test]
fn progress_ahead_of_data_valid_history() {
    // Write first, then commit.
    let h = history(vec![
        ("sink-0", Done, write(&[(1, 0), (2, 1)])),
        ("sink-0", Invoke, commit(2)),
        ("sink-0", Done, commit(2)),
        ("final", Done, log(&[(1, 0), (2, 1)])),
        ("final", Done, sink(&[(1, 0), (2, 1)])),
        (
            "final",
            Done,
            Value::CommittedOffsets {
                offsets: vec![(tp(), 2)],
            },
        ),
    ]);
    let result = check_all(&h, &CheckOptions::for_claim(Claim::AtLeastOnce));
    assert!(result.anomalies.is_empty(), "{result:?}");
    assert_eq!(result.validity, Validity::Valid);
}

struct Panics;

impl Checker for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn check(&self, _: &History, _: &CheckOptions) -> CheckResult {
        panic!("index out of bounds in the panicking checker")
    }
}

#[test]
fn panicking_checker_yields_unknown_never_a_pass() {
    let h = history(vec![("final", Done, log(&[]))]);
    let result = Compose::new()
        .with(KafkaChecker)
        .with(Panics)
        .check(&h, &kafka_only());
    assert_eq!(result.validity, Validity::Unknown);
    let error = result.error.expect("an error text");
    assert!(
        error.contains("panics panicked: index out of bounds"),
        "{error}"
    );
}

#[test]
fn missing_final_state_is_unknown() {
    // The drain never finished: no LogState, no SinkState.
    let h = history(vec![
        ("producer-0", Done, send(1, Some(0))),
        ("sink-0", Done, write(&[(1, 0)])),
    ]);
    let result = check_all(&h, &CheckOptions::default());
    assert_eq!(result.validity, Validity::Unknown);
    assert!(result.error.unwrap().contains("no final"));
}

#[test]
fn validity_merges_invalid_over_unknown_over_valid() {
    use Validity::*;
    assert_eq!(Valid.merge(Unknown), Unknown);
    assert_eq!(Unknown.merge(Valid), Unknown);
    assert_eq!(Unknown.merge(Invalid), Invalid);
    assert_eq!(Invalid.merge(Unknown), Invalid);
    assert_eq!(Valid.merge(Valid), Valid);
}

#[test]
fn claims_decide_sink_anomalies_and_explicit_lists_override() {
    let eos = CheckOptions::for_claim(Claim::ExactlyOnce).forbidden_set();
    let alo = CheckOptions::for_claim(Claim::AtLeastOnce).forbidden_set();
    let amo = CheckOptions::for_claim(Claim::AtMostOnce).forbidden_set();
    assert!(eos.contains(&Anomaly::SinkLost) && eos.contains(&Anomaly::SinkDuplicate));
    assert!(alo.contains(&Anomaly::SinkLost) && !alo.contains(&Anomaly::SinkDuplicate));
    assert!(!amo.contains(&Anomaly::SinkLost) && amo.contains(&Anomaly::SinkDuplicate));
    assert!(alo.contains(&Anomaly::ProgressAheadOfData));
    assert!(!eos.contains(&Anomaly::Unseen) && !alo.contains(&Anomaly::Unseen));
    let overridden = CheckOptions {
        allowed: vec![Anomaly::SinkLost, Anomaly::Unseen],
        forbidden: vec![Anomaly::Unseen],
        ..CheckOptions::default()
    };
    let set = overridden.forbidden_set();
    assert!(!set.contains(&Anomaly::SinkLost));
    assert!(
        set.contains(&Anomaly::Unseen),
        "forbidden wins over allowed"
    );
}

#[test]
fn options_and_results_round_trip_through_text() {
    let options: CheckOptions =
        toml::from_str("claim = \"at-least-once\"\nacks = \"1\"\nallowed = [\"sink-reorder\"]\n")
            .unwrap();
    assert_eq!(options.claim, Claim::AtLeastOnce);
    assert_eq!(options.acks, ProducerAcks::Leader);
    assert_eq!(options.allowed, vec![Anomaly::SinkReorder]);
    let snake: Claim = serde_json::from_str("\"exactly_once\"").unwrap();
    assert_eq!(snake, Claim::ExactlyOnce);
    let h = history(vec![
        ("producer-0", Done, send(2, Some(0))),
        ("final", Done, log(&[])),
        ("final", Done, sink(&[])),
    ]);
    let result = check_all(&h, &CheckOptions::default());
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("\"lost-write\":[{"), "{text}");
    let back: CheckResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, result);
}

#[test]
fn rereading_an_offset_is_a_nonmonotonic_poll() {
    // Offsets must strictly increase: reading offset 1 twice in a row goes nowhere.
    let h = history(vec![
        ("consumer-0", Done, poll(&[(1, 0), (2, 1)])),
        ("consumer-0", Done, poll(&[(2, 1)])),
        ("final", Done, log(&[(1, 0), (2, 1)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert_eq!(ids(&result, Anomaly::NonmonotonicPoll), vec![vec![2, 2]]);
}

#[test]
fn send_rejected_counts_a_failed_send_that_nothing_wrote_and_stays_valid() {
    let mut h = History::default();
    h.push(0, "producer-0", Invoke, send(1, None), None);
    let too_large = Some("broker error MessageTooLarge(10)".to_string());
    h.push(1, "producer-0", OpKind::Fail, send(1, None), too_large);
    h.push(2, "producer-0", Invoke, send(2, None), None);
    h.push(
        3,
        "producer-0",
        OpKind::Fail,
        send(2, None),
        Some("timeout".into()),
    );
    h.push(4, "producer-0", Invoke, send(2, None), None);
    h.push(5, "producer-0", Done, send(2, Some(0)), None);
    h.push(6, "final", Done, log(&[(2, 0)]), None);
    let result = check_all(&h, &kafka_only());
    assert_eq!(
        ids(&result, Anomaly::SendRejected),
        vec![vec![1]],
        "2 was retried and written"
    );
    let case = &result.anomalies[&Anomaly::SendRejected][0];
    assert!(case.text.contains("MessageTooLarge"), "{}", case.text);
    assert_eq!(result.validity, Validity::Valid, "informational");
}

#[test]
fn poll_skip_valid_history_over_kop_entry_gaps() {
    // Kafka-on-Pulsar before 2.8 (`eosim_sim::kafka::kop`): every entry owns 4096 offsets
    // and a ledger roll jumps by 2^44. Reading 0, then 4096, then 2^44 skips nothing.
    let roll = 1 << 44;
    let h = history(vec![
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("consumer-0", Done, poll(&[(2, 4096)])),
        ("consumer-0", Done, poll(&[(3, roll)])),
        ("final", Done, log(&[(1, 0), (2, 4096), (3, roll)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert!(result.anomalies.is_empty(), "{result:?}");
}

#[test]
fn poll_skip_across_kop_entry_gaps() {
    // The same log, but consumer-0 went from offset 0 straight to 2^44: the record at 4096
    // was skipped, gaps or not.
    let roll = 1 << 44;
    let h = history(vec![
        ("consumer-0", Done, poll(&[(1, 0)])),
        ("consumer-0", Done, poll(&[(3, roll)])),
        ("final", Done, log(&[(1, 0), (2, 4096), (3, roll)])),
    ]);
    let assign = CheckOptions {
        subscribe: false,
        ..kafka_only()
    };
    let result = check_all(&h, &assign);
    assert_eq!(ids(&result, Anomaly::PollSkip), vec![vec![2]]);
    assert_eq!(
        result.anomalies[&Anomaly::PollSkip][0].offsets,
        vec![0, 4096, roll]
    );
}
