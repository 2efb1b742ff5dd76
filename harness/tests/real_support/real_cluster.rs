//! The real side of the model-versus-real suites' broker faults: a native Kafka cluster
//! (`eosim::real::provision::Kafka`, one or three KRaft nodes) whose brokers a case kills
//! (SIGKILL: the page cache, so the log, survives) and starts again, with the waits that
//! make both worlds comparable afterwards:
//! - after a kill of one of three brokers, until the controller has fenced it (it is gone
//!   from the metadata's broker list, `KRaftMetadataCache.getAliveBrokerNodes`) and no
//!   partition, internal ones included, names it leader; the model's twin is
//!   `ModelWorld::wait_fenced`;
//! - after a restart, until it is registered again and every partition's ISR is full
//!   (`ModelWorld::revive`), so that the next kill leaves `min.insync.replicas` 2 met.
//!
//! Coordinators are found as clients find them: `FindCoordinator` (over `wire.rs`) at a
//! live broker. Broker `b`'s address is the `b`-th of `bootstrap.servers` (node ids are
//! `1..=n` in that order).

use super::wire::WireConn;
use eosim::real::provision::Kafka;
use eosim_sim::kafka::{CoordinatorKind, Request, Response};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WAIT_MAX: Duration = Duration::from_secs(90);

/// A running cluster and the broker a case has down (at most one).
pub struct RealCluster {
    kafka: Mutex<Kafka>,
    bootstrap: String,
    brokers: u32,
    down: Mutex<Option<i32>>,
}

impl RealCluster {
    /// `brokers` (1 or 3) nodes under `dir`.
    ///
    /// # Errors
    /// When the cluster does not start.
    pub fn start(dir: &std::path::Path, brokers: u32) -> Result<Self, String> {
        let kafka = Kafka::start(dir, brokers).map_err(|e| e.to_string())?;
        Ok(Self {
            bootstrap: kafka.bootstrap_servers(),
            kafka: Mutex::new(kafka),
            brokers,
            down: Mutex::new(None),
        })
    }

    /// `bootstrap.servers` of every node.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Number of brokers.
    pub fn brokers(&self) -> u32 {
        self.brokers
    }

    /// Broker `b`'s `host:port`.
    pub fn address(&self, b: i32) -> String {
        self.bootstrap
            .split(',')
            .nth((b - 1) as usize)
            .unwrap_or_default()
            .to_string()
    }

    /// The broker that is down, if one is.
    pub fn down(&self) -> Option<i32> {
        *self.down.lock().expect("down lock")
    }

    fn live_address(&self) -> String {
        let down = self.down();
        let b = (1..=self.brokers as i32)
            .find(|b| Some(*b) != down)
            .unwrap_or(1);
        self.address(b)
    }

    /// The current leader of `topic`-`partition`, waited for while it has none.
    ///
    /// # Errors
    /// When none is known within the bound.
    pub fn leader(&self, topic: &str, partition: u32) -> Result<i32, String> {
        let started = Instant::now();
        loop {
            let kafka = self.kafka.lock().map_err(|e| e.to_string())?;
            match kafka.partition_leader(topic, partition as i32) {
                Ok(Some(b)) if Some(b) != self.down() => return Ok(b),
                other if started.elapsed() > WAIT_MAX => {
                    return Err(format!("leader of {topic}-{partition}: {other:?}"))
                }
                _ => {}
            }
            drop(kafka);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The coordinator of `key` a live broker names, waited for while none is available
    /// or the named one is down.
    ///
    /// # Errors
    /// When none is named within the bound.
    pub fn coordinator(&self, key: &str, kind: CoordinatorKind) -> Result<i32, String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < WAIT_MAX {
            let request = Request::FindCoordinator {
                key: key.into(),
                kind,
            };
            match WireConn::connect(&self.live_address()).and_then(|mut c| c.call(&request)) {
                Ok(Response::FindCoordinator { broker }) if Some(broker as i32) != self.down() => {
                    return Ok(broker as i32)
                }
                other => last = format!("{other:?}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("coordinator of {key}: {last} after {WAIT_MAX:?}"))
    }

    /// With one broker: SIGKILL, 2 s down, start again (waits until it is registered).
    ///
    /// # Errors
    /// When the broker does not come back.
    pub fn restart(&self, b: i32) -> Result<(), String> {
        let mut kafka = self.kafka.lock().map_err(|e| e.to_string())?;
        kafka.kill(b).map_err(|e| format!("kill broker {b}: {e}"))?;
        std::thread::sleep(Duration::from_secs(2));
        super::real_support::timed(&format!("broker {b} restart"), || kafka.restart(b))
            .map_err(|e| format!("restart broker {b}: {e}"))
    }

    /// SIGKILLs broker `b` and waits until the controller has fenced it and moved its
    /// leaderships (see the module docs).
    ///
    /// # Errors
    /// When a broker is down already, or the failover does not finish within the bound.
    pub fn kill(&self, b: i32) -> Result<(), String> {
        if let Some(d) = self.down() {
            return Err(format!("kill broker {b}: broker {d} is down already"));
        }
        let started = Instant::now();
        {
            let mut kafka = self.kafka.lock().map_err(|e| e.to_string())?;
            kafka.kill(b).map_err(|e| format!("kill broker {b}: {e}"))?;
        }
        *self.down.lock().map_err(|e| e.to_string())? = Some(b);
        let mut last = String::new();
        while started.elapsed() < WAIT_MAX {
            match self.metadata_check(|m| {
                let listed = m.brokers().iter().any(|x| x.id() == b);
                let leads = m
                    .topics()
                    .iter()
                    .flat_map(|t| t.partitions())
                    .any(|p| p.leader() == b || p.leader() < 0);
                (!listed && !leads).then_some(()).ok_or_else(|| {
                    format!("broker {b} listed: {listed}, leads or leaderless partitions: {leads}")
                })
            }) {
                Ok(()) => {
                    let line = format!("broker {b} killed, fenced after {:?}\n", started.elapsed());
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    return Ok(());
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("failover after killing broker {b}: {last}"))
    }

    /// Starts the broker that is down again (nothing when none is) and waits until every
    /// partition's ISR is full (see the module docs).
    ///
    /// # Errors
    /// When it does not rejoin within the bound.
    pub fn revive(&self) -> Result<(), String> {
        let Some(b) = self.down() else {
            return Ok(());
        };
        let started = Instant::now();
        {
            let mut kafka = self.kafka.lock().map_err(|e| e.to_string())?;
            kafka
                .restart(b)
                .map_err(|e| format!("restart broker {b}: {e}"))?;
        }
        *self.down.lock().map_err(|e| e.to_string())? = None;
        let mut last = String::new();
        while started.elapsed() < WAIT_MAX {
            match self.metadata_check(|m| {
                let short = m
                    .topics()
                    .iter()
                    .flat_map(|t| t.partitions().iter().map(move |p| (t.name(), p)))
                    .find(|(_, p)| p.isr().len() < p.replicas().len());
                match short {
                    None => Ok(()),
                    Some((t, p)) => Err(format!("{t}-{} ISR {:?}", p.id(), p.isr())),
                }
            }) {
                Ok(()) => {
                    let line =
                        format!("broker {b} back, ISRs full after {:?}\n", started.elapsed());
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    return Ok(());
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!("broker {b} after its restart: {last}"))
    }

    /// `check` on the metadata of every topic, internal ones included.
    fn metadata_check(
        &self,
        check: impl Fn(&rdkafka::metadata::Metadata) -> Result<(), String>,
    ) -> Result<(), String> {
        let kafka = self.kafka.lock().map_err(|e| e.to_string())?;
        let m = kafka.metadata(5_000).map_err(|e| e.to_string())?;
        check(&m)
    }

    /// Stops every node (SIGTERM, SIGKILL after 15 s).
    pub fn stop(self) {
        let kafka = self.kafka.into_inner().expect("kafka lock");
        super::real_support::timed("stop kafka", || kafka.stop());
    }
}
