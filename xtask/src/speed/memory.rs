//! The `memory` part: `eosim soak` over many seeds of one scenario in one process, its
//! resident memory (`VmRSS`) after seed 100 and after the last, and the growth between
//! them per 1,000 seeds: what a seed leaves behind when it ends (issue 15: none).

use super::{mb, measure, stem, thousands, Table};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// The default scenario: Streams under a swarm of faults, which starts and kills the most
/// nodes and tasks per seed (brokers, instances, their transactions and rebalances).
pub(super) const SCENARIO: &str = "scenarios/p3-eos-swarm.toml";

/// What the soak printed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Soak {
    seeds: u64,
    rss_after_100_kib: f64,
    rss_at_end_kib: f64,
    seeds_per_s: f64,
    held: u64,
}

impl Soak {
    /// Resident memory gained from seed 100 to the last, per 1,000 seeds, KiB.
    fn growth_per_1000_kib(&self) -> f64 {
        (self.rss_at_end_kib - self.rss_after_100_kib) / (self.seeds - 100) as f64 * 1_000.0
    }
}

/// Soaks `scenario` for `seeds` seeds (more than 100); the section with the table.
pub(super) fn measure(binary: &Path, scenario: &Path, seeds: u64, out: &Path) -> Result<String> {
    let every = (seeds / 10).max(1);
    let mut cmd = Command::new(binary);
    cmd.arg("soak").arg("--scenario").arg(scenario).args([
        "--seeds",
        &seeds.to_string(),
        "--every",
        &every.to_string(),
    ]);
    let stdout = out.join(format!("{}.txt", stem(scenario)?));
    let cost = measure::run(&mut cmd, &stdout)?;
    if cost.code != 0 {
        bail!("eosim soak on {} exited {}", scenario.display(), cost.code);
    }
    let text = std::fs::read_to_string(&stdout)
        .with_context(|| format!("cannot read {}", stdout.display()))?;
    let soak = parse(&text, seeds).with_context(|| format!("{}", stdout.display()))?;
    let mut table = Table::new(&[
        "scenario (one process)",
        "seeds",
        "RSS after 100 seeds",
        &format!("RSS after {} seeds", thousands(seeds as f64)),
        "growth per 1,000 seeds",
        "seeds/s",
        "CPU per seed",
        "seeds that held",
    ]);
    table.push(vec![
        format!("`{}`", stem(scenario)?),
        thousands(soak.seeds as f64),
        mb(soak.rss_after_100_kib),
        mb(soak.rss_at_end_kib),
        mb(soak.growth_per_1000_kib()),
        format!("{:.1}", soak.seeds_per_s),
        format!("{:.1} ms", cost.cpu_s * 1_000.0 / seeds as f64),
        thousands(soak.held as f64),
    ]);
    Ok(format!(
        "### Memory (`eosim soak --seeds {seeds}`, one run)\n\n{table}\n\
         Every {every} seeds (KiB): {}\n",
        rss_series(&text).join(", ")
    ))
}

/// The soak's figures from its output.
fn parse(text: &str, seeds: u64) -> Result<Soak> {
    if seeds <= 100 {
        bail!("a soak of {seeds} seeds has no growth after seed 100");
    }
    let after = |key: &str| {
        measure::number(text, "soak scenario=", key).with_context(|| format!("no `{key}=`"))
    };
    Ok(Soak {
        seeds,
        rss_after_100_kib: after("rss_kib_after_100")?,
        rss_at_end_kib: after(&format!("rss_kib_after_{seeds}"))?,
        seeds_per_s: measure::number(text, "soak seeds=", "seeds_per_s")
            .context("no `seeds_per_s=`")?,
        held: measure::number(text, "soak classes", "holds").context("no `soak classes`")? as u64,
    })
}

/// `seeds=rss_kib` of every progress line.
fn rss_series(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("soak seeds="))
        .filter_map(|l| {
            Some(format!(
                "{}: {}",
                measure::field(l, "seeds")?,
                measure::field(l, "rss_kib")?
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "soak seeds=100 rss_kib=40000 seeds_per_s=20.0\n\
                          soak seeds=500 rss_kib=40400 seeds_per_s=21.0\n\
                          soak seeds=1000 rss_kib=40900 seeds_per_s=21.5\n\
                          soak scenario=p3 rss_kib_after_100=40000 rss_kib_after_1000=40900 \
                          ratio=1.02 growth_kib_per_seed=1.00\n\
                          soak classes crash=0 holds=998 invalid=0 stalled=2 unknown=0 \
                          sim_time_s=60000.000 wall_time_s=46.500\n";

    #[test]
    fn the_growth_counts_from_seed_100_and_scales_to_1000_seeds() {
        let soak = parse(OUTPUT, 1_000).unwrap();
        assert_eq!(soak.rss_after_100_kib, 40_000.0);
        assert_eq!(soak.rss_at_end_kib, 40_900.0);
        assert_eq!(soak.seeds_per_s, 21.5);
        assert_eq!(soak.held, 998);
        // 900 KiB over the 900 seeds after seed 100: 1,000 KiB per 1,000 seeds.
        assert_eq!(soak.growth_per_1000_kib(), 1_000.0);
    }

    #[test]
    fn the_end_is_read_for_the_seeds_asked_for() {
        assert!(parse(OUTPUT, 2_000).is_err());
        assert!(parse(OUTPUT, 100).is_err());
    }

    #[test]
    fn the_series_lists_each_progress_line() {
        assert_eq!(
            rss_series(OUTPUT),
            ["100: 40000", "500: 40400", "1000: 40900"]
        );
    }
}
