//! A map that counts its changes, so a reader that copies it elsewhere can tell, in O(1),
//! whether anything changed since its last copy.
//!
//! The coordinators' state is mirrored into the internal topics' logs
//! ([`super::model`]'s coordinator log): after each request and tick the model appends a
//! record per transactional id and committed offset whose logged value changed. Scanning
//! every id and offset for that was about 7 % of a `p3-eos-swarm` seed's instructions
//! (callgrind, 2026-12-06), while most ticks change nothing. [`Versioned::version`] lets the
//! scan be skipped when nothing was touched. It is conservative: every mutable access
//! counts as a change, whether or not it changed a value.

use std::collections::BTreeMap;
use std::ops::Deref;

/// A `BTreeMap<K, V>` with a change counter. Reads go through [`Deref`]; every way to
/// change it ([`insert`](Versioned::insert), [`remove`](Versioned::remove),
/// [`get_mut`](Versioned::get_mut)) bumps [`version`](Versioned::version).
#[derive(Debug, Clone)]
pub struct Versioned<K, V> {
    map: BTreeMap<K, V>,
    version: u64,
}

impl<K, V> Default for Versioned<K, V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            version: 0,
        }
    }
}

impl<K, V> Deref for Versioned<K, V> {
    type Target = BTreeMap<K, V>;

    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

impl<K: Ord, V> Versioned<K, V> {
    /// Empty, at version 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many mutable accesses it has had: equal versions of one map mean equal contents.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// [`BTreeMap::insert`], counted as a change.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.version += 1;
        self.map.insert(key, value)
    }

    /// [`BTreeMap::remove`], counted as a change.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.version += 1;
        self.map.remove(key)
    }

    /// [`BTreeMap::get_mut`], counted as a change (found or not).
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.version += 1;
        self.map.get_mut(key)
    }
}

#[cfg(test)]
mod tests {
    use super::Versioned;

    #[test]
    fn every_mutable_access_bumps_the_version_and_reads_do_not() {
        let mut m: Versioned<String, u32> = Versioned::new();
        assert_eq!(m.version(), 0);
        m.insert("a".into(), 1);
        assert_eq!(m.version(), 1);
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.len(), 1);
        assert_eq!(m.version(), 1, "reads leave the version alone");
        *m.get_mut("a").unwrap() = 2;
        assert_eq!(m.version(), 2);
        assert_eq!(m["a"], 2);
        m.remove("a");
        assert_eq!(m.version(), 3);
        assert!(m.is_empty());
    }
}
