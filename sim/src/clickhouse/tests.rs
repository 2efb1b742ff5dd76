//! Tests of the ClickHouse, Keeper and KeeperMap models, one behaviour each.

use super::error::ErrorCode;
use super::keeper::{CreateMode, Keeper, KeeperError, Op};
use super::keeper_map;
use super::model::{ClickHouse, PartOutcome, ServerConfig};
use super::types::*;
use serde_json::{json, Value as Json};

fn server(profile: VersionProfile) -> ClickHouse {
    ClickHouse::new(profile, ServerConfig::default())
}

fn rows(ids: std::ops::Range<u64>) -> Vec<Json> {
    ids.map(|id| json!({"id": id, "name": format!("n{id}")}))
        .collect()
}

fn table(engine: Engine) -> TableDef {
    let columns = vec![
        Column::new("id", ColumnType::UInt64),
        Column::new("name", ColumnType::String),
    ];
    TableDef::new("t", columns, engine, &["id"])
}

fn replicated(window: u64, cleanup_delay_period_ms: u64) -> TableDef {
    let mut def = table(Engine::ReplicatedMergeTree);
    def.settings.replicated_deduplication_window = Some(window);
    def.settings.cleanup_delay_period_ms = Some(cleanup_delay_period_ms);
    def
}

fn ids(ch: &ClickHouse, final_: bool) -> Vec<u64> {
    let mut out: Vec<u64> = ch
        .select("t", final_)
        .unwrap()
        .into_iter()
        .map(|r| match r[0] {
            Value::UInt(v) => v,
            ref other => panic!("id {other:?}"),
        })
        .collect();
    out.sort();
    out
}

mod clickhouse_model {
    use super::*;

    #[test]
    fn replicated_retry_within_the_window_is_dropped_silently() {
        // Marks are per thread: start from none (see `crate::marks`).
        crate::marks::take();
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::ReplicatedMergeTree)).unwrap();
        ch.insert(0, &Insert::new("t", rows(0..10))).unwrap();
        let retry = ch.insert(1, &Insert::new("t", rows(0..10))).unwrap();
        assert_eq!(retry.rows_written(), 0);
        assert_eq!(retry.rows_deduplicated(), 10);
        assert_eq!(ids(&ch, false), (0..10).collect::<Vec<_>>());
        crate::marks::assert_hit(&["clickhouse:dedup-hit"]);
    }

    #[test]
    fn dedup_window_is_shared_by_writers_and_evicts_the_oldest_block() {
        // Marks are per thread: start from none (see `crate::marks`).
        crate::marks::take();
        // F1's mechanism: writer A's block leaves the window after three blocks of B.
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(replicated(3, 0)).unwrap();
        ch.insert(0, &Insert::new("t", rows(100..200))).unwrap();
        // B inserts A's batch: dropped, since the window is per table, not per writer.
        let b_same = ch.insert(1, &Insert::new("t", rows(100..200))).unwrap();
        assert_eq!(b_same.rows_deduplicated(), 100);
        for start in [200, 300, 400] {
            ch.insert(2, &Insert::new("t", rows(start..start + 100)))
                .unwrap();
        }
        let zombie = ch.insert(3, &Insert::new("t", rows(100..200))).unwrap();
        assert_eq!(
            zombie.rows_written(),
            100,
            "the evicted block id no longer deduplicates"
        );
        assert_eq!(ids(&ch, false).len(), 500);
        crate::marks::assert_hit(&["clickhouse:dedup-hit", "clickhouse:dedup-window-evicted"]);
    }

    #[test]
    fn replicated_block_ids_are_evicted_only_when_the_cleanup_runs() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(replicated(1, 30_000)).unwrap();
        ch.tick(0);
        ch.insert(10, &Insert::new("t", rows(0..1))).unwrap();
        ch.insert(20, &Insert::new("t", rows(1..2))).unwrap();
        let before = ch.insert(30, &Insert::new("t", rows(0..1))).unwrap();
        assert_eq!(
            before.rows_deduplicated(),
            1,
            "beyond the count but not yet cleaned up"
        );
        ch.tick(30_000);
        assert_eq!(ch.block_ids("t").len(), 1);
        let after = ch.insert(30_001, &Insert::new("t", rows(0..1))).unwrap();
        assert_eq!(after.rows_written(), 1);
    }

    #[test]
    fn replicated_block_ids_older_than_window_seconds_are_evicted() {
        let mut ch = server(VersionProfile::V23_7);
        let mut def = replicated(100, 0);
        def.settings.replicated_deduplication_window_seconds = Some(10);
        ch.create_table(def).unwrap();
        ch.insert(0, &Insert::new("t", rows(0..1))).unwrap();
        ch.insert(20_000, &Insert::new("t", rows(1..2))).unwrap();
        assert_eq!(
            ch.block_ids("t").len(),
            1,
            "measured from the newest block id"
        );
        assert_eq!(
            ch.insert(20_001, &Insert::new("t", rows(0..1)))
                .unwrap()
                .rows_written(),
            1
        );
    }

    #[test]
    fn version_profiles_set_the_replicated_window() {
        assert_eq!(
            VersionProfile::V18_16.replicated_deduplication_window(),
            100
        );
        assert_eq!(VersionProfile::V23_7.replicated_deduplication_window(), 100);
        assert_eq!(
            VersionProfile::V23_11.replicated_deduplication_window(),
            1000
        );
        assert_eq!(
            VersionProfile::V25_9.replicated_deduplication_window(),
            10000
        );
    }

    #[test]
    fn plain_merge_tree_stores_every_retry_by_default() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(TableDef::kafka2ck()).unwrap();
        let batch = Insert::new("kafka2ck", vec![json!({"id": 1, "name": "a"})]);
        ch.insert(0, &batch).unwrap();
        ch.insert(1, &batch).unwrap();
        assert_eq!(ch.select("kafka2ck", false).unwrap().len(), 2);
    }

    #[test]
    fn plain_merge_tree_deduplicates_with_a_non_replicated_window() {
        // Marks are per thread: start from none (see `crate::marks`).
        crate::marks::take();
        let mut ch = server(VersionProfile::V23_7);
        let mut def = table(Engine::MergeTree);
        def.settings.non_replicated_deduplication_window = Some(2);
        ch.create_table(def).unwrap();
        ch.insert(0, &Insert::new("t", rows(0..1))).unwrap();
        assert_eq!(
            ch.insert(0, &Insert::new("t", rows(0..1)))
                .unwrap()
                .rows_written(),
            0
        );
        ch.insert(0, &Insert::new("t", rows(1..2))).unwrap();
        ch.insert(0, &Insert::new("t", rows(2..3))).unwrap();
        // FIFO of 2: the first id is gone at insert time.
        assert_eq!(
            ch.insert(0, &Insert::new("t", rows(0..1)))
                .unwrap()
                .rows_written(),
            1
        );
        crate::marks::assert_hit(&["clickhouse:dedup-hit"]);
    }

    #[test]
    fn token_names_the_block_so_different_data_with_the_same_token_is_dropped() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::ReplicatedMergeTree)).unwrap();
        ch.insert(0, &Insert::new("t", rows(0..5)).token("p0-0-4"))
            .unwrap();
        let other = ch
            .insert(0, &Insert::new("t", rows(5..10)).token("p0-0-4"))
            .unwrap();
        assert_eq!(other.rows_deduplicated(), 5);
        let fresh = ch
            .insert(0, &Insert::new("t", rows(0..5)).token("p0-0-4b"))
            .unwrap();
        assert_eq!(
            fresh.rows_written(),
            5,
            "same data, other token: not deduplicated"
        );
    }

    #[test]
    fn token_blocks_are_numbered_so_another_split_is_not_deduplicated() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::ReplicatedMergeTree)).unwrap();
        let first = ch
            .insert(
                0,
                &Insert::new("t", rows(0..4))
                    .token("x")
                    .block_size(2)
                    .unsquashed(),
            )
            .unwrap();
        let ids_first: Vec<_> = first.parts.iter().map(block_id).collect();
        assert_eq!(first.blocks_total, 2);
        let same = ch
            .insert(
                0,
                &Insert::new("t", rows(0..4))
                    .token("x")
                    .block_size(2)
                    .unsquashed(),
            )
            .unwrap();
        assert_eq!(same.rows_deduplicated(), 4);
        // One block of 4 is "x_0": it collides with the first block only.
        let resplit = ch
            .insert(
                0,
                &Insert::new("t", rows(0..4))
                    .token("x")
                    .block_size(4)
                    .unsquashed(),
            )
            .unwrap();
        assert_eq!(resplit.rows_deduplicated(), 4);
        let three = ch
            .insert(
                0,
                &Insert::new("t", rows(0..6))
                    .token("x")
                    .block_size(2)
                    .unsquashed(),
            )
            .unwrap();
        assert_eq!((three.rows_deduplicated(), three.rows_written()), (4, 2));
        assert_ne!(ids_first[0], ids_first[1]);
    }

    fn block_id(p: &PartOutcome) -> String {
        match p {
            PartOutcome::Written { block_id, .. } | PartOutcome::Deduplicated { block_id, .. } => {
                block_id.clone()
            }
        }
    }

    #[test]
    fn insert_cut_by_max_insert_block_size_makes_one_part_per_block() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::MergeTree)).unwrap();
        let summary = ch
            .insert(0, &Insert::new("t", rows(0..10)).block_size(3).unsquashed())
            .unwrap();
        assert_eq!(summary.blocks_total, 4);
        assert_eq!(ch.parts("t").unwrap().len(), 4);
        assert_eq!(ch.parts("t").unwrap()[0].name, "all_1_1_0");
    }

    #[test]
    fn server_dying_mid_insert_leaves_the_first_blocks_only() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::ReplicatedMergeTree)).unwrap();
        let insert = Insert::new("t", rows(0..8)).block_size(2).unsquashed();
        let partial = ch.insert_prefix(0, &insert, 2).unwrap();
        assert_eq!((partial.blocks_applied, partial.blocks_total), (2, 4));
        assert_eq!(ids(&ch, false), vec![0, 1, 2, 3]);
        // A retry with the same split completes it exactly once, thanks to block ids.
        let retry = ch.insert(1, &insert).unwrap();
        assert_eq!((retry.rows_deduplicated(), retry.rows_written()), (4, 4));
        assert_eq!(ids(&ch, false), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn bad_row_in_a_later_block_leaves_the_earlier_blocks_committed() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::MergeTree)).unwrap();
        let mut body = rows(0..4);
        body[3] = json!({"id": {"bad": 1}, "name": "x"});
        let err = ch
            .insert(
                0,
                &Insert::new("t", body.clone()).block_size(2).unsquashed(),
            )
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::CannotParseInputAssertionFailed);
        assert!(err.message.contains("at row 4"), "{}", err.message);
        assert_eq!(ids(&ch, false), vec![0, 1]);
        // Squashed (the defaults), the first block was still accumulating: nothing lands.
        let mut fresh = server(VersionProfile::V23_7);
        fresh.create_table(table(Engine::MergeTree)).unwrap();
        let err = fresh
            .insert(0, &Insert::new("t", body).block_size(2))
            .unwrap_err();
        assert!(err.message.contains("at row 4"), "{}", err.message);
        assert_eq!(ids(&fresh, false), Vec::<u64>::new());
    }

    #[test]
    fn small_blocks_are_squashed_into_one_part_by_default_as_on_a_real_18_16() {
        // harness/tests/real_clickhouse.rs: 5 rows with max_insert_block_size=2 made one
        // level-0 part on ClickHouse 18.16, and three with both min_insert_block_size_* 0.
        for profile in [VersionProfile::V18_16, VersionProfile::V23_7] {
            let mut ch = server(profile);
            ch.create_table(table(Engine::MergeTree)).unwrap();
            let summary = ch
                .insert(0, &Insert::new("t", rows(0..5)).block_size(2))
                .unwrap();
            assert_eq!(summary.blocks_total, 1, "{profile:?}");
            assert_eq!(ch.parts("t").unwrap().len(), 1, "{profile:?}");
        }
        // A row bound alone squashes into blocks of at least that many rows.
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::MergeTree)).unwrap();
        let mut insert = Insert::new("t", rows(0..10)).block_size(2);
        insert.settings.min_insert_block_size_rows = Some(3);
        insert.settings.min_insert_block_size_bytes = Some(0);
        let sizes: Vec<usize> = ch
            .insert(0, &insert)
            .unwrap()
            .parts
            .iter()
            .map(|p| match p {
                PartOutcome::Written { rows, .. } => *rows,
                PartOutcome::Deduplicated { rows, .. } => *rows,
            })
            .collect();
        assert_eq!(sizes, vec![4, 4, 2], "2+2, 2+2, then the rest");
    }

    #[test]
    fn replacing_merge_tree_final_keeps_the_highest_version_per_key() {
        let mut ch = server(VersionProfile::V23_7);
        let mut def = table(Engine::ReplacingMergeTree {
            version_column: Some("v".into()),
        });
        def.columns.push(Column::new("v", ColumnType::UInt32));
        ch.create_table(def).unwrap();
        let r = |id: u64, name: &str, v: u32| json!({"id": id, "name": name, "v": v});
        ch.insert(0, &Insert::new("t", vec![r(1, "new", 2), r(2, "only", 1)]))
            .unwrap();
        ch.insert(0, &Insert::new("t", vec![r(1, "old", 1)]))
            .unwrap();
        assert_eq!(
            ch.select("t", false).unwrap().len(),
            3,
            "no merges: duplicates stay"
        );
        let final_rows = ch.select("t", true).unwrap();
        assert_eq!(final_rows.len(), 2);
        assert_eq!(final_rows[0][1], Value::String("new".into()));
    }

    #[test]
    fn replacing_merge_tree_without_version_keeps_the_last_inserted_row() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::ReplacingMergeTree {
            version_column: None,
        }))
        .unwrap();
        ch.insert(0, &Insert::new("t", vec![json!({"id": 1, "name": "a"})]))
            .unwrap();
        ch.insert(0, &Insert::new("t", vec![json!({"id": 1, "name": "b"})]))
            .unwrap();
        assert_eq!(
            ch.select("t", true).unwrap()[0][1],
            Value::String("b".into())
        );
    }

    #[test]
    fn final_on_plain_merge_tree_is_illegal() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(table(Engine::MergeTree)).unwrap();
        let err = ch.select("t", true).unwrap_err();
        assert_eq!(
            (err.code, err.code.number()),
            (ErrorCode::IllegalFinal, 181)
        );
    }

    #[test]
    fn uint8_overflow_wraps_in_json_each_row_as_the_real_parser_does() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(TableDef::kafka2ck()).unwrap();
        ch.insert(
            0,
            &Insert::new("kafka2ck", vec![json!({"id": 300, "name": "x"})]),
        )
        .unwrap();
        assert_eq!(ch.select("kafka2ck", false).unwrap()[0][0], Value::UInt(44));
    }

    #[test]
    fn uint8_overflow_throws_argument_out_of_bound_when_asked_to() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(TableDef::kafka2ck()).unwrap();
        let mut insert = Insert::new("kafka2ck", vec![json!({"id": 256, "name": "x"})]);
        insert.settings.integer_overflow = IntegerOverflow::Throw;
        let err = ch.insert(0, &insert).unwrap_err();
        assert_eq!(
            (err.code.name(), err.code.number()),
            ("ARGUMENT_OUT_OF_BOUND", 69)
        );
        assert!(
            err.to_string()
                .starts_with("Code: 69. DB::Exception: Value 256"),
            "{err}"
        );
    }

    #[test]
    fn unknown_field_is_incorrect_data_unless_skipped() {
        let mut ch = server(VersionProfile::V23_7);
        ch.create_table(TableDef::kafka2ck()).unwrap();
        let mut insert = Insert::new("kafka2ck", vec![json!({"id": 1, "nme": "x"})]);
        assert_eq!(ch.insert(0, &insert).unwrap_err().code.number(), 117);
        insert.settings.input_format_skip_unknown_fields = Some(true);
        ch.insert(0, &insert).unwrap();
        assert_eq!(
            ch.select("kafka2ck", false).unwrap()[0][1],
            Value::String(String::new())
        );
    }

    #[test]
    fn null_becomes_the_default_on_23_and_fails_on_18_16() {
        for (profile, ok) in [
            (VersionProfile::V23_7, true),
            (VersionProfile::V18_16, false),
        ] {
            let mut ch = server(profile);
            ch.create_table(TableDef::kafka2ck()).unwrap();
            let insert = Insert::new("kafka2ck", vec![json!({"id": null, "name": "x"})]);
            assert_eq!(ch.insert(0, &insert).is_ok(), ok, "{profile:?}");
        }
    }

    #[test]
    fn nullable_and_datetime_columns_convert_json() {
        let mut ch = server(VersionProfile::V23_7);
        let columns = vec![
            Column::new("id", ColumnType::Int8),
            Column::new("at", ColumnType::DateTime),
            Column::new("note", ColumnType::Nullable(Box::new(ColumnType::String))),
        ];
        ch.create_table(TableDef::new("t", columns, Engine::MergeTree, &["id"]))
            .unwrap();
        let row = json!({"id": -3, "at": "2024-02-29 12:34:56", "note": null});
        ch.insert(0, &Insert::new("t", vec![row])).unwrap();
        let got = &ch.select("t", false).unwrap()[0];
        assert_eq!(got[0], Value::Int(-3));
        assert_eq!(got[1].to_json(), json!("2024-02-29 12:34:56"));
        assert_eq!(got[2], Value::Null);
        let bad = Insert::new("t", vec![json!({"id": 1, "at": "yesterday"})]);
        assert_eq!(
            ch.insert(0, &bad).unwrap_err().code,
            ErrorCode::CannotParseDatetime
        );
    }

    #[test]
    fn version_18_16_knows_neither_keeper_map_nor_the_token() {
        let mut ch = server(VersionProfile::V18_16);
        let columns = vec![Column::new("key", ColumnType::String)];
        let err = ch
            .create_table(TableDef::keeper_map("s", columns, "/s", "key"))
            .unwrap_err();
        assert_eq!(err.code.number(), 56);
        assert!(err.message.contains("Unknown table engine KeeperMap"));
        ch.create_table(TableDef::kafka2ck()).unwrap();
        let insert = Insert::new("kafka2ck", vec![json!({"id": 1})]).token("t");
        let err = ch.insert(0, &insert).unwrap_err();
        assert_eq!(
            (err.code.number(), err.message.as_str()),
            (115, "Unknown setting insert_deduplication_token")
        );
    }

    #[test]
    fn unknown_table_is_code_60() {
        let mut ch = server(VersionProfile::V23_7);
        assert_eq!(
            ch.insert(0, &Insert::new("nope", vec![]))
                .unwrap_err()
                .code
                .number(),
            60
        );
    }

    #[test]
    fn datetime_text_round_trips() {
        for text in [
            "1970-01-01 00:00:00",
            "2000-03-01 00:00:01",
            "2106-02-07 06:28:15",
        ] {
            assert_eq!(format_datetime(parse_datetime(text).unwrap()), text);
        }
        assert_eq!(parse_datetime("2106-02-07 06:28:16"), None, "beyond UInt32");
    }
}

mod keeper_model {
    use super::*;

    #[test]
    fn set_with_a_stale_version_is_badversion_and_changes_nothing() {
        let mut k = Keeper::new();
        k.create(None, "/a", b"1", CreateMode::Persistent).unwrap();
        assert_eq!(k.set("/a", b"2", 0).unwrap().version, 1);
        assert_eq!(k.set("/a", b"3", 0), Err(KeeperError::BadVersion));
        assert_eq!(KeeperError::BadVersion.code(), -103);
        assert_eq!(k.get("/a").unwrap().0, b"2");
        assert_eq!(
            k.set("/a", b"4", -1).unwrap().version,
            2,
            "-1 sets unconditionally"
        );
    }

    #[test]
    fn create_of_an_existing_node_is_nodeexists_and_without_parent_nonode() {
        let mut k = Keeper::new();
        k.create(None, "/a", b"", CreateMode::Persistent).unwrap();
        assert_eq!(
            k.create(None, "/a", b"", CreateMode::Persistent),
            Err(KeeperError::NodeExists)
        );
        assert_eq!(
            k.create(None, "/x/y", b"", CreateMode::Persistent),
            Err(KeeperError::NoNode)
        );
        assert_eq!(k.delete("/", -1), Err(KeeperError::BadArguments));
    }

    #[test]
    fn delete_checks_version_and_children() {
        let mut k = Keeper::new();
        k.create_recursive("/a/b").unwrap();
        assert_eq!(k.delete("/a", -1), Err(KeeperError::NotEmpty));
        assert_eq!(k.delete("/a/b", 5), Err(KeeperError::BadVersion));
        k.delete("/a/b", 0).unwrap();
        assert_eq!(k.exists("/a").unwrap().num_children, 0);
    }

    #[test]
    fn session_expiry_removes_its_ephemeral_nodes() {
        let mut k = Keeper::new();
        let s = k.open_session(0, 30_000);
        let other = k.open_session(0, 30_000);
        k.create(Some(s), "/owner", b"A", CreateMode::Ephemeral)
            .unwrap();
        k.create(Some(other), "/other", b"B", CreateMode::Ephemeral)
            .unwrap();
        k.heartbeat(20_000, other).unwrap();
        assert_eq!(k.tick(30_000), Vec::<i64>::new(), "not before the timeout");
        assert_eq!(k.tick(30_001), vec![s]);
        assert!(k.exists("/owner").is_none());
        assert!(k.exists("/other").is_some());
        assert_eq!(k.heartbeat(30_002, s), Err(KeeperError::SessionExpired));
        let create = k.create(Some(s), "/again", b"", CreateMode::Ephemeral);
        assert_eq!(create, Err(KeeperError::SessionExpired));
    }

    #[test]
    fn ephemeral_nodes_cannot_have_children() {
        let mut k = Keeper::new();
        let s = k.open_session(0, 1000);
        k.create(Some(s), "/e", b"", CreateMode::Ephemeral).unwrap();
        let child = k.create(None, "/e/c", b"", CreateMode::Persistent);
        assert_eq!(child, Err(KeeperError::NoChildrenForEphemerals));
    }

    #[test]
    fn multi_applies_all_ops_or_none() {
        let mut k = Keeper::new();
        k.create(None, "/a", b"1", CreateMode::Persistent).unwrap();
        let ops = vec![
            Op::Create {
                path: "/b".into(),
                data: b"2".to_vec(),
                mode: CreateMode::Persistent,
            },
            Op::Set {
                path: "/a".into(),
                data: b"x".to_vec(),
                version: 0,
            },
            Op::Check {
                path: "/a".into(),
                version: 0,
            },
        ];
        let err = k.multi(None, ops).unwrap_err();
        assert_eq!((err.index, err.error), (2, KeeperError::BadVersion));
        assert!(k.exists("/b").is_none());
        assert_eq!(
            k.get("/a").unwrap(),
            (b"1".to_vec(), k.exists("/a").unwrap())
        );
        assert_eq!(k.exists("/").unwrap().num_children, 1);
    }

    #[test]
    fn sequential_nodes_get_increasing_suffixes() {
        let mut k = Keeper::new();
        let a = k
            .create(None, "/q-", b"", CreateMode::PersistentSequential)
            .unwrap();
        let b = k
            .create(None, "/q-", b"", CreateMode::PersistentSequential)
            .unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("/q-0000000000", "/q-0000000001"));
    }

    #[test]
    fn requests_from_an_expired_session_fail() {
        let mut k = Keeper::new();
        let s = k.open_session(0, 100);
        let r = k.handle(
            500,
            Some(s),
            super::super::keeper::KeeperRequest::Exists { path: "/".into() },
        );
        assert_eq!(r, Err(KeeperError::SessionExpired));
    }
}

mod keeper_map_engine {
    use super::*;

    fn state_table() -> TableDef {
        let columns = vec![
            Column::new("key", ColumnType::String),
            Column::new("minOffset", ColumnType::UInt64),
            Column::new("maxOffset", ColumnType::UInt64),
            Column::new("state", ColumnType::String),
        ];
        TableDef::keeper_map("connect_state", columns, "/connect_state", "key")
    }

    fn setup() -> (ClickHouse, Keeper) {
        let mut ch = server(VersionProfile::V23_7);
        let mut keeper = Keeper::new();
        ch.create_table(state_table()).unwrap();
        let table = keeper_map::KeeperMapTable::resolve(&ch, "connect_state").unwrap();
        keeper_map::create_paths(&mut keeper, &table).unwrap();
        (ch, keeper)
    }

    fn record(min: u64, max: u64, state: &str) -> Json {
        json!({"key": "t-0", "minOffset": min, "maxOffset": max, "state": state})
    }

    #[test]
    fn keeper_map_put_then_get_returns_the_record_and_its_version() {
        let (ch, mut keeper) = setup();
        assert_eq!(
            keeper_map::get(&ch, &keeper, "connect_state", &json!("t-0")).unwrap(),
            None
        );
        keeper_map::insert(
            &ch,
            &mut keeper,
            &Insert::new("connect_state", vec![record(0, 99, "BEFORE")]),
        )
        .unwrap();
        keeper_map::insert(
            &ch,
            &mut keeper,
            &Insert::new("connect_state", vec![record(0, 99, "AFTER")]),
        )
        .unwrap();
        let got = keeper_map::get(&ch, &keeper, "connect_state", &json!("t-0"))
            .unwrap()
            .unwrap();
        assert_eq!(got.version, 1, "non-strict INSERT overwrites with set(-1)");
        assert_eq!(got.row[3], Value::String("AFTER".into()));
        assert_eq!(
            keeper_map::select(&ch, &keeper, "connect_state")
                .unwrap()
                .len(),
            1
        );
        assert!(keeper
            .exists("/keeper_map_tables/connect_state/data")
            .is_some());
    }

    #[test]
    fn keeper_map_strict_mode_rejects_an_existing_key() {
        let (ch, mut keeper) = setup();
        let mut insert = Insert::new("connect_state", vec![record(0, 99, "BEFORE")]);
        insert.settings.keeper_map_strict_mode = Some(true);
        keeper_map::insert(&ch, &mut keeper, &insert).unwrap();
        let err = keeper_map::insert(&ch, &mut keeper, &insert).unwrap_err();
        assert_eq!(err.code.number(), 999);
        assert_eq!(err.keeper_error, Some(KeeperError::NodeExists));
    }

    #[test]
    fn keeper_map_insert_of_many_keys_is_one_atomic_multi() {
        let (ch, mut keeper) = setup();
        let mut insert = Insert::new("connect_state", vec![json!({"key": "b"})]);
        insert.settings.keeper_map_strict_mode = Some(true);
        keeper_map::insert(&ch, &mut keeper, &insert).unwrap();
        insert.rows = vec![json!({"key": "a"}), json!({"key": "b"})];
        assert!(keeper_map::insert(&ch, &mut keeper, &insert).is_err());
        assert_eq!(
            keeper_map::get(&ch, &keeper, "connect_state", &json!("a")).unwrap(),
            None
        );
    }

    #[test]
    fn keeper_map_conditional_write_fails_on_a_stale_version() {
        let (ch, mut keeper) = setup();
        let v0 = keeper_map::put_if_version(
            &ch,
            &mut keeper,
            "connect_state",
            &record(0, 99, "BEFORE"),
            None,
        )
        .unwrap();
        assert_eq!(v0, 0);
        let again = keeper_map::put_if_version(
            &ch,
            &mut keeper,
            "connect_state",
            &record(0, 99, "X"),
            None,
        );
        assert_eq!(
            again.unwrap_err().keeper_error,
            Some(KeeperError::NodeExists)
        );
        let v1 = keeper_map::put_if_version(
            &ch,
            &mut keeper,
            "connect_state",
            &record(0, 99, "AFTER"),
            Some(0),
        )
        .unwrap();
        assert_eq!(v1, 1);
        let stale = keeper_map::put_if_version(
            &ch,
            &mut keeper,
            "connect_state",
            &record(9, 9, "Z"),
            Some(0),
        );
        assert_eq!(
            stale.unwrap_err().keeper_error,
            Some(KeeperError::BadVersion)
        );
        let got = keeper_map::get(&ch, &keeper, "connect_state", &json!("t-0"))
            .unwrap()
            .unwrap();
        assert_eq!(got.row[3], Value::String("AFTER".into()));
    }

    #[test]
    fn keeper_map_keys_limit_is_enforced() {
        let mut ch = server(VersionProfile::V23_7);
        let mut keeper = Keeper::new();
        let mut def = state_table();
        def.engine = Engine::KeeperMap {
            root_path: "/s".into(),
            keys_limit: Some(1),
        };
        ch.create_table(def).unwrap();
        let table = keeper_map::KeeperMapTable::resolve(&ch, "connect_state").unwrap();
        keeper_map::create_paths(&mut keeper, &table).unwrap();
        keeper_map::insert(
            &ch,
            &mut keeper,
            &Insert::new("connect_state", vec![json!({"key": "a"})]),
        )
        .unwrap();
        let err = keeper_map::insert(
            &ch,
            &mut keeper,
            &Insert::new("connect_state", vec![json!({"key": "b"})]),
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::LimitExceeded);
    }

    #[test]
    fn handle_serves_the_sink_requests_against_local_models() {
        use super::super::protocol::{ChRequest, ChResponse};
        let mut ch = server(VersionProfile::V23_7);
        let mut keeper = Keeper::new();
        let mut run = |r: ChRequest| ch.handle(0, &mut keeper, r);
        assert_eq!(
            run(ChRequest::CreateTable(state_table())),
            Ok(ChResponse::Ok)
        );
        run(ChRequest::CreateTable(TableDef::kafka2ck())).unwrap();
        let insert = Insert::new("kafka2ck", vec![json!({"id": 7, "name": "x"})]);
        assert!(matches!(
            run(ChRequest::Insert(insert)),
            Ok(ChResponse::Inserted(_))
        ));
        let put = ChRequest::KeeperMapPutIfVersion {
            table: "connect_state".into(),
            row: record(0, 99, "BEFORE"),
            expected_version: None,
        };
        assert_eq!(run(put), Ok(ChResponse::Version(0)));
        let get = ChRequest::KeeperMapGet {
            table: "connect_state".into(),
            key: json!("t-0"),
        };
        let Ok(ChResponse::Got(Some(got))) = run(get) else {
            panic!("no record")
        };
        assert_eq!(got.row[1], Value::UInt(0));
        let select = ChRequest::Select {
            table: "connect_state".into(),
            final_: false,
        };
        assert!(matches!(run(select), Ok(ChResponse::Rows(rows)) if rows.len() == 1));
    }

    #[test]
    fn keeper_map_needs_a_path_prefix() {
        let mut ch = ClickHouse::new(
            VersionProfile::V23_7,
            ServerConfig {
                keeper_map_path_prefix: None,
            },
        );
        assert_eq!(
            ch.create_table(state_table()).unwrap_err().code,
            ErrorCode::BadArguments
        );
    }
}

mod keeper_proptest {
    use super::*;
    use proptest::prelude::*;
    use std::collections::btree_map::Entry;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum KOp {
        Create(u8, u8),
        Set(u8, u8, i32),
        Delete(u8, i32),
        Get(u8),
    }

    fn op() -> impl Strategy<Value = KOp> {
        let key = 0u8..4;
        let version = -1i32..4;
        prop_oneof![
            (key.clone(), any::<u8>()).prop_map(|(k, v)| KOp::Create(k, v)),
            (key.clone(), any::<u8>(), version.clone()).prop_map(|(k, v, e)| KOp::Set(k, v, e)),
            (key.clone(), version).prop_map(|(k, e)| KOp::Delete(k, e)),
            key.prop_map(KOp::Get),
        ]
    }

    proptest! {
        /// Versioned compare-and-set against a map of key → (data, version).
        #[test]
        fn keeper_versioned_cas_matches_a_reference_map(
            ops in proptest::collection::vec(op(), 1..60)
        ) {
            check_against_reference(ops)?;
        }
    }

    type Reference = BTreeMap<u8, (Vec<u8>, i32)>;

    /// What a conditional write or delete of `key` expecting `expected` should answer.
    fn expect_version(reference: &Reference, key: u8, expected: i32) -> Result<(), KeeperError> {
        match reference.get(&key) {
            None => Err(KeeperError::NoNode),
            Some((_, v)) if expected != -1 && expected != *v => Err(KeeperError::BadVersion),
            Some(_) => Ok(()),
        }
    }

    fn check_against_reference(ops: Vec<KOp>) -> Result<(), TestCaseError> {
        let mut k = Keeper::new();
        let mut reference = Reference::new();
        for op in ops {
            match op {
                KOp::Create(key, v) => {
                    let got = k.create(None, &format!("/k{key}"), &[v], CreateMode::Persistent);
                    let want = match reference.entry(key) {
                        Entry::Occupied(_) => Err(KeeperError::NodeExists),
                        Entry::Vacant(slot) => {
                            slot.insert((vec![v], 0));
                            Ok(format!("/k{key}"))
                        }
                    };
                    prop_assert_eq!(got, want);
                }
                KOp::Set(key, v, expected) => {
                    let got = k
                        .set(&format!("/k{key}"), &[v], expected)
                        .map(|s| s.version);
                    let want = expect_version(&reference, key, expected).map(|()| {
                        let entry = reference.get_mut(&key).expect("checked");
                        *entry = (vec![v], entry.1 + 1);
                        entry.1
                    });
                    prop_assert_eq!(got, want);
                }
                KOp::Delete(key, expected) => {
                    let got = k.delete(&format!("/k{key}"), expected);
                    let want = expect_version(&reference, key, expected).map(|()| {
                        reference.remove(&key);
                    });
                    prop_assert_eq!(got, want);
                }
                KOp::Get(key) => {
                    let got = k.get(&format!("/k{key}")).map(|(d, s)| (d, s.version)).ok();
                    prop_assert_eq!(got, reference.get(&key).cloned());
                }
            }
        }
        prop_assert_eq!(k.children("/").unwrap().len(), reference.len());
        Ok(())
    }
}
