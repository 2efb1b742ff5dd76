//! One partition across its replicas: the controller's record of it (leader, leader epoch,
//! ISR) and each replica's own view and log (models-reference A.1–A.6).
//!
//! Each replica acts on what *it* believes (`view_*`): a broker cut off from the controller
//! keeps believing it leads and keeps accepting acks=1 writes, exactly how acked writes get
//! lost in Kafka. Views are refreshed from the controller only over a working controller link
//! (KRaft brokers replay the metadata log). ISR changes go through the controller
//! (`AlterPartition`), which accepts them only from the leader of the current epoch.

use super::log::{truncation_offset, Batch, PartitionLog};
use super::types::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the leader knows of one follower from its fetches (`ReplicaState` in Kafka).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    /// Fetch offset of the follower's last fetch (its LEO then); -1 while unknown.
    pub leo: Offset,
    /// `lastCaughtUpTimeMs`; `None` = never caught up under this leader.
    pub last_caught_up_ms: Option<TimeMs>,
    /// Time of the last fetch.
    pub last_fetch_ms: TimeMs,
    /// Leader LEO at the last fetch.
    pub last_fetch_leader_leo: Offset,
}

impl Remote {
    fn unknown(caught_up_ms: Option<TimeMs>) -> Self {
        Self {
            leo: -1,
            last_caught_up_ms: caught_up_ms,
            last_fetch_ms: 0,
            last_fetch_leader_leo: -1,
        }
    }

    /// `ReplicaState.isCaughtUp`.
    fn is_caught_up(&self, leader_leo: Offset, now: TimeMs, lag_max_ms: u64) -> bool {
        self.leo == leader_leo
            || self
                .last_caught_up_ms
                .is_some_and(|t| now.saturating_sub(t) <= lag_max_ms)
    }
}

/// One broker's replica of the partition.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    pub broker: BrokerId,
    pub log: PartitionLog,
    /// Leader as this broker last learned it from the controller.
    pub view_leader: Option<BrokerId>,
    /// Leader epoch as this broker last learned it; -1 = nothing learned since (re)start.
    pub view_epoch: i32,
    /// ISR as this broker last learned it (a leader uses it for HW and min ISR).
    pub view_isr: Vec<BrokerId>,
    /// Follower: epoch for which the divergence check already ran.
    pub truncated_for_epoch: Option<i32>,
    /// Leader only: the followers' fetch state.
    pub remotes: BTreeMap<BrokerId, Remote>,
    /// [`Partition::version`] this view was taken at; `u64::MAX` = none.
    pub view_version: u64,
    /// Leader only: when this broker learned it leads at its view epoch, the start of a
    /// coordinator's load of an internal partition (see
    /// `ClusterConfig::coordinator_load_ms`); `None` for the leader a topic was created with
    /// (nothing to load) and for followers.
    pub leader_since_ms: Option<TimeMs>,
}

impl Replica {
    fn new(broker: BrokerId) -> Self {
        Self {
            broker,
            log: PartitionLog::new(),
            view_leader: None,
            view_epoch: -1,
            view_isr: Vec::new(),
            truncated_for_epoch: None,
            remotes: BTreeMap::new(),
            view_version: u64::MAX,
            leader_since_ms: None,
        }
    }

    /// Whether this broker believes it leads the partition.
    pub fn believes_leader(&self) -> bool {
        self.view_leader == Some(self.broker)
    }

    /// Forgets everything learned from the controller (a restart).
    pub fn forget_views(&mut self) {
        self.view_leader = None;
        self.view_epoch = -1;
        self.view_isr.clear();
        self.truncated_for_epoch = None;
        self.remotes.clear();
        self.view_version = u64::MAX;
    }
}

/// What a tick needs to know about brokers, sampled once per tick (ids are 1-based).
pub(crate) struct Reach {
    pub now: TimeMs,
    /// Per broker: runs (alive in the model and up in the environment).
    pub up: Vec<bool>,
    /// Per broker: runs and reaches the controller.
    pub controller: Vec<bool>,
    /// Per broker: fenced by the controller.
    pub fenced: Vec<bool>,
    /// `links[(from-1)*n + (to-1)]`: `from` reaches `to`.
    pub links: Vec<bool>,
    pub lag_max_ms: u64,
    /// KIP-966 / KAFKA-15583 (3.7+): no HW advance while the ISR is below min ISR.
    pub hold_hw_under_min_isr: bool,
    /// Changes whenever the sampled facts above (not `now`) differ from the previous tick's.
    pub env_epoch: u64,
    /// Whether quiet partitions take the fast path (off only to test that it changes
    /// nothing).
    pub fast_paths: bool,
}

impl Reach {
    pub fn up(&self, b: BrokerId) -> bool {
        self.up[(b - 1) as usize]
    }
    pub fn controller(&self, b: BrokerId) -> bool {
        self.controller[(b - 1) as usize]
    }
    pub fn fenced(&self, b: BrokerId) -> bool {
        self.fenced[(b - 1) as usize]
    }
    /// Both directions work (a fetch is a request and a response).
    pub fn linked(&self, a: BrokerId, b: BrokerId) -> bool {
        let n = self.up.len();
        let (a, b) = ((a - 1) as usize, (b - 1) as usize);
        self.links[a * n + b] && self.links[b * n + a]
    }
}

/// One partition: assignment, controller state and replicas.
#[derive(Debug, Clone)]
pub(crate) struct Partition {
    /// Replicas in assignment (preference) order.
    pub replicas: Vec<Replica>,
    /// Controller: current leader, `None` while offline.
    pub leader: Option<BrokerId>,
    /// Controller: current leader epoch.
    pub leader_epoch: i32,
    /// Controller: committed ISR, in assignment order.
    pub isr: Vec<BrokerId>,
    /// Effective `min.insync.replicas` (min of the config and the replication factor).
    pub min_isr: usize,
    /// Whether a replica keeps its producer state when it becomes leader (true in Kafka;
    /// false is the F10 bug switch, `ClusterConfig::producer_state_survives_failover`).
    pub keep_producer_state: bool,
    /// Bumped at every change of leader, epoch or ISR, so replicas can tell a stale view
    /// without comparing it (the partition epoch of KRaft's `PartitionRecord`).
    pub version: u64,
    /// Set while the partition is quiet (see [`Partition::tick_quiet`]) and nothing has
    /// changed since: ticks then only move the followers' fetch times, kept here lazily.
    quiet: Option<QuietStreak>,
}

/// A run of quiet ticks under one environment sample and one partition version.
#[derive(Debug, Clone, Copy)]
struct QuietStreak {
    env_epoch: u64,
    version: u64,
    /// The replica that led during the streak: the one whose remotes' fetch times it kept
    /// (the controller may have moved or dropped the leader since).
    leader: usize,
    /// Time of the latest quiet tick: the followers' last fetch (and caught-up) time.
    last_tick_ms: TimeMs,
    /// Time of the tick that began the streak.
    since_ms: TimeMs,
    /// Bit `i` set: replica `i` is a follower in the ISR, caught up, whose fetch times the
    /// streak keeps. Followers outside it are down or cut off from the leader: they do not
    /// fetch, so nothing of theirs moves.
    fetching: u64,
}

impl Partition {
    /// A new partition led by the first replica at epoch 0 with every replica in the ISR;
    /// every replica learns that at once (topic creation).
    pub fn new(assignment: &[BrokerId], min_insync_replicas: u32, now: TimeMs) -> Self {
        assert!(
            !assignment.is_empty(),
            "a partition has at least one replica"
        );
        let mut p = Self {
            replicas: assignment.iter().map(|&b| Replica::new(b)).collect(),
            leader: Some(assignment[0]),
            leader_epoch: 0,
            isr: assignment.to_vec(),
            min_isr: (min_insync_replicas.max(1) as usize).min(assignment.len()),
            version: 0,
            quiet: None,
            keep_producer_state: true,
        };
        for i in 0..p.replicas.len() {
            p.apply_view(i, now);
        }
        p
    }

    /// Broker ids in assignment order.
    pub fn assignment(&self) -> Vec<BrokerId> {
        self.replicas.iter().map(|r| r.broker).collect()
    }

    /// Index of broker `b`'s replica.
    pub fn index_of(&self, b: BrokerId) -> Option<usize> {
        self.replicas.iter().position(|r| r.broker == b)
    }

    /// Broker `b`'s replica.
    pub fn replica(&self, b: BrokerId) -> Option<&Replica> {
        self.replicas.iter().find(|r| r.broker == b)
    }

    /// The controller's leader's replica.
    pub fn leader_replica(&self) -> Option<&Replica> {
        self.leader.and_then(|l| self.replica(l))
    }

    // ---------------------------------------------------------------- controller side

    /// KRaft election (`PartitionChangeBuilder`): first replica in assignment order that is
    /// in the ISR and unfenced; else, if allowed, the first unfenced replica (unclean, the
    /// ISR becomes just it); else offline. The epoch bumps whenever the leader changes.
    pub fn elect(&mut self, fenced: &dyn Fn(BrokerId) -> bool, unclean_allowed: bool) {
        let order = self.assignment();
        let clean = order
            .iter()
            .copied()
            .find(|b| self.isr.contains(b) && !fenced(*b));
        let chosen = match clean {
            Some(b) => Some(b),
            None if unclean_allowed => {
                let b = order.iter().copied().find(|b| !fenced(*b));
                if let Some(b) = b {
                    crate::mark!("kafka:unclean-leader-election");
                    self.isr = vec![b];
                }
                b
            }
            None => None,
        };
        if chosen.is_none() && self.leader.is_some() {
            crate::mark!("kafka:partition-offline");
        }
        if chosen != self.leader {
            self.leader = chosen;
            self.leader_epoch += 1;
        }
        self.version += 1;
    }

    /// The controller fences broker `b`: it leaves the ISR unless it is the last member, and
    /// if it led, a new leader is elected (possibly none).
    pub fn on_broker_fenced(
        &mut self,
        b: BrokerId,
        fenced: &dyn Fn(BrokerId) -> bool,
        unclean: bool,
    ) {
        if self.index_of(b).is_none() {
            return;
        }
        if self.isr.len() > 1 && self.isr.contains(&b) {
            crate::mark!("kafka:isr-shrink");
        }
        if self.isr.len() > 1 {
            self.isr.retain(|&m| m != b);
            self.version += 1;
        }
        if self.leader == Some(b) {
            self.elect(fenced, unclean);
        }
    }

    /// Broker `b` is unfenced: an offline partition may get a leader again.
    pub fn on_broker_unfenced(
        &mut self,
        b: BrokerId,
        fenced: &dyn Fn(BrokerId) -> bool,
        unclean: bool,
    ) {
        if self.index_of(b).is_some() && self.leader.is_none() {
            self.elect(fenced, unclean);
        }
    }

    // ------------------------------------------------------------------ broker side

    /// Replica `i` learns the controller's current state (leader, epoch, ISR).
    pub fn apply_view(&mut self, i: usize, now: TimeMs) {
        let (leader, epoch, isr) = (self.leader, self.leader_epoch, self.isr.clone());
        let version = self.version;
        let keep_producer_state = self.keep_producer_state;
        let others: Vec<BrokerId> = self
            .replicas
            .iter()
            .map(|r| r.broker)
            .filter(|&b| b != self.replicas[i].broker)
            .collect();
        let r = &mut self.replicas[i];
        if r.view_leader != leader || r.view_epoch != epoch {
            r.view_leader = leader;
            r.view_epoch = epoch;
            r.truncated_for_epoch = None;
            r.remotes.clear();
            r.leader_since_ms = (leader == Some(r.broker) && epoch > 0).then_some(now);
            if leader == Some(r.broker) {
                // `Partition.makeLeader`: assign the epoch at the LEO, reset remote states;
                // ISR members count as caught up now.
                r.log.assign_epoch(epoch);
                if !keep_producer_state {
                    // F10 bug switch: the new leader starts with no producer state.
                    crate::mark!("kafka:producer-state-forgotten-on-failover");
                    r.log.producer_state_mut().forget_producers();
                }
                for b in others {
                    let caught_up = isr.contains(&b).then_some(now);
                    r.remotes.insert(b, Remote::unknown(caught_up));
                }
            }
        }
        r.view_isr = isr;
        r.view_version = version;
    }

    /// Every replica whose broker reaches the controller refreshes its view.
    pub fn sync_views(&mut self, reach: &Reach) {
        for i in 0..self.replicas.len() {
            let r = &self.replicas[i];
            if r.view_version != self.version && reach.controller(r.broker) {
                self.apply_view(i, reach.now);
            }
        }
    }

    /// One round of follower fetches, then each believed leader's ISR shrink and HW update.
    pub fn tick(&mut self, reach: &Reach) {
        if let Some(q) = &mut self.quiet {
            if q.env_epoch == reach.env_epoch && q.version == self.version {
                q.last_tick_ms = reach.now;
                return;
            }
        }
        self.touch();
        self.sync_views(reach);
        if let Some((leader, fetching)) = reach.fast_paths.then(|| self.tick_quiet(reach)).flatten()
        {
            self.quiet = Some(QuietStreak {
                env_epoch: reach.env_epoch,
                version: self.version,
                leader,
                last_tick_ms: reach.now,
                since_ms: reach.now,
                fetching,
            });
            return;
        }
        for fi in 0..self.replicas.len() {
            let f = &self.replicas[fi];
            let Some(l) = f.view_leader else { continue };
            if l == f.broker || !reach.up(f.broker) || !reach.up(l) {
                continue;
            }
            if !reach.linked(f.broker, l) {
                continue;
            }
            let Some(li) = self.index_of(l) else { continue };
            let leader = &self.replicas[li];
            // The leader answers only a fetch of its own current epoch (KIP-320).
            if !leader.believes_leader() || leader.view_epoch != f.view_epoch {
                continue;
            }
            self.follower_fetch(fi, li, reach);
        }
        for li in 0..self.replicas.len() {
            if self.replicas[li].believes_leader() && reach.up(self.replicas[li].broker) {
                self.maybe_shrink_isr(li, reach);
                self.maybe_increment_hw(li, reach);
            }
        }
    }

    /// A coordinator's `acks=-1` append, synchronously: `records` appended as a plain batch
    /// at `leader` (which must believe it leads) and every follower of its ISR that is
    /// `alive` and follows it in its epoch copies the leader's log up to the new end, as
    /// the fetch that Kafka's append waits for would (`coordinator_log`). The leader's
    /// view of its followers is left to their next fetch.
    pub fn append_replicated_now(
        &mut self,
        leader: BrokerId,
        records: Arc<Vec<Record>>,
        alive: &dyn Fn(BrokerId) -> bool,
    ) {
        let li = self.index_of(leader).expect("the leader is a replica");
        let l = &mut self.replicas[li];
        assert!(l.believes_leader(), "only a leader appends");
        let (epoch, isr) = (l.view_epoch, l.view_isr.clone());
        l.log
            .append_as_leader(epoch, ProducerBatchHeader::NONE, false, records);
        for b in isr.into_iter().filter(|&b| b != leader && alive(b)) {
            let Some(fi) = self.index_of(b) else { continue };
            let f = &self.replicas[fi];
            if f.view_leader != Some(leader) || f.view_epoch != epoch {
                continue;
            }
            self.reconcile_with_leader(fi, li);
            self.copy_from_leader(fi, li);
        }
    }

    /// Whether one quiet streak has lasted since a tick before `now`: then nothing about the
    /// partition (leader, epochs, views, ISR, logs) nor whether its replicas run has changed
    /// since that tick, as anything that would ends the streak ([`Partition::touch`], a new
    /// [`Partition::version`] or environment sample).
    pub fn quiet_since_before(&self, now: TimeMs) -> bool {
        self.quiet.as_ref().is_some_and(|q| q.since_ms < now)
    }

    /// Ends a quiet streak: writes the followers' fetch times it kept lazily. Must precede
    /// any change to the partition made outside [`Partition::tick`] (appends, crashes,
    /// restarts); controller changes bump [`Partition::version`] instead.
    pub fn touch(&mut self) {
        let Some(q) = self.quiet.take() else { return };
        self.fetched_at(q.leader, q.fetching, q.last_tick_ms);
    }

    /// Sets what a fetch at the leader's LEO at `now` sets in the leader `li`'s remote state
    /// of each follower in `fetching` (bit `i`: replica `i`).
    fn fetched_at(&mut self, li: usize, fetching: u64, now: TimeMs) {
        let leo = self.replicas[li].log.log_end_offset();
        for i in 0..self.replicas.len() {
            if fetching & (1 << i) == 0 {
                continue;
            }
            let b = self.replicas[i].broker;
            let remote = self.replicas[li]
                .remotes
                .get_mut(&b)
                .expect("a caught-up follower has fetched");
            remote.last_caught_up_ms = Some(now);
            remote.last_fetch_ms = now;
            remote.last_fetch_leader_leo = leo;
        }
    }

    /// Fast path for a partition with nothing to do: the leader runs, has HW = LEO and knows
    /// the current epoch and ISR, and every other replica either
    /// - runs, reaches the leader, is in the ISR, has the leader's LEO and HW and knows the
    ///   current epoch (a fetch would only move its fetch times, which this sets), or
    /// - cannot fetch: it is down, or runs following the leader but is cut off from it; and
    ///   if it is in the ISR the leader last saw it at its LEO.
    ///
    /// A tick would then change nothing but the fetching followers' fetch times: the others
    /// do not fetch (`tick` skips a follower that is down or cut off) and none acts as a
    /// leader; the leader does not shrink the ISR (`maybe_shrink_isr` drops only a member
    /// behind its LEO) nor move the HW (it is the LEO and the minimum over the ISR's LEOs).
    /// Returns the leader's index and the fetching followers (bit `i`: replica `i`), or
    /// `None`, nothing touched, when any of that does not hold.
    fn tick_quiet(&mut self, reach: &Reach) -> Option<(usize, u64)> {
        let l = self.leader?;
        let li = self.index_of(l)?;
        let epoch = self.leader_epoch;
        let leader = &self.replicas[li];
        let (leo, hw) = (leader.log.log_end_offset(), leader.log.high_watermark());
        let current = |r: &Replica| r.view_version == self.version;
        if !leader.believes_leader() || !current(leader) || leader.view_epoch != epoch || hw != leo
        {
            return None;
        }
        if leader.view_isr != self.isr || !reach.up(l) || self.replicas.len() > 64 {
            return None;
        }
        let mut fetching = 0u64;
        for (i, r) in self.replicas.iter().enumerate().filter(|(i, _)| *i != li) {
            let b = r.broker;
            let in_isr = self.isr.contains(&b);
            let seen_at_leo = || leader.remotes.get(&b).is_some_and(|m| m.leo == leo);
            if !reach.up(b) || !reach.linked(b, l) {
                // Cannot fetch from the leader. Quiet unless it might fetch from another
                // broker or act as a leader (up, following someone else), or the ISR might
                // shrink by it or it holds the HW (a member the leader saw behind).
                let elsewhere = reach.up(b) && r.view_leader != Some(l);
                if elsewhere || (in_isr && !seen_at_leo()) {
                    return None;
                }
                continue;
            }
            let synced = in_isr
                && current(r)
                && r.view_leader == Some(l)
                && r.view_epoch == epoch
                && r.truncated_for_epoch == Some(epoch)
                && r.log.log_end_offset() == leo
                && r.log.high_watermark() == hw
                && seen_at_leo();
            if !synced {
                return None;
            }
            fetching |= 1 << i;
        }
        self.fetched_at(li, fetching, reach.now);
        Some((li, fetching))
    }

    /// Follower `fi` fetches from leader `li`: divergence check once per epoch, then copy
    /// the suffix it lacks (`ReplicaFetcherThread`, `Partition.updateFollowerFetchState`).
    fn follower_fetch(&mut self, fi: usize, li: usize, reach: &Reach) {
        let now = reach.now;
        self.reconcile_with_leader(fi, li);
        let fb = self.replicas[fi].broker;
        let fetch_offset = self.replicas[fi].log.log_end_offset();
        let leader = &mut self.replicas[li];
        let leader_leo = leader.log.log_end_offset();
        assert!(
            fetch_offset <= leader_leo,
            "a follower is never ahead of its leader after truncation"
        );
        let remote = leader.remotes.entry(fb).or_insert(Remote::unknown(None));
        if fetch_offset >= leader_leo {
            remote.last_caught_up_ms = Some(now);
        } else if fetch_offset >= remote.last_fetch_leader_leo && remote.last_fetch_leader_leo >= 0
        {
            remote.last_caught_up_ms = Some(
                remote
                    .last_fetch_ms
                    .max(remote.last_caught_up_ms.unwrap_or(0)),
            );
        }
        remote.leo = fetch_offset;
        remote.last_fetch_ms = now;
        remote.last_fetch_leader_leo = leader_leo;
        self.maybe_expand_isr(li, fb, reach);
        self.maybe_increment_hw(li, reach);
        let leader_hw = self.replicas[li].log.high_watermark();
        self.copy_from_leader(fi, li);
        self.replicas[fi].log.set_follower_high_watermark(leader_hw);
    }

    /// The follower at `fi`, in its first fetch of its epoch from the leader at `li`,
    /// truncates to where its log diverges from the leader's (KIP-101/279).
    fn reconcile_with_leader(&mut self, fi: usize, li: usize) {
        let epoch = self.replicas[fi].view_epoch;
        if self.replicas[fi].truncated_for_epoch == Some(epoch) {
            return;
        }
        let t = truncation_offset(&self.replicas[fi].log, &self.replicas[li].log);
        if t < self.replicas[fi].log.log_end_offset() {
            crate::mark!("kafka:follower-truncated");
        }
        self.replicas[fi].log.truncate_to(t);
        self.replicas[fi].truncated_for_epoch = Some(epoch);
    }

    /// The follower at `fi` appends the leader's (at `li`) batches past its log end, and
    /// first takes the leader's log start offset (the fetch response's `logStartOffset`,
    /// `ReplicaFetcherThread.processPartitionData`).
    fn copy_from_leader(&mut self, fi: usize, li: usize) {
        let leader_start = self.replicas[li].log.log_start_offset();
        self.follow_log_start(fi, leader_start);
        let leader = &self.replicas[li].log;
        let from = leader.batch_index_from(self.replicas[fi].log.log_end_offset());
        let copied: Vec<Batch> = leader.batches()[from..].to_vec();
        for batch in copied {
            self.replicas[fi].log.append_batch(batch);
        }
    }

    /// The follower at `fi` takes its leader's log start offset `leader_start`: raised to
    /// it, or, when its log ends below it, started again there (`handleOutOfRangeError`).
    fn follow_log_start(&mut self, fi: usize, leader_start: Offset) {
        let log = &mut self.replicas[fi].log;
        if log.log_end_offset() < leader_start {
            crate::mark!("kafka:follower-restarted-at-leader-log-start");
            log.truncate_fully_and_start_at(leader_start);
        } else {
            log.increment_log_start_offset(leader_start);
        }
    }

    /// DeleteRecords at the leader (KIP-107, `ReplicaManager.deleteRecords`,
    /// `Partition.deleteRecordsOnLeader`): the leader's log start offset rises to `before`
    /// (`None`: the HW, Java's `RecordsToDelete.beforeOffset(-1)`), and every live follower
    /// of its ISR that follows it in its epoch takes the new start at once, as the
    /// `DelayedDeleteRecords` the response waits for would see them do on their next fetch.
    /// Returns `(old log start, new log start)`.
    ///
    /// # Errors
    /// `LEADER_NOT_AVAILABLE` while offline, `NOT_LEADER_OR_FOLLOWER` when the controller's
    /// leader is down or does not believe it leads, `OFFSET_OUT_OF_RANGE` for an offset
    /// past the HW ("Cannot increment the log start offset ... larger than the high
    /// watermark").
    pub fn delete_records(
        &mut self,
        before: Option<Offset>,
        alive: &dyn Fn(BrokerId) -> bool,
    ) -> Result<(Offset, Offset), KafkaError> {
        let leader = self.leader.ok_or(KafkaError::LeaderNotAvailable)?;
        let li = self.index_of(leader).expect("the leader is a replica");
        let l = &self.replicas[li];
        if !alive(leader) || !l.believes_leader() {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        let hw = l.log.high_watermark();
        let offset = before.unwrap_or(hw);
        if offset > hw || offset < 0 {
            return Err(KafkaError::OffsetOutOfRange);
        }
        self.touch();
        let old = self.replicas[li].log.log_start_offset();
        self.replicas[li].log.increment_log_start_offset(offset);
        let (epoch, isr) = (
            self.replicas[li].view_epoch,
            self.replicas[li].view_isr.clone(),
        );
        for b in isr.into_iter().filter(|&b| b != leader && alive(b)) {
            let Some(fi) = self.index_of(b) else { continue };
            let f = &self.replicas[fi];
            if f.view_leader == Some(leader) && f.view_epoch == epoch {
                self.follow_log_start(fi, offset);
            }
        }
        Ok((old, old.max(offset)))
    }

    /// Whether the believed leader at `li` may change the ISR: it must be the controller's
    /// leader of the current epoch and reach the controller (`AlterPartition`).
    fn may_alter_isr(&self, li: usize, reach: &Reach) -> bool {
        let r = &self.replicas[li];
        self.leader == Some(r.broker)
            && self.leader_epoch == r.view_epoch
            && reach.controller(r.broker)
    }

    /// `Partition.maybeExpandIsr` / `isFollowerInSync` (A.5).
    fn maybe_expand_isr(&mut self, li: usize, follower: BrokerId, reach: &Reach) {
        let leader = &self.replicas[li];
        if leader.view_isr.contains(&follower) || reach.fenced(follower) {
            return;
        }
        let Some(remote) = leader.remotes.get(&follower) else {
            return;
        };
        let epoch_start = leader
            .log
            .epoch_start_offset(leader.view_epoch)
            .unwrap_or(0);
        let in_sync = remote.leo >= leader.log.high_watermark() && remote.leo >= epoch_start;
        if !in_sync || !self.may_alter_isr(li, reach) {
            return;
        }
        crate::mark!("kafka:isr-expand");
        let order = self.assignment();
        self.isr.push(follower);
        self.isr.sort_by_key(|b| order.iter().position(|x| x == b));
        self.version += 1;
        self.apply_view(li, reach.now);
    }

    /// `Partition.maybeShrinkIsr` / `getOutOfSyncReplicas` (A.5).
    fn maybe_shrink_isr(&mut self, li: usize, reach: &Reach) {
        let leader = &self.replicas[li];
        let leo = leader.log.log_end_offset();
        let out: Vec<BrokerId> = leader
            .view_isr
            .iter()
            .copied()
            .filter(|&b| b != leader.broker)
            .filter(|b| {
                leader.remotes.get(b).is_some_and(|r| {
                    let stale = r
                        .last_caught_up_ms
                        .map_or(reach.now, |t| reach.now.saturating_sub(t));
                    r.leo != leo && stale > reach.lag_max_ms
                })
            })
            .collect();
        if out.is_empty() || !self.may_alter_isr(li, reach) {
            return;
        }
        crate::mark!("kafka:isr-shrink");
        self.isr.retain(|b| !out.contains(b));
        self.version += 1;
        self.apply_view(li, reach.now);
    }

    /// `Partition.maybeIncrementLeaderHW` (A.4): min LEO over the leader, the ISR and the
    /// caught-up ISR-eligible followers; never backwards; held under min ISR (3.7+).
    pub fn maybe_increment_hw(&mut self, li: usize, reach: &Reach) {
        let leader = &self.replicas[li];
        if reach.hold_hw_under_min_isr && leader.view_isr.len() < self.min_isr {
            if leader.log.high_watermark() < leader.log.log_end_offset() {
                crate::mark!("kafka:hw-held-under-min-isr");
            }
            return;
        }
        let leo = leader.log.log_end_offset();
        let mut hw = leo;
        for (b, remote) in &leader.remotes {
            let in_isr = leader.view_isr.contains(b);
            let eligible =
                !reach.fenced(*b) && remote.is_caught_up(leo, reach.now, reach.lag_max_ms);
            if remote.leo < hw && (in_isr || eligible) {
                hw = remote.leo;
            }
        }
        let old = leader.log.high_watermark();
        self.replicas[li].log.advance_high_watermark(hw.max(old));
        assert!(
            self.replicas[li].log.high_watermark() >= old,
            "HW never decreases on a leader"
        );
    }
}
