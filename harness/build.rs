//! Sets `EOSIM_BUILD` (the build id every run header prints, `cli::output::build_id`) for
//! every build of the harness, `cargo xtask` or plain `cargo build --release` alike: the
//! caller's `EOSIM_BUILD` if set, else the git commit (`--short=12`) with `-dirty` when
//! tracked files differ from it, else `unknown` (no git, or not a checkout).
//!
//! The script runs again when the checked-out commit moves (`HEAD` and the branch's ref) or
//! a source file of the workspace's crates changes (a change that may make the tree dirty).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=EOSIM_BUILD");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../sim/src");
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        let head_ref = git(&["rev-parse", "--symbolic-full-name", "HEAD"]);
        let common = git(&["rev-parse", "--git-common-dir"]);
        if let (Some(head_ref), Some(common)) = (head_ref, common) {
            let path = Path::new(&common).join(head_ref);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let id = std::env::var("EOSIM_BUILD").ok().unwrap_or_else(build_id);
    println!("cargo:rustc-env=EOSIM_BUILD={id}");
}

fn build_id() -> String {
    let Some(sha) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let status = git(&["status", "--porcelain", "--untracked-files=no"]);
    if status.is_some_and(|s| !s.is_empty()) {
        format!("{sha}-dirty")
    } else {
        sha
    }
}
