//! Broker nodes serving the Kafka model over the simulated network.
//!
//! Broker `b` listens on `10.0.1.b:9092`. All brokers share one [`Cluster`] (the model
//! holds every replica, so sharing it is how the model sees the whole cluster); a killed
//! node stops answering and the model is told the broker crashed.

use super::model::Cluster;
use super::BrokerId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// The shared model.
pub type SharedCluster = Arc<Mutex<Cluster>>;

/// Kafka's port in eosim's worlds.
pub const KAFKA_PORT: u16 = 9092;

/// IP of broker `b`: `10.0.1.b`.
pub fn broker_ip(b: BrokerId) -> IpAddr {
    assert!(b >= 1 && b < 255, "broker ids are 1..=254");
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, b as u8))
}

/// Address of broker `b`.
pub fn broker_addr(b: BrokerId) -> SocketAddr {
    SocketAddr::new(broker_ip(b), KAFKA_PORT)
}
