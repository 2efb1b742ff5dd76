//! The regression corpus (`--corpus DIR`): seeds that once failed a scenario expected to
//! hold, kept as `DIR/<scenario>.seeds` (one seed a line, `#` comments), run before the
//! scenario's own seeds on every later run, and added to whenever a run finds new ones. A
//! nightly run keeps the directory between runs (a CI cache), so what one night found the
//! next night tries first.

use crate::report::{ScenarioResult, SeedClass, Verdict};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// `DIR/<scenario>.seeds`.
pub fn corpus_file(dir: &Path, scenario: &str) -> PathBuf {
    dir.join(format!("{scenario}.seeds"))
}

/// The corpus seeds of `scenario` (none when it has no file), in file order.
///
/// # Errors
/// The file cannot be read, or a line is neither a seed, blank nor a `#` comment (the
/// message names the file and line).
pub fn read_seeds(dir: &Path, scenario: &str) -> Result<Vec<u64>, String> {
    let file = corpus_file(dir, scenario);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let mut seeds = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let seed = line.parse().map_err(|_| {
            format!(
                "{}:{}: `{line}` is not a seed (one unsigned integer a line)",
                file.display(),
                n + 1
            )
        })?;
        seeds.push(seed);
    }
    Ok(seeds)
}

/// The seeds a result adds to the corpus: those that did not hold in a scenario expected
/// to hold (an expected violation's seeds are its evidence, not regressions).
pub fn failing_seeds(result: &ScenarioResult) -> Vec<u64> {
    let Some(ledger) = &result.ledger else {
        return Vec::new();
    };
    if ledger.expected != Verdict::Holds {
        return Vec::new();
    }
    let failing = ledger.seeds.iter().filter(|s| s.class != SeedClass::Holds);
    failing.map(|s| s.seed).collect()
}

/// Adds `seeds` to `scenario`'s corpus file, keeping the ones it has; writes nothing when
/// every seed is already there. Returns how many were new.
///
/// # Errors
/// The directory or file cannot be read or written.
pub fn add_seeds(dir: &Path, scenario: &str, seeds: &[u64]) -> Result<usize, String> {
    let mut all: BTreeSet<u64> = read_seeds(dir, scenario)?.into_iter().collect();
    let before = all.len();
    all.extend(seeds);
    let new = all.len() - before;
    if new == 0 {
        return Ok(0);
    }
    let file = corpus_file(dir, scenario);
    let mut text = format!("# Seeds of `{scenario}` that failed a claim expected to hold.\n");
    for seed in all {
        text.push_str(&format!("{seed}\n"));
    }
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&file, text))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_added_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("eosim-corpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(read_seeds(&dir, "x").unwrap(), Vec::<u64>::new());
        assert_eq!(add_seeds(&dir, "x", &[7, 3]).unwrap(), 2);
        assert_eq!(add_seeds(&dir, "x", &[3]).unwrap(), 0);
        assert_eq!(add_seeds(&dir, "x", &[5]).unwrap(), 1);
        assert_eq!(read_seeds(&dir, "x").unwrap(), vec![3, 5, 7]);
        std::fs::write(corpus_file(&dir, "y"), "4\nfour\n").unwrap();
        let e = read_seeds(&dir, "y").unwrap_err();
        assert!(e.contains("y.seeds:2") && e.contains("`four`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
