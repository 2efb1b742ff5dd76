//! `--partition K/N`: a deterministic split of a run's (scenario, seed) space into N
//! disjoint shards, as nextest's `hash:K/N` splits tests: each pair goes to the shard its
//! hash picks, so N CI machines that run shards 1..=N of one command run every pair exactly
//! once, whatever the machines and however many jobs each uses.

use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// Shard `index` of `count` (1-based, `1/1` being the whole run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// This shard, 1..=count.
    pub index: u64,
    /// Shards in all, at least 1.
    pub count: u64,
}

/// A `--partition` value that is not `K/N` with 1 ≤ K ≤ N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--partition `{given}`: expected K/N with 1 <= K <= N (as in 2/4), {why}")]
pub struct PartitionError {
    given: String,
    why: &'static str,
}

impl FromStr for Partition {
    type Err = PartitionError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let error = |why| PartitionError {
            given: given.to_string(),
            why,
        };
        // nextest spells it `hash:K/N`; accept that too.
        let text = given.strip_prefix("hash:").unwrap_or(given);
        let (k, n) = text.split_once('/').ok_or_else(|| error("no `/`"))?;
        let index: u64 = k.trim().parse().map_err(|_| error("K is not a number"))?;
        let count: u64 = n.trim().parse().map_err(|_| error("N is not a number"))?;
        if count == 0 || index == 0 || index > count {
            return Err(error("K is out of range"));
        }
        Ok(Self { index, count })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Partition {
    /// Whether seed `seed` of scenario `scenario` belongs to this shard: the first 8 bytes of
    /// SHA-256(`scenario/seed`), big-endian, modulo `count`, is `index - 1`.
    pub fn contains(&self, scenario: &str, seed: u64) -> bool {
        let digest = Sha256::digest(format!("{scenario}/{seed}").as_bytes());
        let mut head = [0u8; 8];
        head.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(head) % self.count == self.index - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_and_cover_every_pair() {
        let shards: Vec<Partition> = (1..=3).map(|k| format!("{k}/3").parse().unwrap()).collect();
        let mut sizes = [0u32; 3];
        for scenario in ["a", "b-duplicates", "c"] {
            for seed in 1..=100 {
                let owners: Vec<usize> = (0..3)
                    .filter(|&k| shards[k].contains(scenario, seed))
                    .collect();
                assert_eq!(owners.len(), 1, "{scenario}/{seed} owned by {owners:?}");
                sizes[owners[0]] += 1;
            }
        }
        // A hash, not a round robin by position: every shard gets a fair share of 300.
        assert!(sizes.iter().all(|&n| (60..=140).contains(&n)), "{sizes:?}");
        let whole: Partition = "1/1".parse().unwrap();
        assert!(whole.contains("a", 7));
    }

    #[test]
    fn bad_partitions_name_what_is_wrong() {
        for bad in ["0/2", "3/2", "2", "a/b", "1/0"] {
            let e = bad.parse::<Partition>().unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("K/N"), "{e}");
        }
        assert_eq!("hash:2/4".parse::<Partition>().unwrap().to_string(), "2/4");
    }
}
