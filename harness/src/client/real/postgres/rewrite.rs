//! pgJDBC's `reWriteBatchedInserts=true` for a batch of the model's statements: runs of
//! consecutive one-row `INSERT`s into the same table, columns and conflict clause become
//! one multi-row `INSERT ... VALUES (..), (..)` of at most [`REWRITE_ROWS_MAX`] rows
//! (pgjdbc `core/v3/BatchedQuery.java`, `deriveForMultiBatch`: value blocks are powers of
//! two up to 128), so a put of 500 records costs a few statements instead of 500.
//!
//! # Same effect as the statements one by one
//! PostgreSQL coerces each row of an `INSERT`'s multi-row `VALUES` to the target columns
//! as it does a single row (`transformInsertStmt`), inserts the rows in order and checks
//! a non-deferrable unique index row by row, so a run of plain `INSERT`s does what its
//! statements did one after the other. `ON CONFLICT DO UPDATE` cannot touch one row twice
//! in a statement (`21000`, "cannot affect row a second time"), so a run of upserts is cut
//! before a conflict-target key it already holds; statements on distinct keys then touch
//! distinct rows, in the same order. `ON CONFLICT DO NOTHING` is left alone (its per-row
//! counts could not be told apart). The client checks each rewritten statement's count
//! and reruns the batch statement by statement on any server error or other count (see
//! [`RealPostgres`](super::RealPostgres)), so a failing record is still named by its index.

use super::sql;
use eosim_sim::postgres::{Insert, OnConflict, Statement};
use std::collections::HashSet;

/// Rows of one rewritten `INSERT` at most (pgJDBC's largest value block).
pub const REWRITE_ROWS_MAX: usize = 128;

/// One statement to send for `count` consecutive statements of the batch from `first`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    /// Index of the first batch statement it stands for.
    pub first: usize,
    /// How many batch statements it stands for (1: the statement itself).
    pub count: usize,
    /// What to send.
    pub statement: Statement,
}

/// The conflict-target key of a one-row insert, as SQL literals; `None` when the
/// statement cannot join a rewritten run.
fn run_key(i: &Insert) -> Option<Vec<String>> {
    if i.rows.len() != 1 {
        return None;
    }
    match &i.on_conflict {
        OnConflict::None => Some(Vec::new()),
        OnConflict::DoNothing { .. } => None,
        OnConflict::DoUpdate {
            conflict_target, ..
        } => conflict_target
            .iter()
            .map(|c| {
                let at = i.columns.iter().position(|n| n == c)?;
                Some(sql::literal(&i.rows[0][at]))
            })
            .collect(),
    }
}

fn same_shape(a: &Insert, b: &Insert) -> bool {
    a.table == b.table && a.columns == b.columns && a.on_conflict == b.on_conflict
}

/// `statements` with each run of joinable one-row inserts as one multi-row insert, in the
/// batch's order; every statement is in exactly one entry.
pub fn rewrite(statements: &[Statement]) -> Vec<Rewritten> {
    let mut out: Vec<Rewritten> = Vec::new();
    // The conflict-target keys of the open run; `open` says the last entry is one.
    let (mut keys, mut open) = (HashSet::new(), false);
    for (index, st) in statements.iter().enumerate() {
        let joinable = match st {
            Statement::Insert(i) => run_key(i).map(|k| (i, k)),
            _ => None,
        };
        let Some((insert, key)) = joinable else {
            open = false;
            out.push(single(index, st));
            continue;
        };
        let last = out.last_mut().filter(|_| open);
        match last {
            Some(Rewritten {
                statement: Statement::Insert(run),
                count,
                ..
            }) if *count < REWRITE_ROWS_MAX
                && same_shape(run, insert)
                && (key.is_empty() || !keys.contains(&key)) =>
            {
                run.rows.push(insert.rows[0].clone());
                *count += 1;
            }
            _ => {
                keys.clear();
                out.push(single(index, st));
            }
        }
        open = true;
        keys.insert(key);
    }
    out
}

fn single(index: usize, st: &Statement) -> Rewritten {
    Rewritten {
        first: index,
        count: 1,
        statement: st.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::postgres::Value;

    fn insert(id: i64, upsert: bool) -> Statement {
        let on_conflict = if upsert {
            OnConflict::DoUpdate {
                conflict_target: vec!["id".into()],
                set: vec!["v".into()],
            }
        } else {
            OnConflict::None
        };
        Statement::Insert(Insert {
            table: "t".into(),
            columns: vec!["id".into(), "v".into()],
            rows: vec![vec![Value::Int(id), Value::Int(id * 10)]],
            on_conflict,
        })
    }

    fn shape(r: &[Rewritten]) -> Vec<(usize, usize)> {
        r.iter().map(|r| (r.first, r.count)).collect()
    }

    #[test]
    fn plain_inserts_join_up_to_the_block_size_whatever_their_keys() {
        let mut batch: Vec<Statement> = (0..300).map(|i| insert(i, false)).collect();
        batch[5] = insert(1, false);
        let out = rewrite(&batch);
        assert_eq!(shape(&out), vec![(0, 128), (128, 128), (256, 44)]);
        let Statement::Insert(first) = &out[0].statement else {
            panic!("an insert")
        };
        assert_eq!(first.rows.len(), 128);
        assert_eq!(first.rows[5], vec![Value::Int(1), Value::Int(10)]);
    }

    #[test]
    fn an_upsert_run_is_cut_before_a_key_it_holds() {
        let batch: Vec<Statement> = [1, 2, 3, 2, 4, 1, 5, 4].map(|i| insert(i, true)).to_vec();
        // The second run starts afresh at the repeated 2: key 1 is new to it.
        assert_eq!(shape(&rewrite(&batch)), vec![(0, 3), (3, 4), (7, 1)]);
    }

    #[test]
    fn other_statements_and_shapes_end_a_run() {
        let delete = Statement::Delete {
            table: "t".into(),
            where_pk: vec![Value::Int(9)],
        };
        let nothing = Statement::Insert(Insert {
            on_conflict: OnConflict::DoNothing {
                conflict_target: None,
            },
            ..match insert(7, false) {
                Statement::Insert(i) => i,
                _ => unreachable!(),
            }
        });
        let batch = vec![
            insert(1, true),
            insert(2, true),
            delete,
            insert(3, true),
            insert(4, false),
            insert(5, false),
            nothing.clone(),
            nothing,
            insert(6, false),
        ];
        let out = rewrite(&batch);
        let expected = vec![(0, 2), (2, 1), (3, 1), (4, 2), (6, 1), (7, 1), (8, 1)];
        assert_eq!(shape(&out), expected);
        // A one-statement entry is the statement itself.
        assert_eq!(out[1].statement, batch[2]);
    }
}
