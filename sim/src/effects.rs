//! Fault-effect accounting: every time a fault acts, the layer where it acted says so here.
//!
//! A scheduled fault proves nothing by being scheduled: a message fault on a link no request
//! uses, a kill of a process that was already dead, a partition between two nodes that never
//! talk. So each place where a fault bites records an [`Effect`]: the RPC layer
//! (`net`: a request dropped, duplicated or delayed by N ms, a response dropped, a packet
//! held by a cut or clogged link until TCP's retransmission after the heal), the nemesis (a
//! process killed with what it lost, paused, a clock stepped), components (a fault point fired, a request held by a BUGGIFY point, a bad
//! record produced). The harness's runner installs a [`set_sink`] that writes each effect
//! into the history as it happens, and collects the per-kind counts with [`take`]; the
//! report compares them with what was scheduled ([`arm`] and the nemesis schedule), and a
//! scenario whose scheduled fault kind never acted is reported as not exercised.
//!
//! Effect kinds ([`kind`]) are the nemesis' fault names, with a suffix where one fault has
//! several independent effects (`messages.duplicate`). Like coverage marks, effects are per
//! OS thread: every simulation runs on a fresh thread, so runs never share them.
//!
//! ```
//! use eosim_sim::effects::{self, kind};
//! effects::arm(kind::FAULT_POINT);
//! effects::record(kind::FAULT_POINT, "worker-0", "after-insert fired (crash)".into());
//! let taken = effects::take();
//! assert_eq!(taken.acted.get(kind::FAULT_POINT), Some(&1));
//! assert_eq!(taken.armed.get(kind::FAULT_POINT), Some(&1));
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

/// The effect kinds, one per way a fault can act. Each is also a kind that can be
/// scheduled ([`crate::nemesis::Fault::effect_kinds`]).
pub mod kind {
    /// A process was killed while it ran (a kill of a dead process does nothing).
    pub const KILL: &str = "kill";
    /// The leader of a partition was found and killed.
    pub const KILL_LEADER: &str = "kill-leader";
    /// A process was paused while it ran.
    pub const PAUSE: &str = "pause";
    /// A request or response was held on a link cut by a partition (TCP retransmits it
    /// after the heal, `crate::net`), or a broker's replication fetch or heartbeat could
    /// not cross it.
    pub const PARTITION: &str = "partition";
    /// As [`PARTITION`], to or from a clogged (isolated) node.
    pub const CLOG: &str = "clog";
    /// A request was lost before it reached its server.
    pub const DROP_REQUEST: &str = "messages.drop-request";
    /// A server applied a request and its response was lost.
    pub const DROP_RESPONSE: &str = "messages.drop-response";
    /// A request was delivered twice.
    pub const DUPLICATE: &str = "messages.duplicate";
    /// A request was held back by a drawn delay of at least 1 ms.
    pub const DELAY: &str = "messages.delay";
    /// A process's wall clock was stepped.
    pub const CLOCK_JUMP: &str = "clock-jump";
    /// A component's fault point (`[sink.fault_point]`) fired.
    pub const FAULT_POINT: &str = "fault-point";
    /// A request was held in the network by a BUGGIFY-style point (`buggify_*`).
    pub const BUGGIFY: &str = "buggify";
    /// A workload produced a record built to be bad (poison, oversized, schema drift).
    pub const BAD_RECORD: &str = "bad-record";
    /// DeleteRecords moved a partition's log start offset up (records were deleted).
    pub const DELETE_RECORDS: &str = "delete-records";
    /// CreatePartitions added partitions to a topic (with the counts before and after).
    pub const ADD_PARTITIONS: &str = "add-partitions";

    /// Every effect kind, in declaration order (what the canaries must cover).
    pub const ALL: [&str; 15] = [
        KILL,
        KILL_LEADER,
        PAUSE,
        PARTITION,
        CLOG,
        DROP_REQUEST,
        DROP_RESPONSE,
        DUPLICATE,
        DELAY,
        CLOCK_JUMP,
        FAULT_POINT,
        BUGGIFY,
        BAD_RECORD,
        DELETE_RECORDS,
        ADD_PARTITIONS,
    ];
}

/// One time a fault acted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// What kind of fault acted ([`kind`]).
    pub kind: &'static str,
    /// The process it acted on or in (`producer-0`, `broker-2`, `worker-1`).
    pub process: String,
    /// What it did, human-readable: `Produce to broker-2 delivered twice`.
    pub detail: String,
}

/// What a run's faults did, per kind: how often each was armed by a component (fault points,
/// BUGGIFY probabilities, bad records planned) and how often each acted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// Effects per kind.
    pub acted: BTreeMap<String, u64>,
    /// Faults armed by components (not by the nemesis schedule) per kind.
    pub armed: BTreeMap<String, u64>,
}

type Sink = Box<dyn Fn(&Effect)>;

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
    static TAKEN: RefCell<Taken> = RefCell::new(Taken::default());
    static NAMES: RefCell<BTreeMap<std::net::IpAddr, String>> =
        const { RefCell::new(BTreeMap::new()) };
}

/// Installs the function every effect is handed to as it happens (the runner's: it writes
/// the effect into the history). Replaces any earlier sink.
pub fn set_sink(sink: impl Fn(&Effect) + 'static) {
    SINK.with(|s| *s.borrow_mut() = Some(Box::new(sink)));
}

/// Records that a fault of `kind` acted on `process`, with what it did.
pub fn record(kind: &'static str, process: &str, detail: String) {
    TAKEN.with(|t| *t.borrow_mut().acted.entry(kind.to_string()).or_default() += 1);
    let effect = Effect {
        kind,
        process: process.to_string(),
        detail,
    };
    SINK.with(|s| {
        if let Some(sink) = s.borrow().as_ref() {
            sink(&effect);
        }
    });
}

/// Records that a component armed a fault of `kind` for this run (a fault point, a BUGGIFY
/// probability above zero): it counts as scheduled, and must act to count as exercised.
pub fn arm(kind: &'static str) {
    TAKEN.with(|t| *t.borrow_mut().armed.entry(kind.to_string()).or_default() += 1);
}

/// This thread's effect counts since the last call; resets them and removes the sink.
pub fn take() -> Taken {
    SINK.with(|s| s.borrow_mut().take());
    NAMES.with(|n| n.borrow_mut().clear());
    TAKEN.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// Names the node at `ip` (`producer-0`), so effects seen by address name their process.
pub fn name_node(ip: std::net::IpAddr, name: &str) {
    NAMES.with(|n| n.borrow_mut().insert(ip, name.to_string()));
}

/// The name of the node at `ip`, or the address itself when it has none.
pub fn node_name(ip: std::net::IpAddr) -> String {
    NAMES
        .with(|n| n.borrow().get(&ip).cloned())
        .unwrap_or_else(|| ip.to_string())
}
