//! `eosim run` (scenarios against real services) and `eosim worker` (one process of such a
//! run), built without `--cfg madsim`.

use super::judge::exit_class;
use super::rundir::run_scenarios;
use super::{config_error, ExitClass, ImagesArgs, LazyfsArgs, RunArgs, WorkerArgs};
use crate::real::backend::Backend;
use crate::real::run::result::scenario_result;
use crate::real::run::worker::run_worker;
use crate::real::run::worker_spec::{Role, WorkerSpec};
use crate::real::run::workers::default_exe;
use crate::real::run::{run_real, RunOptions};
use crate::report::judge::expected_verdict;
use crate::report::ScenarioResult;
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};

/// Where `eosim run` looks for scenarios when none is given.
const REAL_SCENARIO_DIR: &str = "scenarios/real";

/// `eosim run`: each scenario once against real services, then the report.
pub(super) fn run(args: &RunArgs) -> ExitClass {
    let backend: Backend = match args.backend.parse() {
        Ok(b) => b,
        Err(e) => return config_error(e),
    };
    if backend == Backend::External && args.bootstrap_servers.is_none() {
        return config_error("--backend external needs --bootstrap-servers HOST:PORT,...");
    }
    let Some(exe) = default_exe() else {
        return config_error("cannot find the eosim binary to start workers from");
    };
    let scenarios = match load(&args.scenarios) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    crate::real::process::install_teardown_on_signal();
    let swept = crate::real::scratch::sweep_leftovers();
    if !swept.is_empty() {
        eprintln!(
            "eosim: removed {} scratch directory(ies) that killed runs left behind",
            swept.len()
        );
    }
    let code = run_scenarios(&args.out, &scenarios, |path, scenario, run_dir, build| {
        let options = RunOptions {
            backend,
            bootstrap_servers: args.bootstrap_servers.clone(),
            exe: exe.clone(),
            dir: run_dir.join(&scenario.name),
            verbose: true,
            seed: args.seed,
        };
        run_one(path, scenario, &options, build)
    });
    crate::real::container::close_adapter();
    code
}

fn load(given: &[PathBuf]) -> Result<Vec<(PathBuf, Scenario)>, String> {
    let paths = if given.is_empty() {
        let dir = Path::new(REAL_SCENARIO_DIR);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read {}/: {e} (pass --scenario)", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        paths
    } else {
        given.to_vec()
    };
    paths
        .into_iter()
        .map(|p| {
            Scenario::load(&p)
                .map(|s| (p, s))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn run_one(
    path: &Path,
    scenario: &Scenario,
    options: &RunOptions,
    build: &str,
) -> (ScenarioResult, ExitClass) {
    println!(
        "REAL scenario={} backend={} build={build} brokers={} seed={}",
        scenario.name,
        options.backend.name(),
        scenario.cluster.brokers,
        options.seed
    );
    let outcome = run_real(scenario, path, options);
    let history_path = options.dir.join("history.jsonl");
    if !outcome.history.ops.is_empty() {
        let written = std::fs::create_dir_all(&options.dir)
            .and_then(|()| std::fs::write(&history_path, outcome.history.to_jsonl()));
        if let Err(e) = written {
            eprintln!(
                "eosim: warning: cannot write {}: {e}",
                history_path.display()
            );
        }
    }
    let command = format!(
        "eosim run --backend {} --scenario {} --seed {}",
        options.backend.name(),
        path.display(),
        options.seed
    );
    let result = scenario_result(scenario, &outcome, &history_path, &command);
    let class = exit_class(&result, expected_verdict(scenario));
    print_end(&result, class);
    (result, class)
}

fn print_end(result: &ScenarioResult, class: ExitClass) {
    let word = match (class, result.verdict) {
        (ExitClass::Skipped, _) => "SKIPPED",
        (ExitClass::Expected, _) => "PASSED",
        _ => "FAILED",
    };
    let mut line = format!(
        "{word} scenario={} verdict={} faults={} wall_time={:.1}s",
        result.scenario,
        result.verdict.name(),
        result.faults_injected,
        result.wall_time_s
    );
    if let Some(m) = &result.measured {
        line.push_str(&format!(
            " records/s={:.1} rows/s={:.1} latency_ms p50={:.1} p95={:.1} p99={:.1}",
            m.records_per_s, m.rows_per_s, m.latency_ms_p50, m.latency_ms_p95, m.latency_ms_p99
        ));
    }
    println!("{line}");
    for note in &result.notes {
        println!("  note: {note}");
    }
}

/// `eosim worker`: one process of a real run, until its work is done or it is killed.
pub(super) fn worker(args: &WorkerArgs) -> ExitClass {
    let role = match Role::parse(&args.role) {
        Ok(r) => r,
        Err(e) => return config_error(e),
    };
    let mut connector_sets = Vec::new();
    for set in &args.set {
        match set.split_once('=') {
            Some((k, v)) => connector_sets.push((k.to_string(), v.to_string())),
            None => return config_error(format!("--set {set:?}: expected KEY=VALUE")),
        }
    }
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let spec = WorkerSpec {
        role,
        scenario,
        name: args.name.clone(),
        bootstrap: args.bootstrap.clone(),
        sink_dir: args.sink.clone(),
        epoch_ns: args.epoch_ns,
        id_from: args.id_from,
        id_to: args.id_to,
        connector_sets,
        arm_fault_point: args.arm_fault_point,
    };
    match run_worker(spec) {
        Ok(()) => ExitClass::Expected,
        Err(e) => {
            eprintln!("eosim worker: {e}");
            ExitClass::Crash
        }
    }
}

/// `eosim lazyfs`: the lossy file system until its `unmount` command
/// ([`crate::real::lazyfs`]).
pub(super) fn lazyfs(args: &LazyfsArgs) -> ExitClass {
    match crate::real::lazyfs::serve(&args.backing, &args.mount, &args.control) {
        Ok(()) => ExitClass::Expected,
        Err(e) => {
            eprintln!("eosim lazyfs: {e}");
            ExitClass::Crash
        }
    }
}

/// `eosim images`: builds the testcontainers backend's images, printing what each cost.
pub(super) fn images(args: &ImagesArgs) -> ExitClass {
    use crate::real::container::images;
    if let Err(e) = Backend::Testcontainers.check_available() {
        eprintln!("eosim images: {e}");
        return ExitClass::Config;
    }
    match images::build_all(&images::kafka_lib_dir(), args.force) {
        Ok(built) => {
            for b in built {
                let what = if b.built { "built" } else { "current" };
                println!("eosim images: {} {what} ({:.1} s)", b.tag, b.seconds);
            }
            ExitClass::Expected
        }
        Err(e) => {
            eprintln!("eosim images: {e}");
            ExitClass::Crash
        }
    }
}
