//! One test per modelled behaviour (names are sentences), and a property test against a
//! committed-rows reference.

use super::coerce::{assign, format_float, format_value};
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn col(name: &str, ty: ColumnType) -> Column {
    Column::new(name, ty)
}

fn assign_to(v: Value, ty: ColumnType) -> Result<Value, PgError> {
    assign(&v, &col("c", ty))
}

fn err_of(r: Result<Value, PgError>) -> (&'static str, String) {
    let e = r.expect_err("expected an error");
    (e.code.code(), e.message)
}

fn t() -> Value {
    Value::text("x")
}

/// `t(id integer PRIMARY KEY, name text NOT NULL, note varchar(10))`.
fn db_with_t() -> (Database, SessionId) {
    db_with_t_under(DbConfig::default())
}

/// [`db_with_t`] with settings `config`.
fn db_with_t_under(config: DbConfig) -> (Database, SessionId) {
    let mut db = Database::new(config);
    let s = db.connect(0);
    let create = Statement::CreateTable(CreateTable {
        name: "t".into(),
        columns: vec![
            col("id", ColumnType::Integer),
            col("name", ColumnType::Text).not_null(),
            col("note", ColumnType::Varchar(Some(10))),
        ],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    });
    ok(&mut db, s, create);
    (db, s)
}

fn row(id: i64, name: &str) -> Vec<Value> {
    vec![Value::Int(id), Value::text(name), Value::Null]
}

fn insert(rows: Vec<Vec<Value>>, on_conflict: OnConflict) -> Statement {
    Statement::Insert(Insert {
        table: "t".into(),
        columns: vec![],
        rows,
        on_conflict,
    })
}

fn upsert(rows: Vec<Vec<Value>>) -> Statement {
    let set = vec!["name".into(), "note".into()];
    insert(
        rows,
        OnConflict::DoUpdate {
            conflict_target: vec!["id".into()],
            set,
        },
    )
}

fn ok(db: &mut Database, s: SessionId, st: Statement) -> Reply {
    match db.execute(0, s, &st) {
        Execution::Done(Ok(r)) => r,
        other => panic!("expected success for {st:?}, got {other:?}"),
    }
}

fn fails(db: &mut Database, s: SessionId, st: Statement) -> PgError {
    match db.execute(0, s, &st) {
        Execution::Done(Err(e)) => e,
        other => panic!("expected an error for {st:?}, got {other:?}"),
    }
}

fn ids(db: &Database) -> Vec<i64> {
    let rows = db.table_rows("t").expect("table t exists");
    rows.iter()
        .map(|r| {
            if let Value::Int(i) = r[0] {
                i
            } else {
                panic!("int key")
            }
        })
        .collect()
}

fn name_of(db: &Database, id: i64) -> Option<Value> {
    let rows = db.table_rows("t")?;
    rows.into_iter()
        .find(|r| r[0] == Value::Int(id))
        .map(|r| r[1].clone())
}

// ---- Coercion into column types -----------------------------------------------------

#[test]
fn iso_text_fits_a_date_column() {
    let v = assign_to(Value::text("2024-01-01"), ColumnType::Date).unwrap();
    assert_eq!(format_value(&v), "2024-01-01");
}

#[test]
fn month_13_is_a_datetime_field_overflow() {
    let (code, msg) = err_of(assign_to(Value::text("2024-13-01"), ColumnType::Date));
    assert_eq!(code, "22008");
    assert_eq!(msg, "date/time field value out of range: \"2024-13-01\"");
}

#[test]
fn february_30_is_a_datetime_field_overflow() {
    let (code, _) = err_of(assign_to(Value::text("2023-02-30"), ColumnType::Date));
    assert_eq!(code, "22008");
}

#[test]
fn garbage_text_into_a_date_is_invalid_datetime_format() {
    let (code, msg) = err_of(assign_to(Value::text("yesterday-ish"), ColumnType::Date));
    assert_eq!(code, "22007");
    assert_eq!(msg, "invalid input syntax for type date: \"yesterday-ish\"");
}

#[test]
fn abc_into_an_integer_is_invalid_text_representation() {
    let (code, msg) = err_of(assign_to(Value::text("abc"), ColumnType::Integer));
    assert_eq!(code, "22P02");
    assert_eq!(msg, "invalid input syntax for type integer: \"abc\"");
}

#[test]
fn integer_text_may_have_blanks_and_a_sign() {
    assert_eq!(
        assign_to(Value::text(" -42 "), ColumnType::BigInt).unwrap(),
        Value::Int(-42)
    );
}

#[test]
fn a_bigint_of_40000_into_a_smallint_is_out_of_range() {
    let (code, msg) = err_of(assign_to(Value::Int(40000), ColumnType::SmallInt));
    assert_eq!(code, "22003");
    assert_eq!(msg, "smallint out of range");
}

#[test]
fn text_40000_into_a_smallint_names_the_value() {
    let (code, msg) = err_of(assign_to(Value::text("40000"), ColumnType::SmallInt));
    assert_eq!(code, "22003");
    assert_eq!(msg, "value \"40000\" is out of range for type smallint");
}

#[test]
fn a_bigint_beyond_int4_into_an_integer_is_out_of_range() {
    let (code, msg) = err_of(assign_to(Value::Int(1 << 40), ColumnType::Integer));
    assert_eq!((code, msg.as_str()), ("22003", "integer out of range"));
}

#[test]
fn a_float_into_an_integer_rounds_half_to_even() {
    assert_eq!(
        assign_to(Value::Float(2.5), ColumnType::Integer).unwrap(),
        Value::Int(2)
    );
    assert_eq!(
        assign_to(Value::Float(3.5), ColumnType::Integer).unwrap(),
        Value::Int(4)
    );
    let (code, _) = err_of(assign_to(Value::Float(f64::NAN), ColumnType::Integer));
    assert_eq!(code, "22003");
}

#[test]
fn eleven_characters_into_varchar_10_are_string_data_right_truncation() {
    let (code, msg) = err_of(assign_to(
        Value::text("abcdefghijk"),
        ColumnType::Varchar(Some(10)),
    ));
    assert_eq!(code, "22001");
    assert_eq!(msg, "value too long for type character varying(10)");
}

#[test]
fn varchar_length_counts_characters_not_bytes() {
    let s = "éééééééééé"; // ten characters, twenty bytes
    assert_eq!(
        assign_to(Value::text(s), ColumnType::Varchar(Some(10))).unwrap(),
        Value::text(s)
    );
}

#[test]
fn trailing_blanks_beyond_a_varchar_length_are_cut() {
    let v = assign_to(Value::text("abc   "), ColumnType::Varchar(Some(4))).unwrap();
    assert_eq!(v, Value::text("abc "));
}

#[test]
fn a_boolean_into_an_integer_column_is_a_datatype_mismatch() {
    let (code, msg) = err_of(assign(&Value::Bool(true), &col("n", ColumnType::Integer)));
    assert_eq!(code, "42804");
    assert_eq!(
        msg,
        "column \"n\" is of type integer but expression is of type boolean"
    );
}

#[test]
fn a_bigint_into_a_date_column_is_a_datatype_mismatch() {
    let (code, _) = err_of(assign_to(Value::Int(19000), ColumnType::Date));
    assert_eq!(code, "42804");
}

#[test]
fn boolean_text_takes_postgres_spellings() {
    for (text, b) in [
        ("t", true),
        ("TRUE", true),
        ("yes", true),
        ("on", true),
        ("1", true),
    ] {
        assert_eq!(
            assign_to(Value::text(text), ColumnType::Boolean).unwrap(),
            Value::Bool(b)
        );
    }
    for (text, b) in [
        ("f", false),
        ("False", false),
        ("no", false),
        ("off", false),
        ("0", false),
    ] {
        assert_eq!(
            assign_to(Value::text(text), ColumnType::Boolean).unwrap(),
            Value::Bool(b)
        );
    }
    let (code, msg) = err_of(assign_to(Value::text("o"), ColumnType::Boolean));
    assert_eq!(
        (code, msg.as_str()),
        ("22P02", "invalid input syntax for type boolean: \"o\"")
    );
}

#[test]
fn a_timestamptz_with_an_offset_is_stored_in_utc() {
    let v = assign_to(
        Value::text("2024-01-01T12:00:00.5+02:00"),
        ColumnType::TimestampTz,
    );
    assert_eq!(format_value(&v.unwrap()), "2024-01-01 10:00:00.5+00");
    let v = assign_to(Value::text("2024-01-01"), ColumnType::TimestampTz).unwrap();
    assert_eq!(format_value(&v), "2024-01-01 00:00:00+00");
}

#[test]
fn a_timetz_keeps_its_offset() {
    let v = assign_to(Value::text("08:30:00-05"), ColumnType::TimeTz).unwrap();
    assert_eq!(format_value(&v), "08:30:00-05");
    let (code, _) = err_of(assign_to(Value::text("25:00:00"), ColumnType::TimeTz));
    assert_eq!(code, "22008");
}

#[test]
fn json_text_must_parse() {
    let v = assign_to(Value::text(r#"{"b":[1,2],"a":null}"#), ColumnType::Jsonb).unwrap();
    assert_eq!(format_value(&v), r#"{"a": null, "b": [1, 2]}"#);
    let (code, msg) = err_of(assign_to(Value::text("abc"), ColumnType::Json));
    assert_eq!(
        (code, msg.as_str()),
        ("22P02", "invalid input syntax for type json")
    );
}

#[test]
fn jsonb_rejects_a_nul_escape_and_json_keeps_it() {
    let j = Value::Json(serde_json::json!({"a": "x\u{0}y"}));
    let (code, _) = err_of(assign(&j, &col("j", ColumnType::Jsonb)));
    assert_eq!(code, "22P05");
    assert!(assign(&j, &col("j", ColumnType::Json)).is_ok());
}

#[test]
fn a_nul_byte_in_text_is_rejected() {
    let (code, msg) = err_of(assign_to(Value::text("a\0b"), ColumnType::Text));
    assert_eq!(
        (code, msg.as_str()),
        ("22021", "invalid byte sequence for encoding \"UTF8\": 0x00")
    );
}

#[test]
fn real_overflow_from_text_is_out_of_range() {
    let (code, msg) = err_of(assign_to(Value::text("1e50"), ColumnType::Real));
    assert_eq!(
        (code, msg.as_str()),
        ("22003", "\"1e50\" is out of range for type real")
    );
    assert!(assign_to(Value::text("NaN"), ColumnType::DoublePrecision).is_ok());
    let (code, _) = err_of(assign_to(Value::text("1.5x"), ColumnType::DoublePrecision));
    assert_eq!(code, "22P02");
}

#[test]
fn a_number_into_a_text_column_is_its_output_text() {
    assert_eq!(
        assign_to(Value::Int(7), ColumnType::Text).unwrap(),
        Value::text("7")
    );
    assert_eq!(format_float(1e20), "1e+20");
    assert_eq!(format_float(1.5e-5), "1.5e-05");
    assert_eq!(format_float(0.25), "0.25");
    assert_eq!(format_float(123456789012345.0), "123456789012345");
}

#[test]
fn column_type_names_and_aliases_parse() {
    assert_eq!(ColumnType::parse("INT8").unwrap(), ColumnType::BigInt);
    assert_eq!(
        ColumnType::parse("double  precision").unwrap(),
        ColumnType::DoublePrecision
    );
    assert_eq!(
        ColumnType::parse("varchar(10)").unwrap(),
        ColumnType::Varchar(Some(10))
    );
    assert_eq!(
        ColumnType::parse("timestamp with time zone").unwrap(),
        ColumnType::TimestampTz
    );
    assert_eq!(
        ColumnType::parse("blob").unwrap_err().code,
        SqlState::UndefinedObject
    );
}

// ---- Statements -------------------------------------------------------------------------

#[test]
fn null_into_a_not_null_column_is_a_not_null_violation() {
    let (mut db, s) = db_with_t();
    let e = fails(
        &mut db,
        s,
        insert(
            vec![vec![Value::Int(6), Value::Null, t()]],
            OnConflict::None,
        ),
    );
    assert_eq!(e.code.code(), "23502");
    assert_eq!(
        e.message,
        "null value in column \"name\" of relation \"t\" violates not-null constraint"
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("Failing row contains (6, null, x).")
    );
}

#[test]
fn a_duplicate_key_is_a_unique_violation_naming_the_pkey() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    let e = fails(&mut db, s, insert(vec![row(1, "b")], OnConflict::None));
    assert_eq!(e.code.code(), "23505");
    assert_eq!(
        e.message,
        "duplicate key value violates unique constraint \"t_pkey\""
    );
    assert_eq!(e.detail.as_deref(), Some("Key (id)=(1) already exists."));
    crate::marks::assert_hit(&["postgres:unique-violation"]);
}

#[test]
fn a_multi_row_insert_with_one_bad_row_inserts_nothing() {
    let (mut db, s) = db_with_t();
    let bad = vec![Value::Int(8), Value::text("h"), Value::text("12345678901")];
    let e = fails(
        &mut db,
        s,
        insert(vec![row(7, "g"), bad, row(9, "i")], OnConflict::None),
    );
    assert_eq!(e.code, SqlState::StringDataRightTruncation);
    assert!(ids(&db).is_empty());
}

#[test]
fn an_upsert_proposing_one_key_twice_is_a_cardinality_violation() {
    let (mut db, s) = db_with_t();
    let e = fails(&mut db, s, upsert(vec![row(1, "a"), row(1, "b")]));
    assert_eq!(e.code.code(), "21000");
    assert_eq!(
        e.message,
        "ON CONFLICT DO UPDATE command cannot affect row a second time"
    );
    assert!(ids(&db).is_empty());
}

#[test]
fn do_nothing_proposing_one_key_twice_keeps_the_first() {
    let (mut db, s) = db_with_t();
    let st = insert(
        vec![row(1, "a"), row(1, "b")],
        OnConflict::DoNothing {
            conflict_target: None,
        },
    );
    assert_eq!(ok(&mut db, s, st), Reply::Affected(1));
    assert_eq!(name_of(&db, 1), Some(Value::text("a")));
}

#[test]
fn an_upsert_updates_the_existing_row_and_counts_it() {
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    assert_eq!(
        ok(&mut db, s, upsert(vec![row(1, "b"), row(2, "c")])),
        Reply::Affected(2)
    );
    assert_eq!(name_of(&db, 1), Some(Value::text("b")));
    assert_eq!(ids(&db), vec![1, 2]);
}

#[test]
fn replaying_an_upsert_batch_leaves_the_table_unchanged() {
    let (mut db, s) = db_with_t();
    let batch = upsert((1..=5).map(|i| row(i, "v")).collect());
    ok(&mut db, s, batch.clone());
    let before = db.table_rows("t");
    ok(&mut db, s, batch);
    assert_eq!(db.table_rows("t"), before);
}

#[test]
fn an_on_conflict_target_other_than_the_key_is_an_invalid_column_reference() {
    let (mut db, s) = db_with_t();
    let st = insert(
        vec![row(1, "a")],
        OnConflict::DoUpdate {
            conflict_target: vec!["name".into()],
            set: vec![],
        },
    );
    let e = fails(&mut db, s, st);
    assert_eq!(e.code.code(), "42P10");
}

#[test]
fn statements_after_an_error_fail_with_in_failed_sql_transaction_until_rollback() {
    let (mut db, s) = db_with_t();
    db.begin(0, s).unwrap();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    fails(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    let e = fails(&mut db, s, insert(vec![row(2, "b")], OnConflict::None));
    assert_eq!(e.code.code(), "25P02");
    assert_eq!(
        e.message,
        "current transaction is aborted, commands ignored until end of transaction block"
    );
    db.rollback(0, s).unwrap();
    ok(&mut db, s, insert(vec![row(3, "c")], OnConflict::None));
    assert_eq!(ids(&db), vec![3]);
}

#[test]
fn commit_of_a_failed_transaction_rolls_back() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let (mut db, s) = db_with_t();
    db.begin(0, s).unwrap();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    fails(
        &mut db,
        s,
        Statement::Select {
            table: "nope".into(),
        },
    );
    assert_eq!(db.commit(0, s), Ok(TxnEnd::RolledBack));
    assert!(ids(&db).is_empty());
    crate::marks::assert_hit(&["postgres:commit-rolled-back"]);
}

#[test]
fn an_error_in_autocommit_mode_leaves_the_session_usable() {
    let (mut db, s) = db_with_t();
    fails(
        &mut db,
        s,
        insert(vec![vec![Value::text("x")]], OnConflict::None),
    );
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    assert_eq!(ids(&db), vec![1]);
}

#[test]
fn a_committed_transaction_survives_a_crash_and_an_open_one_leaves_no_trace() {
    let (mut db, s) = db_with_t();
    db.begin(0, s).unwrap();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    assert_eq!(db.commit(0, s), Ok(TxnEnd::Committed));
    db.begin(0, s).unwrap();
    ok(&mut db, s, insert(vec![row(2, "b")], OnConflict::None));
    assert_eq!(db.crash(0), 0, "synchronous_commit = on loses no commit");
    assert_eq!(ids(&db), vec![1]);
    let e = db.commit(0, s).unwrap_err();
    assert_eq!(e.code.code(), "08003");
    let s2 = db.connect(0);
    assert_ne!(s2, s);
    ok(&mut db, s2, insert(vec![row(2, "b")], OnConflict::None));
}

fn ok_at(db: &mut Database, now_ms: u64, s: SessionId, st: Statement) -> Reply {
    match db.execute(now_ms, s, &st) {
        Execution::Done(Ok(r)) => r,
        other => panic!("expected success for {st:?} at {now_ms} ms, got {other:?}"),
    }
}

/// `t` with rows 1 "a", 2 "b", 3 "c" under `synchronous_commit = off`, its WAL writer
/// cycling every 200 ms at 50 + 200 k.
fn async_db() -> (Database, SessionId) {
    let config = DbConfig {
        synchronous_commit: false,
        wal_writer_delay_ms: 200,
        wal_writer_phase_ms: 50,
        ..DbConfig::default()
    };
    let (mut db, s) = db_with_t_under(config);
    let rows = vec![row(1, "a"), row(2, "b"), row(3, "c")];
    ok_at(&mut db, 10, s, insert(rows, OnConflict::None));
    (db, s)
}

#[test]
fn the_wal_writer_flushes_on_each_cycle_of_its_phase() {
    let config = DbConfig {
        wal_writer_delay_ms: 200,
        wal_writer_phase_ms: 50,
        ..DbConfig::default()
    };
    let flushed: Vec<u64> = [0, 49, 50, 249, 250, 1049]
        .iter()
        .map(|&now| config.last_wal_flush_ms(now))
        .collect();
    assert_eq!(flushed, [0, 0, 50, 50, 250, 850]);
}

#[test]
fn a_crash_takes_back_the_asynchronous_commits_the_wal_writer_had_not_flushed() {
    let (mut db, s) = async_db();
    // Flushed at 50: the three rows stay. After it, at 60..=80, newest first taken back:
    // an insert, an update, a delete and a truncate-and-insert.
    ok_at(&mut db, 60, s, insert(vec![row(4, "d")], OnConflict::None));
    ok_at(&mut db, 61, s, upsert(vec![row(1, "a2")]));
    let del = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::Int(2)],
    };
    ok_at(&mut db, 62, s, del);
    db.begin(70, s).unwrap();
    ok_at(&mut db, 70, s, Statement::Truncate { table: "t".into() });
    ok_at(&mut db, 70, s, insert(vec![row(9, "z")], OnConflict::None));
    assert_eq!(db.commit(80, s), Ok(TxnEnd::Committed));
    assert_eq!(ids(&db), vec![9]);
    assert_eq!(
        db.crash(249),
        4,
        "the four commits after the cycle at 50 ms"
    );
    assert_eq!(ids(&db), vec![1, 2, 3]);
    assert_eq!(name_of(&db, 1), Some(Value::text("a")));
}

#[test]
fn a_commit_before_the_wal_writers_last_cycle_survives_a_crash() {
    let (mut db, s) = async_db();
    ok_at(&mut db, 60, s, insert(vec![row(4, "d")], OnConflict::None));
    ok_at(&mut db, 260, s, insert(vec![row(5, "e")], OnConflict::None));
    assert_eq!(
        db.crash(300),
        1,
        "only the commit after the cycle at 250 ms"
    );
    assert_eq!(ids(&db), vec![1, 2, 3, 4]);
    // Nothing is taken back twice: a second crash finds nothing unflushed.
    assert_eq!(db.crash(301), 0);
}

#[test]
fn a_table_created_after_the_wal_writers_last_cycle_is_gone_after_a_crash() {
    let config = DbConfig {
        synchronous_commit: false,
        ..DbConfig::default()
    };
    let mut db = Database::new(config);
    let s = db.connect(0);
    let create = Statement::CreateTable(CreateTable {
        name: "u".into(),
        columns: vec![col("id", ColumnType::Integer)],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    });
    ok_at(&mut db, 210, s, create);
    let row = Statement::Insert(Insert {
        table: "u".into(),
        columns: vec![],
        rows: vec![vec![Value::Int(1)]],
        on_conflict: OnConflict::None,
    });
    ok_at(&mut db, 220, s, row);
    assert_eq!(db.crash(399), 2);
    assert!(db.table("u").is_none(), "the CREATE TABLE was not flushed");
}

#[test]
fn synchronous_commit_on_loses_no_commit_to_a_crash() {
    let (mut db, s) = db_with_t();
    ok_at(&mut db, 60, s, insert(vec![row(4, "d")], OnConflict::None));
    assert_eq!(db.crash(61), 0);
    assert_eq!(ids(&db), vec![4]);
}

#[test]
fn an_update_can_change_the_key() {
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(2, "b")], OnConflict::None));
    let set = vec![
        ("id".into(), Value::Int(1)),
        ("name".into(), Value::text("b'")),
    ];
    let st = Statement::Update {
        table: "t".into(),
        set,
        where_pk: vec![Value::Int(2)],
    };
    assert_eq!(ok(&mut db, s, st), Reply::Affected(1));
    assert_eq!(ids(&db), vec![1]);
}

#[test]
fn an_update_onto_an_existing_key_is_a_unique_violation() {
    let (mut db, s) = db_with_t();
    ok(
        &mut db,
        s,
        insert(vec![row(1, "a"), row(2, "b")], OnConflict::None),
    );
    let set = vec![("id".into(), Value::Int(1))];
    let st = Statement::Update {
        table: "t".into(),
        set,
        where_pk: vec![Value::Int(2)],
    };
    assert_eq!(fails(&mut db, s, st).code, SqlState::UniqueViolation);
}

#[test]
fn update_and_delete_of_a_missing_row_affect_nothing() {
    let (mut db, s) = db_with_t();
    let set = vec![("name".into(), Value::text("z"))];
    let up = Statement::Update {
        table: "t".into(),
        set,
        where_pk: vec![Value::Int(9)],
    };
    assert_eq!(ok(&mut db, s, up), Reply::Affected(0));
    let del = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::text("9")],
    };
    assert_eq!(ok(&mut db, s, del), Reply::Affected(0));
}

#[test]
fn truncate_is_transactional() {
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    db.begin(0, s).unwrap();
    ok(&mut db, s, Statement::Truncate { table: "t".into() });
    ok(&mut db, s, insert(vec![row(2, "b")], OnConflict::None));
    assert_eq!(ids(&db), vec![1]);
    db.rollback(0, s).unwrap();
    assert_eq!(ids(&db), vec![1]);
    db.begin(0, s).unwrap();
    ok(&mut db, s, Statement::Truncate { table: "t".into() });
    ok(&mut db, s, insert(vec![row(2, "b")], OnConflict::None));
    db.commit(0, s).unwrap();
    assert_eq!(ids(&db), vec![2]);
}

#[test]
fn select_returns_rows_in_key_order_with_own_uncommitted_writes() {
    let (mut db, s) = db_with_t();
    let other = db.connect(0);
    db.begin(0, s).unwrap();
    ok(
        &mut db,
        s,
        insert(
            vec![row(3, "c"), row(1, "a"), row(2, "b")],
            OnConflict::None,
        ),
    );
    let Reply::Rows { rows, columns } = ok(&mut db, s, Statement::Select { table: "t".into() })
    else {
        panic!("rows")
    };
    assert_eq!(columns, vec!["id", "name", "note"]);
    assert_eq!(
        rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(),
        vec![Value::Int(1), Value::Int(2), Value::Int(3)]
    );
    let seen = ok(&mut db, other, Statement::Select { table: "t".into() });
    assert_eq!(
        seen,
        Reply::Rows {
            columns,
            rows: vec![]
        }
    );
}

#[test]
fn unknown_tables_and_columns_are_undefined() {
    let (mut db, s) = db_with_t();
    let e = fails(&mut db, s, Statement::Truncate { table: "u".into() });
    assert_eq!(
        (e.code.code(), e.message.as_str()),
        ("42P01", "relation \"u\" does not exist")
    );
    let st = Statement::Insert(Insert {
        table: "t".into(),
        columns: vec!["id".into(), "nope".into()],
        rows: vec![vec![Value::Int(1), t()]],
        on_conflict: OnConflict::None,
    });
    let e = fails(&mut db, s, st);
    assert_eq!(
        e.message,
        "column \"nope\" of relation \"t\" does not exist"
    );
}

#[test]
fn create_table_twice_is_a_duplicate_table_unless_if_not_exists() {
    let (mut db, s) = db_with_t();
    let mut c = CreateTable {
        name: "t".into(),
        columns: vec![col("id", ColumnType::BigInt)],
        primary_key: vec![],
        if_not_exists: false,
    };
    let e = fails(&mut db, s, Statement::CreateTable(c.clone()));
    assert_eq!(
        (e.code.code(), e.message.as_str()),
        ("42P07", "relation \"t\" already exists")
    );
    c.if_not_exists = true;
    ok(&mut db, s, Statement::CreateTable(c));
}

#[test]
fn create_table_is_transactional() {
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    db.begin(0, s).unwrap();
    let c = CreateTable {
        name: "u".into(),
        columns: vec![col("id", ColumnType::BigInt)],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    };
    ok(&mut db, s, Statement::CreateTable(c));
    let st = Statement::Insert(Insert {
        table: "u".into(),
        columns: vec![],
        rows: vec![vec![Value::Int(1)]],
        on_conflict: OnConflict::None,
    });
    ok(&mut db, s, st);
    assert!(db.table("u").is_none());
    db.rollback(0, s).unwrap();
    assert!(db.table("u").is_none());
}

#[test]
fn a_json_primary_key_has_no_btree_operator_class() {
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    let c = CreateTable {
        name: "j".into(),
        columns: vec![col("doc", ColumnType::Json)],
        primary_key: vec!["doc".into()],
        if_not_exists: false,
    };
    assert_eq!(
        fails(&mut db, s, Statement::CreateTable(c)).code.code(),
        "42704"
    );
}

#[test]
fn a_table_without_a_primary_key_keeps_duplicates_in_insertion_order() {
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    let c = CreateTable {
        name: "log".into(),
        columns: vec![col("v", ColumnType::Text)],
        primary_key: vec![],
        if_not_exists: false,
    };
    ok(&mut db, s, Statement::CreateTable(c));
    let rows = vec![
        vec![Value::text("b")],
        vec![Value::text("a")],
        vec![Value::text("b")],
    ];
    let st = Statement::Insert(Insert {
        table: "log".into(),
        columns: vec![],
        rows: rows.clone(),
        on_conflict: OnConflict::None,
    });
    ok(&mut db, s, st);
    assert_eq!(db.table_rows("log"), Some(rows));
    let del = Statement::Delete {
        table: "log".into(),
        where_pk: vec![Value::Int(1)],
    };
    assert_eq!(fails(&mut db, s, del).code.code(), "0A000");
}

// ---- Concurrent sessions ----------------------------------------------------------------

fn blocked_by(db: &mut Database, now_ms: u64, s: SessionId, st: &Statement) -> SessionId {
    match db.execute(now_ms, s, st) {
        Execution::Blocked { by } => by,
        other => panic!("expected {st:?} to block, got {other:?}"),
    }
}

#[test]
fn an_insert_on_a_key_another_open_transaction_inserted_waits_then_fails_after_commit() {
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    db.begin(0, b).unwrap();
    let st = insert(vec![row(1, "b")], OnConflict::None);
    assert_eq!(blocked_by(&mut db, 0, b, &st), a);
    db.commit(0, a).unwrap();
    assert_eq!(fails(&mut db, b, st).code, SqlState::UniqueViolation);
}

#[test]
fn an_insert_waiting_on_a_key_succeeds_after_the_holder_rolls_back() {
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    let st = insert(vec![row(1, "b")], OnConflict::None);
    assert_eq!(blocked_by(&mut db, 0, b, &st), a);
    db.rollback(0, a).unwrap();
    ok(&mut db, b, st);
    assert_eq!(name_of(&db, 1), Some(Value::text("b")));
}

#[test]
fn a_waiting_upsert_takes_the_update_path_after_the_holder_commits() {
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(&mut db, a, upsert(vec![row(1, "a")]));
    let st = upsert(vec![row(1, "b")]);
    blocked_by(&mut db, 0, b, &st);
    db.commit(0, a).unwrap();
    assert_eq!(ok(&mut db, b, st), Reply::Affected(1));
    assert_eq!(name_of(&db, 1), Some(Value::text("b")));
}

#[test]
fn an_update_waiting_on_a_row_another_transaction_deleted_finds_no_row() {
    let (mut db, a) = db_with_t();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(
        &mut db,
        a,
        Statement::Delete {
            table: "t".into(),
            where_pk: vec![Value::Int(1)],
        },
    );
    let set = vec![("name".into(), Value::text("z"))];
    let st = Statement::Update {
        table: "t".into(),
        set,
        where_pk: vec![Value::Int(1)],
    };
    blocked_by(&mut db, 0, b, &st);
    db.commit(0, a).unwrap();
    assert_eq!(ok(&mut db, b, st), Reply::Affected(0));
}

#[test]
fn an_update_of_a_row_only_another_transaction_inserted_sees_nothing_and_does_not_wait() {
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    let set = vec![("name".into(), Value::text("z"))];
    let st = Statement::Update {
        table: "t".into(),
        set,
        where_pk: vec![Value::Int(1)],
    };
    assert_eq!(ok(&mut db, b, st), Reply::Affected(0));
}

#[test]
fn a_wait_cycle_is_a_deadlock_for_the_session_that_closes_it() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    db.begin(0, b).unwrap();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    ok(&mut db, b, insert(vec![row(2, "b")], OnConflict::None));
    let a_wants = upsert(vec![row(2, "a")]);
    assert_eq!(blocked_by(&mut db, 0, a, &a_wants), b);
    let e = fails(&mut db, b, upsert(vec![row(1, "b")]));
    assert_eq!(
        (e.code.code(), e.message.as_str()),
        ("40P01", "deadlock detected")
    );
    assert_eq!(db.commit(0, b), Ok(TxnEnd::RolledBack));
    ok(&mut db, a, a_wants);
    db.commit(0, a).unwrap();
    assert_eq!(ids(&db), vec![1, 2]);
    crate::marks::assert_hit(&["postgres:deadlock-detected"]);
}

/// `t(id integer PRIMARY KEY, name text)` in a database with `config`.
fn db_with_config(config: DbConfig) -> (Database, SessionId) {
    let mut db = Database::new(config);
    let s = db.connect(0);
    let c = CreateTable {
        name: "t".into(),
        columns: vec![
            col("id", ColumnType::Integer),
            col("name", ColumnType::Text),
        ],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    };
    ok(&mut db, s, Statement::CreateTable(c));
    (db, s)
}

#[test]
fn a_wait_past_lock_timeout_is_lock_not_available() {
    let (mut db, a) = db_with_config(DbConfig {
        lock_timeout_ms: 100,
        ..DbConfig::default()
    });
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    let st = insert(vec![vec![Value::Int(1), t()]], OnConflict::None);
    ok(&mut db, a, st.clone());
    db.begin(0, b).unwrap();
    blocked_by(&mut db, 10, b, &st);
    blocked_by(&mut db, 50, b, &st);
    let Execution::Done(Err(e)) = db.execute(110, b, &st) else {
        panic!("expected an error")
    };
    assert_eq!(e.code.code(), "55P03");
    assert_eq!(e.message, "canceling statement due to lock timeout");
    assert_eq!(db.commit(110, b), Ok(TxnEnd::RolledBack));
}

#[test]
fn a_session_idle_in_transaction_past_the_timeout_is_terminated() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let config = DbConfig {
        idle_in_transaction_session_timeout_ms: 1000,
        ..DbConfig::default()
    };
    let (mut db, busy) = db_with_config(config);
    let idle = db.connect(0);
    let no_txn = db.connect(0);
    db.begin(0, idle).unwrap();
    ok(
        &mut db,
        idle,
        insert(vec![vec![Value::Int(1), t()]], OnConflict::None),
    );
    db.begin(900, busy).unwrap();
    assert_eq!(db.tick(1000), vec![idle]);
    let e = db.commit(1000, idle).unwrap_err();
    assert_eq!(e.code.code(), "25P03");
    assert_eq!(db.commit(1000, idle).unwrap_err().code.code(), "08003");
    ok(
        &mut db,
        no_txn,
        insert(vec![vec![Value::Int(1), t()]], OnConflict::None),
    );
    crate::marks::assert_hit(&["postgres:idle-in-transaction-timeout"]);
}

#[test]
fn truncate_waits_for_other_writers_and_writers_wait_for_truncate() {
    let (mut db, a) = db_with_t();
    let b = db.connect(0);
    db.begin(0, a).unwrap();
    ok(&mut db, a, insert(vec![row(1, "a")], OnConflict::None));
    let trunc = Statement::Truncate { table: "t".into() };
    assert_eq!(blocked_by(&mut db, 0, b, &trunc), a);
    db.commit(0, a).unwrap();
    db.begin(0, b).unwrap();
    ok(&mut db, b, trunc);
    let st = insert(vec![row(2, "b")], OnConflict::None);
    assert_eq!(blocked_by(&mut db, 0, a, &st), b);
    assert_eq!(
        blocked_by(&mut db, 0, a, &Statement::Select { table: "t".into() }),
        b
    );
    db.commit(0, b).unwrap();
    ok(&mut db, a, st);
    assert_eq!(ids(&db), vec![2]);
}

// ---- Property: transactions against a committed-rows reference ------------------------

#[derive(Debug, Clone)]
enum Op {
    Insert(i64, i64),
    Upsert(Vec<(i64, i64)>),
    Update(i64, i64, i64),
    Delete(i64),
    Truncate,
}

#[derive(Debug, Clone, Copy)]
enum End {
    Commit,
    Rollback,
    Crash,
    Autocommit,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..6i64;
    let v = 0..100i64;
    prop_oneof![
        4 => (k.clone(), v.clone()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => proptest::collection::vec((k.clone(), v.clone()), 1..4).prop_map(Op::Upsert),
        2 => (k.clone(), k.clone(), v).prop_map(|(k, n, v)| Op::Update(k, n, v)),
        2 => k.prop_map(Op::Delete),
        1 => Just(Op::Truncate),
    ]
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        Just(End::Commit),
        Just(End::Rollback),
        Just(End::Crash),
        Just(End::Autocommit)
    ]
}

fn kv_table() -> Statement {
    Statement::CreateTable(CreateTable {
        name: "kv".into(),
        columns: vec![
            col("k", ColumnType::BigInt),
            col("v", ColumnType::BigInt).not_null(),
        ],
        primary_key: vec!["k".into()],
        if_not_exists: false,
    })
}

fn statement(op: &Op) -> Statement {
    let kv = |k: i64, v: i64| vec![Value::Int(k), Value::Int(v)];
    match op {
        Op::Insert(k, v) => Statement::Insert(Insert {
            table: "kv".into(),
            columns: vec![],
            rows: vec![kv(*k, *v)],
            on_conflict: OnConflict::None,
        }),
        Op::Upsert(rows) => Statement::Insert(Insert {
            table: "kv".into(),
            columns: vec!["k".into(), "v".into()],
            rows: rows.iter().map(|&(k, v)| kv(k, v)).collect(),
            on_conflict: OnConflict::DoUpdate {
                conflict_target: vec!["k".into()],
                set: vec!["v".into()],
            },
        }),
        Op::Update(k, n, v) => Statement::Update {
            table: "kv".into(),
            set: vec![("k".into(), Value::Int(*n)), ("v".into(), Value::Int(*v))],
            where_pk: vec![Value::Int(*k)],
        },
        Op::Delete(k) => Statement::Delete {
            table: "kv".into(),
            where_pk: vec![Value::Int(*k)],
        },
        Op::Truncate => Statement::Truncate { table: "kv".into() },
    }
}

/// The reference: the op applied to a plain map; `Err` where PostgreSQL raises an error.
fn reference_apply(rows: &mut BTreeMap<i64, i64>, op: &Op) -> Result<(), ()> {
    match op {
        Op::Insert(k, v) => {
            if rows.contains_key(k) {
                return Err(());
            }
            rows.insert(*k, *v);
        }
        Op::Upsert(proposed) => {
            let mut keys: Vec<i64> = proposed.iter().map(|p| p.0).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.len() != proposed.len() {
                return Err(());
            }
            rows.extend(proposed.iter().copied());
        }
        Op::Update(k, n, v) => {
            if rows.contains_key(k) {
                if n != k && rows.contains_key(n) {
                    return Err(());
                }
                rows.remove(k);
                rows.insert(*n, *v);
            }
        }
        Op::Delete(k) => {
            rows.remove(k);
        }
        Op::Truncate => rows.clear(),
    }
    Ok(())
}

fn committed(db: &Database) -> BTreeMap<i64, i64> {
    let as_int = |v: &Value| {
        if let Value::Int(i) = v {
            *i
        } else {
            panic!("bigint")
        }
    };
    let rows = db.table_rows("kv").expect("kv exists");
    rows.iter()
        .map(|r| (as_int(&r[0]), as_int(&r[1])))
        .collect()
}

/// Runs one transaction against both the model and the reference.
fn run_txn(
    db: &mut Database,
    session: &mut SessionId,
    reference: &mut BTreeMap<i64, i64>,
    ops: &[Op],
    end: End,
) {
    let observer = db.connect(0);
    let autocommit = matches!(end, End::Autocommit);
    if !autocommit {
        db.begin(0, *session).unwrap();
    }
    let mut work = reference.clone();
    let mut failed = false;
    for op in ops {
        let mut attempt = work.clone();
        let expected = if failed {
            Err(())
        } else {
            reference_apply(&mut attempt, op)
        };
        let got = match db.execute(0, *session, &statement(op)) {
            Execution::Done(r) => r,
            Execution::Blocked { by } => panic!("one writer never blocks (by {by})"),
        };
        assert_eq!(got.is_ok(), expected.is_ok(), "{op:?}: model {got:?}");
        if expected.is_ok() {
            work = attempt;
        } else if !autocommit {
            failed = true;
        }
        if autocommit {
            *reference = work.clone();
        }
        let seen = db.execute(0, observer, &Statement::Select { table: "kv".into() });
        if !matches!(seen, Execution::Blocked { .. }) {
            assert_eq!(committed(db), *reference, "others see only committed rows");
        }
    }
    match end {
        End::Commit => {
            let expect = if failed {
                TxnEnd::RolledBack
            } else {
                TxnEnd::Committed
            };
            assert_eq!(db.commit(0, *session), Ok(expect));
            if !failed {
                *reference = work;
            }
        }
        End::Rollback => db.rollback(0, *session).unwrap(),
        End::Crash => {
            db.crash(0);
            *session = db.connect(0);
        }
        End::Autocommit => {}
    }
    db.close(observer);
}

proptest! {
    #[test]
    fn transactions_match_a_committed_rows_reference(
        txns in proptest::collection::vec((proptest::collection::vec(op(), 0..6), end()), 1..12)
    ) {
        let mut db = Database::new(DbConfig::default());
        let mut session = db.connect(0);
        ok(&mut db, session, kv_table());
        let mut reference = BTreeMap::new();
        for (ops, end) in &txns {
            run_txn(&mut db, &mut session, &mut reference, ops, *end);
            prop_assert_eq!(committed(&db), reference.clone());
        }
    }
}

// ---- Found by the differential test against real PostgreSQL (harness/tests/real_postgres_diff.rs)

#[test]
fn a_missing_cast_in_a_later_row_fails_before_an_out_of_range_cast_in_an_earlier_one() {
    // Parse analysis (42804, bad literals) runs over every row before the planner folds
    // the int8 -> int4 cast (22003).
    let (mut db, s) = db_with_t();
    let st = insert(
        vec![
            vec![Value::Int(2_147_483_648), t(), Value::Null],
            vec![Value::Bool(true), t(), Value::Null],
        ],
        OnConflict::None,
    );
    assert_eq!(fails(&mut db, s, st).code.code(), "42804");
}

#[test]
fn a_bad_literal_in_a_later_row_fails_before_a_duplicate_key_in_an_earlier_one() {
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    let st = insert(
        vec![row(1, "b"), vec![Value::text("x"), t(), Value::Null]],
        OnConflict::None,
    );
    let e = fails(&mut db, s, st);
    assert_eq!(e.code.code(), "22P02");
    assert_eq!(e.message, "invalid input syntax for type integer: \"x\"");
}

#[test]
fn a_too_long_literal_is_a_plan_time_error_after_a_bad_literal_in_a_later_row() {
    let (mut db, s) = db_with_t();
    let st = insert(
        vec![
            vec![Value::Int(1), t(), Value::text("eleven chars")],
            vec![Value::text("x"), t(), Value::Null],
        ],
        OnConflict::None,
    );
    assert_eq!(fails(&mut db, s, st).code.code(), "22P02");
}

#[test]
fn a_null_in_a_later_row_fails_after_a_duplicate_key_in_an_earlier_one() {
    let (mut db, s) = db_with_t();
    ok(&mut db, s, insert(vec![row(1, "a")], OnConflict::None));
    let st = insert(
        vec![row(1, "b"), vec![Value::Int(2), Value::Null, Value::Null]],
        OnConflict::None,
    );
    assert_eq!(fails(&mut db, s, st).code.code(), "23505");
}

#[test]
fn a_key_out_of_the_columns_range_matches_no_row_instead_of_failing() {
    // `WHERE id = 3000000000::int8` on an integer key compares int4 = int8: no error.
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    let create = Statement::CreateTable(CreateTable {
        name: "t".into(),
        columns: vec![col("id", ColumnType::SmallInt), col("v", ColumnType::Text)],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    });
    ok(&mut db, s, create);
    let delete = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::Int(40_000)],
    };
    assert_eq!(ok(&mut db, s, delete), Reply::Affected(0));
    let update = Statement::Update {
        table: "t".into(),
        set: vec![("v".into(), t())],
        where_pk: vec![Value::Float(1.5)],
    };
    assert_eq!(ok(&mut db, s, update), Reply::Affected(0));
    // An untyped literal still goes through the column's input function.
    let delete = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::text("40000")],
    };
    assert_eq!(fails(&mut db, s, delete).code.code(), "22003");
}

#[test]
fn a_key_text_longer_than_the_varchar_matches_no_row_instead_of_failing() {
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    let create = Statement::CreateTable(CreateTable {
        name: "t".into(),
        columns: vec![
            col("k", ColumnType::Varchar(Some(2))),
            col("v", ColumnType::Text),
        ],
        primary_key: vec!["k".into()],
        if_not_exists: false,
    });
    ok(&mut db, s, create);
    ok(
        &mut db,
        s,
        Statement::Insert(Insert {
            table: "t".into(),
            columns: vec![],
            rows: vec![vec![Value::text("ab   "), t()]],
            on_conflict: OnConflict::None,
        }),
    );
    // Stored as "ab" (excess blanks cut); `k = 'ab   '` compares text and matches nothing.
    let delete = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::text("ab   ")],
    };
    assert_eq!(ok(&mut db, s, delete), Reply::Affected(0));
    let delete = Statement::Delete {
        table: "t".into(),
        where_pk: vec![Value::text("ab")],
    };
    assert_eq!(ok(&mut db, s, delete), Reply::Affected(1));
}

#[test]
fn an_update_fails_on_a_bad_literal_before_a_cast_out_of_range() {
    let (mut db, s) = db_with_t();
    let update = Statement::Update {
        table: "t".into(),
        set: vec![
            ("note".into(), Value::text("eleven chars")),
            ("id".into(), Value::text("x")),
        ],
        where_pk: vec![Value::Int(1)],
    };
    assert_eq!(fails(&mut db, s, update).code.code(), "22P02");
    let update = Statement::Update {
        table: "t".into(),
        set: vec![
            ("id".into(), Value::Int(3_000_000_000)),
            ("name".into(), Value::Bool(true)),
        ],
        where_pk: vec![Value::Int(1)],
    };
    assert_eq!(fails(&mut db, s, update).code.code(), "22003");
}

#[test]
fn a_real_prints_as_an_f32() {
    use super::coerce::format_column_value;
    let v = assign_to(Value::Float(0.1), ColumnType::Real).unwrap();
    assert_eq!(format_column_value(&v, ColumnType::Real), "0.1");
    assert_eq!(format_value(&v), "0.10000000149011612");
    let big = assign_to(Value::text("1234567"), ColumnType::Real).unwrap();
    assert_eq!(format_column_value(&big, ColumnType::Real), "1.234567e+06");
}

#[test]
fn a_zone_offset_beyond_15_hours_is_an_invalid_time_zone_displacement() {
    let (code, msg) = err_of(assign_to(Value::text("12:30:00+16"), ColumnType::TimeTz));
    assert_eq!(code, "22009");
    assert_eq!(msg, "time zone displacement out of range: \"12:30:00+16\"");
    let (code, _) = err_of(assign_to(
        Value::text("2024-01-01 00:00:00+05:60"),
        ColumnType::TimestampTz,
    ));
    assert_eq!(code, "22009");
}

#[test]
fn a_not_null_failing_row_prints_a_real_as_an_f32() {
    let mut db = Database::new(DbConfig::default());
    let s = db.connect(0);
    let create = Statement::CreateTable(CreateTable {
        name: "t".into(),
        columns: vec![col("id", ColumnType::Integer), col("r", ColumnType::Real)],
        primary_key: vec!["id".into()],
        if_not_exists: false,
    });
    ok(&mut db, s, create);
    let e = fails(
        &mut db,
        s,
        insert(vec![vec![Value::Null, Value::Float(0.1)]], OnConflict::None),
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("Failing row contains (null, 0.1).")
    );
}
