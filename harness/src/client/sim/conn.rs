//! A client's connection to the simulated cluster: broker addresses, metadata cache,
//! leader lookup and single request/response exchanges with a timeout.

use crate::client::ClientError;
use eosim_sim::kafka::service::broker_addr;
use eosim_sim::kafka::{
    BrokerId, KafkaError, PartitionMetadata, Request, Response, TopicPartition,
};
use eosim_sim::net::RpcError;
use madsim::net::Endpoint;
use madsim::time::Instant;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bootstrap list and shared endpoint of one client process. Cloning shares both.
#[derive(Clone)]
pub struct Connection {
    endpoint: Arc<Endpoint>,
    brokers: Vec<BrokerId>,
    metadata: Arc<Mutex<BTreeMap<String, CachedTopic>>>,
    /// Round-robin cursor over the bootstrap list for requests any broker can answer.
    cursor: Arc<Mutex<usize>>,
}

/// One topic's metadata as the client cached it, and when it was fetched.
struct CachedTopic {
    partitions: Vec<PartitionMetadata>,
    fetched_at: Instant,
}

impl Connection {
    /// Binds an endpoint on this node and knows brokers `1..=broker_count` as bootstrap.
    ///
    /// # Errors
    /// When the node cannot bind (it has no IP).
    pub async fn open(broker_count: u32) -> Result<Self, ClientError> {
        let endpoint = Endpoint::bind("0.0.0.0:0")
            .await
            .map_err(|e| ClientError::Fatal(format!("cannot bind client endpoint: {e}")))?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
            brokers: (1..=broker_count).collect(),
            metadata: Arc::default(),
            cursor: Arc::default(),
        })
    }

    /// Sends `request` to `broker` and waits up to `timeout` for the response. A
    /// `Response::Error` comes back as `Ok`; only transport failures are errors.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when nothing came back: no response in time, or the
    /// broker's connection was reset (its process died) while the request waited; both
    /// leave the outcome unknown.
    pub async fn request(
        &self,
        broker: BrokerId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let what = format!("{} to broker-{broker}", request_name(&request));
        let result =
            eosim_sim::net::call_shared(&self.endpoint, broker_addr(broker), request, timeout)
                .await;
        result
            .map_err(|e| rpc_error(what.clone(), timeout, e))
            .and_then(|r| closed_as_lost(what, timeout, r))
    }

    /// As [`Connection::request`], with the request held `extra_delay` in the network
    /// before it leaves (it still leaves if the caller gave up): a BUGGIFY-style fault
    /// point for a late Produce or EndTxn (cases.md F8, KAFKA-17754).
    ///
    /// # Errors
    /// As [`Connection::request`].
    pub async fn request_delayed(
        &self,
        broker: BrokerId,
        request: Request,
        timeout: Duration,
        extra_delay: Duration,
    ) -> Result<Response, ClientError> {
        let what = format!("{} to broker-{broker}", request_name(&request));
        let addr = broker_addr(broker);
        eosim_sim::net::call_delayed(&self.endpoint, addr, request, timeout, extra_delay)
            .await
            .map_err(|e| rpc_error(what.clone(), timeout, e))
            .and_then(|r| closed_as_lost(what, timeout, r))
    }

    /// Sends `request` to the next bootstrap broker in turn (for requests any broker
    /// answers: Metadata, FindCoordinator, CreateTopics).
    ///
    /// # Errors
    /// As [`Connection::request`].
    pub async fn request_any(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let broker = {
            let mut c = self.cursor.lock().expect("cursor lock");
            *c = (*c + 1) % self.brokers.len();
            self.brokers[*c]
        };
        self.request(broker, request, timeout).await
    }

    /// Refreshes the metadata of `topics` from any broker.
    ///
    /// # Errors
    /// A timeout, or the broker's error.
    pub async fn refresh_metadata(
        &self,
        topics: &[String],
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let request = Request::Metadata {
            topics: Some(topics.to_vec()),
        };
        match self.request_any(request, timeout).await? {
            Response::Metadata { topics, .. } => {
                let fetched_at = Instant::now();
                let topics = topics.into_iter().map(|(name, partitions)| {
                    let cached = CachedTopic {
                        partitions,
                        fetched_at,
                    };
                    (name, cached)
                });
                self.metadata.lock().expect("metadata lock").extend(topics);
                Ok(())
            }
            Response::Error(e) => Err(ClientError::Kafka(e)),
            other => Err(ClientError::Fatal(format!(
                "unexpected metadata response {other:?}"
            ))),
        }
    }

    /// The cached leader of `tp`, if known and online.
    pub fn leader(&self, tp: &TopicPartition) -> Option<BrokerId> {
        let metadata = self.metadata.lock().expect("metadata lock");
        metadata
            .get(tp.topic.as_str())?
            .partitions
            .iter()
            .find(|p| p.partition == tp.partition)?
            .leader
    }

    /// The cached leader epoch of `tp`, if known and the partition online.
    pub fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        let metadata = self.metadata.lock().expect("metadata lock");
        let p = metadata
            .get(tp.topic.as_str())?
            .partitions
            .iter()
            .find(|p| p.partition == tp.partition)?;
        p.leader.map(|_| p.leader_epoch)
    }

    /// Number of partitions of `topic` in the cache.
    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        self.metadata
            .lock()
            .expect("metadata lock")
            .get(topic)
            .map(|t| t.partitions.len() as u32)
    }

    /// Whether `topic`'s cached metadata is missing or older than `max_age` (Java's
    /// `metadata.max.age.ms`: `Metadata.timeToNextUpdate` is 0 once the last full update
    /// is that old, and the next `NetworkClient.poll` asks for it again). Any refresh
    /// (after an error, before an assignment) restarts the age.
    pub fn metadata_expired(&self, topic: &str, max_age: Duration) -> bool {
        self.metadata
            .lock()
            .expect("metadata lock")
            .get(topic)
            .is_none_or(|t| t.fetched_at.elapsed() >= max_age)
    }

    /// Forgets the leader of every partition (after NOT_LEADER_OR_FOLLOWER, say).
    pub fn invalidate(&self, topic: &str) {
        self.metadata.lock().expect("metadata lock").remove(topic);
    }
}

/// A transport failure as the client sees it: the outcome is unknown either way.
fn rpc_error(mut what: String, timeout: Duration, error: RpcError) -> ClientError {
    if let RpcError::Disconnected { .. } = error {
        what.push_str(" (connection reset)");
    }
    ClientError::Timeout {
        what,
        timeout_ms: timeout.as_millis() as u64,
    }
}

/// A connection the broker closed instead of answering (KoP with its transaction
/// coordinator disabled, `eosim_sim::kafka::kop`): to the client a lost connection with
/// the request's outcome unknown, as a Java client's `NetworkException` leaves it. The
/// broker's reason goes into the message, so a stall it causes can name it.
fn closed_as_lost(
    mut what: String,
    timeout: Duration,
    response: Response,
) -> Result<Response, ClientError> {
    match response {
        Response::ConnectionClosed { reason } => {
            what.push_str(&format!(" (connection closed by the broker: {reason})"));
            Err(ClientError::Timeout {
                what,
                timeout_ms: timeout.as_millis() as u64,
            })
        }
        other => Ok(other),
    }
}

/// The Kafka API name of a request, for messages.
pub fn request_name(request: &Request) -> &'static str {
    match request {
        Request::Metadata { .. } => "Metadata",
        Request::CreateTopic { .. } => "CreateTopics",
        Request::Produce { .. } => "Produce",
        Request::Fetch { .. } => "Fetch",
        Request::ListOffsets { .. } => "ListOffsets",
        Request::DeleteRecords { .. } => "DeleteRecords",
        Request::OffsetsForLeaderEpoch { .. } => "OffsetsForLeaderEpoch",
        Request::FindCoordinator { .. } => "FindCoordinator",
        Request::JoinGroup { .. } => "JoinGroup",
        Request::SyncGroup { .. } => "SyncGroup",
        Request::Heartbeat { .. } => "Heartbeat",
        Request::ConsumerGroupHeartbeat(_) => "ConsumerGroupHeartbeat",
        Request::LeaveGroup { .. } => "LeaveGroup",
        Request::OffsetCommit { .. } => "OffsetCommit",
        Request::OffsetFetch { .. } => "OffsetFetch",
        Request::OffsetFetchStable { .. } => "OffsetFetch",
        Request::InitProducerId { .. } => "InitProducerId",
        Request::AddPartitionsToTxn { .. } => "AddPartitionsToTxn",
        Request::AddOffsetsToTxn { .. } => "AddOffsetsToTxn",
        Request::TxnOffsetCommit { .. } => "TxnOffsetCommit",
        Request::EndTxn { .. } => "EndTxn",
    }
}

/// Turns a `Response::Error` into a client error.
pub fn broker_error(response: &Response) -> Option<ClientError> {
    match response {
        Response::Error(e) => Some(ClientError::Kafka(*e)),
        _ => None,
    }
}

/// Whether a broker error means the client's metadata is stale.
pub fn needs_metadata_refresh(e: KafkaError) -> bool {
    matches!(
        e,
        KafkaError::NotLeaderOrFollower
            | KafkaError::LeaderNotAvailable
            | KafkaError::UnknownTopicOrPartition
            | KafkaError::FencedLeaderEpoch
            | KafkaError::UnknownLeaderEpoch
    )
}
