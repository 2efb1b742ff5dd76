//! `eosim report agreement --sim DIR --real DIR...`: the simulation's verdict per file
//! beside real runs of the same files ([`crate::report::agreement`]), written to
//! `OUT/<id>/agreement.md` and `agreement.json`, and printed.

use super::merge::{read_shards, shard_dirs};
use super::rundir::create_run_dir;
use super::{config_error, ExitClass};
use crate::report::agreement::{agreement, agreement_markdown, RunClass};
use clap::Args;
use std::path::PathBuf;

/// `eosim report agreement` arguments.
#[derive(Debug, Args)]
pub struct AgreementArgs {
    /// The simulation run (a run dir holding results.json, or a report dir whose `latest`
    /// is one).
    #[arg(long, value_name = "DIR")]
    pub sim: PathBuf,
    /// A real run (`eosim run`) of some of the same files; repeat for N runs.
    #[arg(long, value_name = "DIR", required = true)]
    pub real: Vec<PathBuf>,
    /// Where the agreement goes (`DIR/<id>/agreement.md` and `agreement.json`).
    #[arg(long, value_name = "DIR", default_value = "reports/agreement")]
    pub out: PathBuf,
}

/// Runs `eosim report agreement`. Exits 0 when every real run that tested a file agrees
/// or is explained as timing, 1 when one disagrees or crashed (to be explained by hand),
/// 2 on unreadable input.
pub fn agreement_command(args: &AgreementArgs) -> ExitClass {
    let sim = match read_shards(&shard_dirs(std::slice::from_ref(&args.sim))) {
        Ok(mut s) => s.remove(0),
        Err(e) => return config_error(e),
    };
    let reals = match read_shards(&shard_dirs(&args.real)) {
        Ok(r) => r,
        Err(e) => return config_error(e),
    };
    let a = agreement(&sim, &reals);
    let (_, dir) = match create_run_dir(&args.out) {
        Ok(r) => r,
        Err(e) => return config_error(format!("cannot create {}: {e}", args.out.display())),
    };
    let md = agreement_markdown(&a);
    let json = serde_json::to_string_pretty(&a).expect("the agreement serializes");
    for (name, text) in [("agreement.md", &md), ("agreement.json", &json)] {
        if let Err(e) = std::fs::write(dir.join(name), text) {
            return config_error(format!("cannot write {}: {e}", dir.join(name).display()));
        }
    }
    print!("{md}");
    println!("\nagreement: {}", dir.join("agreement.md").display());
    let counts = a.counts();
    let unexplained = [RunClass::Disagrees, RunClass::Crashed]
        .iter()
        .any(|k| counts.contains_key(k));
    if unexplained {
        ExitClass::Violated
    } else {
        ExitClass::Expected
    }
}
