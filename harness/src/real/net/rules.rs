//! The nftables ruleset of a run's network faults, built as text for `nft -f`, and the
//! per-link drop counters read back from `nft -j list table`.
//!
//! # How a packet is matched to a link
//! Every process of the run lives in a cgroup v2 of its own ([`super::cgroup`]), and every
//! service keeps its loopback ports. A cut link `a → b` drops the packets `a` sends and
//! `b` receives, in `b`'s input hook, as Jepsen's `iptables -A INPUT -s <a> -j DROP` on
//! node `b` does (`jepsen/src/jepsen/net.clj`, `drop!`). Loopback has one address for all,
//! so the sender is told by a packet mark set in the output hook instead of by its source
//! address:
//! - chain `mark_out` (hook `output`): a packet whose sending socket is in `a`'s cgroup
//!   (`socket cgroupv2`), or that leaves one of `a`'s listening ports (`tcp sport`), gets
//!   `a`'s mark. The port rule covers what a server sends before its connection has a full
//!   socket (the SYN-ACK of a request socket, which `socket cgroupv2` does not match:
//!   `nft_sock_get_eval_cgroupv2` in `net/netfilter/nft_socket.c` needs `sk_fullsock`).
//! - chain `cut_in` (hook `input`): a packet with `a`'s mark whose receiving socket is in
//!   `b`'s cgroup (the socket lookup `nft_socket` does), or whose destination is one of
//!   `b`'s listening ports (the handshake's last ACK, which meets a request socket), is
//!   counted and dropped. The mark survives the loopback hop (`loopback_xmit` orphans the
//!   skb but keeps `skb->mark`).
//!
//! Each drop rule carries the comment `<kind> <from> <to>` ([`Cut`]) and a counter, so the
//! packets a fault actually dropped are read back per link ([`drop_counts`]): the fault's
//! effect, as the simulation's network counts a lost packet (`sim/src/net.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The marks of a run's nodes: `MARK_BASE | (index + 1)`, index in the node list.
pub const MARK_BASE: u32 = 0x4553_0000;

/// One process of the run as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The simulation's node name (`broker-1`, `connect-0`, `postgres`).
    pub name: String,
    /// Its cgroup as `nft` names it: the path under `/sys/fs/cgroup`
    /// (`unified/eosim-123/broker-1` where cgroup v2 is mounted at `/sys/fs/cgroup/unified`).
    pub cgroup: String,
    /// The TCP ports its processes listen on (none for a pure client).
    pub ports: Vec<u16>,
}

/// A directed link `from → to` cut by a fault of `kind` ([`eosim_sim::effects::kind`]'s
/// `PARTITION` or `CLOG`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cut {
    /// The effect kind of the fault that cut it.
    pub kind: &'static str,
    /// The sender whose packets are dropped.
    pub from: String,
    /// The receiver that does not get them.
    pub to: String,
}

impl Cut {
    /// The drop rules' comment, `<kind> <from> <to>`.
    fn comment(&self) -> String {
        format!("{} {} {}", self.kind, self.from, self.to)
    }
}

/// Names and cgroup paths go into the ruleset unquoted-safe: letters, digits, `-`, `_`,
/// `.` and (paths) `/`.
fn check_word(what: &str, s: &str, slash: bool) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c) || (slash && c == '/'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "network faults: {what} `{s}` has characters nft rules cannot carry"
        ))
    }
}

fn port_set(ports: &[u16]) -> String {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!("{{ {} }}", list.join(", "))
}

/// The rules that know `node` by its sockets' cgroup and, when it listens, by its ports
/// (`port` is `sport` for what it sends, `dport` for what it receives): each
/// `<condition><match> <action>`.
fn node_rules(
    out: &mut String,
    level: u32,
    node: &Endpoint,
    port: &str,
    condition: &str,
    action: &str,
) {
    let _ = writeln!(
        out,
        "\t\t{condition}socket cgroupv2 level {level} \"{}\" {action}",
        node.cgroup
    );
    if !node.ports.is_empty() {
        let _ = writeln!(
            out,
            "\t\t{condition}tcp {port} {} {action}",
            port_set(&node.ports)
        );
    }
}

/// The whole table `inet <table>` for `nodes` with `cuts` in force, replacing any table of
/// that name in one `nft -f` transaction (an empty `table` first, so that the `delete`
/// finds one). `level` is the nodes' cgroup depth under the cgroup v2 root
/// (`socket cgroupv2 level`). Clog cuts come before partition cuts, so a link both cut
/// counts its packets as the clog's, as `sim/src/net.rs` `link_cut_by` does.
///
/// # Errors
/// A cut naming a node that is not in `nodes`; a name or path with characters outside
/// `[A-Za-z0-9._-/]`.
pub fn ruleset(
    table: &str,
    level: u32,
    nodes: &[Endpoint],
    cuts: &[Cut],
) -> Result<String, String> {
    check_word("table", table, false)?;
    let mark = |name: &str| -> Result<(u32, &Endpoint), String> {
        nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| (MARK_BASE | (i as u32 + 1), &nodes[i]))
            .ok_or_else(|| format!("network faults: no process named `{name}` in this run"))
    };
    let mut out = format!("table inet {table} {{}}\ndelete table inet {table}\n");
    let _ = writeln!(out, "table inet {table} {{");
    let _ = writeln!(out, "\tchain mark_out {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook output priority filter; policy accept;"
    );
    for node in nodes {
        check_word("node", &node.name, false)?;
        check_word("cgroup", &node.cgroup, true)?;
        let (m, _) = mark(&node.name)?;
        let action = format!("meta mark set {m:#x}");
        node_rules(&mut out, level, node, "sport", "", &action);
    }
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "\tchain cut_in {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook input priority filter; policy accept;"
    );
    let mut ordered: Vec<&Cut> = cuts.iter().collect();
    ordered.sort_by_key(|c| (c.kind != eosim_sim::effects::kind::CLOG, *c));
    let mut seen = std::collections::BTreeSet::new();
    ordered.retain(|c| seen.insert((c.from.as_str(), c.to.as_str())));
    for cut in ordered {
        let (from_mark, _) = mark(&cut.from)?;
        let (_, to) = mark(&cut.to)?;
        check_word("fault kind", cut.kind, false)?;
        let condition = format!("meta mark {from_mark:#x} ");
        let action = format!("counter drop comment \"{}\"", cut.comment());
        node_rules(&mut out, level, to, "dport", &condition, &action);
    }
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "}}");
    Ok(out)
}

/// The packets each cut link dropped, from `nft -j list table inet <table>`'s JSON
/// (libnftables-json(5): `{"nftables": [{"rule": {"comment": ..., "expr": [{"counter":
/// {"packets": N, ...}}, ...]}}, ...]}`), summed over the link's rules, keyed by
/// `(kind, from, to)`. Rules without a comment (the marks) are skipped.
///
/// # Errors
/// Text that is not JSON, or a comment that is not `<kind> <from> <to>`.
pub fn drop_counts(json: &str) -> Result<BTreeMap<(String, String, String), u64>, String> {
    let doc: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("nft -j output: {e}"))?;
    let items = doc
        .get("nftables")
        .and_then(|v| v.as_array())
        .ok_or("nft -j output: no `nftables` array")?;
    let mut out = BTreeMap::new();
    for rule in items.iter().filter_map(|i| i.get("rule")) {
        let Some(comment) = rule.get("comment").and_then(|c| c.as_str()) else {
            continue;
        };
        let words: Vec<&str> = comment.split(' ').collect();
        let [kind, from, to] = words[..] else {
            return Err(format!(
                "nft rule comment `{comment}` is not `<kind> <from> <to>`"
            ));
        };
        let packets: u64 = rule
            .get("expr")
            .and_then(|e| e.as_array())
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("counter")?.get("packets")?.as_u64())
            .sum();
        *out.entry((kind.to_string(), from.to_string(), to.to_string()))
            .or_insert(0) += packets;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::effects::kind;

    fn node(name: &str, ports: &[u16]) -> Endpoint {
        Endpoint {
            name: name.into(),
            cgroup: format!("unified/eosim-7/{name}"),
            ports: ports.to_vec(),
        }
    }

    fn cut(kind: &'static str, from: &str, to: &str) -> Cut {
        Cut {
            kind,
            from: from.into(),
            to: to.into(),
        }
    }

    fn nodes() -> Vec<Endpoint> {
        vec![
            node("broker-1", &[9092, 9093]),
            node("connect-0", &[]),
            node("postgres", &[5432]),
        ]
    }

    /// The table `eosim_7` for [`nodes`] at level 2 with `cuts`.
    fn rules_for(cuts: &[Cut]) -> Result<String, String> {
        ruleset("eosim_7", 2, &nodes(), cuts)
    }

    /// The drop rules of the `cut_in` chain, in order.
    fn drops(text: &str) -> Vec<&str> {
        text.lines()
            .map(str::trim)
            .filter(|l| l.contains("drop"))
            .collect()
    }

    /// A one-way cut `connect-0 → broker-1` marks every node's packets by cgroup (and a
    /// server's by its ports) and drops exactly the marked packets of connect-0 that
    /// broker-1 would receive: by its cgroup and by its two listening ports.
    #[test]
    fn a_one_way_cut_drops_the_senders_marked_packets_at_the_receiver() {
        let text = rules_for(&[cut(kind::PARTITION, "connect-0", "broker-1")]).unwrap();
        assert!(text.starts_with("table inet eosim_7 {}\ndelete table inet eosim_7\n"));
        for line in [
            "socket cgroupv2 level 2 \"unified/eosim-7/broker-1\" meta mark set 0x45530001",
            "tcp sport { 9092, 9093 } meta mark set 0x45530001",
            "socket cgroupv2 level 2 \"unified/eosim-7/connect-0\" meta mark set 0x45530002",
            "socket cgroupv2 level 2 \"unified/eosim-7/postgres\" meta mark set 0x45530003",
            "tcp sport { 5432 } meta mark set 0x45530003",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
        assert!(
            !text.contains("tcp sport {  }"),
            "a client has no port rule:\n{text}"
        );
        assert_eq!(
            drops(&text),
            [
                "meta mark 0x45530002 socket cgroupv2 level 2 \"unified/eosim-7/broker-1\" \
                 counter drop comment \"partition connect-0 broker-1\"",
                "meta mark 0x45530002 tcp dport { 9092, 9093 } counter drop comment \
                 \"partition connect-0 broker-1\"",
            ]
        );
    }

    /// A receiver without listening ports gets the cgroup rule only; clog cuts come first
    /// and a link cut twice has one pair of rules (the first fault's).
    #[test]
    fn clogs_come_first_and_a_link_is_cut_once() {
        let cuts = [
            cut(kind::PARTITION, "broker-1", "connect-0"),
            cut(kind::CLOG, "postgres", "connect-0"),
            cut(kind::CLOG, "broker-1", "connect-0"),
        ];
        let text = rules_for(&cuts).unwrap();
        assert_eq!(
            drops(&text),
            [
                "meta mark 0x45530001 socket cgroupv2 level 2 \"unified/eosim-7/connect-0\" \
                 counter drop comment \"clog broker-1 connect-0\"",
                "meta mark 0x45530003 socket cgroupv2 level 2 \"unified/eosim-7/connect-0\" \
                 counter drop comment \"clog postgres connect-0\"",
            ]
        );
    }

    /// The healed table still marks, and drops nothing.
    #[test]
    fn no_cuts_drop_nothing() {
        let text = rules_for(&[]).unwrap();
        assert!(drops(&text).is_empty(), "{text}");
        assert!(text.contains("chain cut_in"), "{text}");
    }

    #[test]
    fn unknown_nodes_and_odd_names_are_errors_naming_them() {
        let err = rules_for(&[cut(kind::CLOG, "clickhouse", "postgres")]).unwrap_err();
        assert!(err.contains("no process named `clickhouse`"), "{err}");
        let mut odd = nodes();
        odd[1].name = "connect 0\"".into();
        let err = ruleset("eosim_7", 2, &odd, &[]).unwrap_err();
        assert!(err.contains("node `connect 0\"`"), "{err}");
    }

    /// Counters are summed per link over its rules; the mark rules are not links.
    #[test]
    fn drop_counts_sum_each_links_rules() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
          {"table": {"family": "inet", "name": "eosim_7", "handle": 3}},
          {"rule": {"chain": "mark_out", "expr": [{"mangle": {}}]}},
          {"rule": {"chain": "cut_in", "comment": "partition connect-0 broker-1",
            "expr": [{"match": {}}, {"counter": {"packets": 4, "bytes": 240}}, {"drop": null}]}},
          {"rule": {"chain": "cut_in", "comment": "partition connect-0 broker-1",
            "expr": [{"match": {}}, {"counter": {"packets": 1, "bytes": 60}}, {"drop": null}]}},
          {"rule": {"chain": "cut_in", "comment": "clog postgres connect-0",
            "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}}]}"#;
        let counts = drop_counts(json).unwrap();
        let key = |k: &str, a: &str, b: &str| (k.to_string(), a.to_string(), b.to_string());
        assert_eq!(counts.len(), 2);
        assert_eq!(counts[&key("partition", "connect-0", "broker-1")], 5);
        assert_eq!(counts[&key("clog", "postgres", "connect-0")], 0);
        assert!(drop_counts("{\"nftables\": [{\"rule\": {\"comment\": \"x\"}}]}").is_err());
        assert!(drop_counts("not json").is_err());
    }
}
