//! eosim's group requests ([`Request`]) spoken to a real broker over the Kafka wire
//! protocol (the `kafka-protocol` crate's generated messages), and the answers read back as
//! the model's [`Response`], so that a differential suite sends real Kafka the very
//! requests it sends the model and compares answer with answer.
//!
//! Covered: FindCoordinator v3, JoinGroup v5 (KIP-394's MEMBER_ID_REQUIRED, KIP-345 fields
//! left empty), SyncGroup v3, Heartbeat v3, LeaveGroup v3, OffsetCommit v7 and OffsetFetch v5
//! (all within what Kafka 4.x still accepts after KIP-896). The member metadata and the
//! assignments are the consumer protocol's (`ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment`, version 0, each prefixed with its version as
//! `ConsumerProtocol.java` writes them).
//!
//! A [`WireConn`] is one TCP connection: a request is written at once and its answer read
//! later ([`WireConn::try_recv`]), so a JoinGroup the coordinator holds back does not hold
//! back other members, each on its own connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use eosim_sim::kafka::{
    CoordinatorKind, KafkaError, OwnedPartitions, Request, Response, TopicPartition,
};
use kafka_protocol::messages::{
    consumer_protocol_assignment, consumer_protocol_subscription,
    join_group_request::JoinGroupRequestProtocol, leave_group_request::MemberIdentity,
    offset_commit_request, offset_fetch_request, sync_group_request::SyncGroupRequestAssignment,
    ApiKey, ConsumerProtocolAssignment, ConsumerProtocolSubscription, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, RequestHeader, ResponseHeader,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn error(code: i16) -> Option<KafkaError> {
    match code {
        0 => None,
        code => {
            Some(KafkaError::from_code(code).unwrap_or_else(|| {
                panic!("wire: error code {code} has no KafkaError in the model")
            }))
        }
    }
}

/// The consumer protocol's subscription (version 0) with its version prefix.
/// The consumer protocol's subscription (version 2: owned partitions, KIP-429, and the
/// generation, KIP-792) with its version prefix.
fn subscription(topics: &[String], owned: &OwnedPartitions) -> Bytes {
    let owned_partitions = by_topic(&owned.partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            consumer_protocol_subscription::TopicPartition::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    let mut buf = BytesMut::new();
    buf.put_i16(2);
    ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|t| s(t)).collect())
        .with_owned_partitions(owned_partitions)
        .with_generation_id(owned.generation)
        .encode(&mut buf, 2)
        .expect("encode subscription");
    buf.freeze()
}

/// A member's subscribed topics and owned partitions, from its subscription metadata.
fn subscribed(mut metadata: Bytes) -> (Vec<String>, OwnedPartitions) {
    let version = metadata.get_i16();
    let sub =
        ConsumerProtocolSubscription::decode(&mut metadata, version).expect("decode subscription");
    let partitions = (sub.owned_partitions.iter())
        .flat_map(|t| {
            let topic = t.topic.0.to_string();
            let numbers = t.partitions.iter();
            numbers.map(move |&p| TopicPartition::new(&topic, p as u32))
        })
        .collect();
    let topics = sub.topics.iter().map(|t| t.to_string()).collect();
    let generation = if version >= 2 { sub.generation_id } else { -1 };
    (
        topics,
        OwnedPartitions {
            partitions,
            generation,
        },
    )
}

/// `partitions` grouped by topic, as the consumer protocol lists them.
fn by_topic(partitions: &[TopicPartition]) -> BTreeMap<&str, Vec<i32>> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(tp.partition as i32);
    }
    by_topic
}

/// The consumer protocol's assignment (version 0) with its version prefix.
fn assignment(partitions: &[TopicPartition]) -> Bytes {
    let assigned = by_topic(partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            consumer_protocol_assignment::TopicPartition::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    ConsumerProtocolAssignment::default()
        .with_assigned_partitions(assigned)
        .encode(&mut buf, 0)
        .expect("encode assignment");
    buf.freeze()
}

fn assigned_partitions(mut bytes: Bytes) -> Vec<TopicPartition> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let version = bytes.get_i16();
    let a = ConsumerProtocolAssignment::decode(&mut bytes, version).expect("decode assignment");
    let mut out: Vec<TopicPartition> = a
        .assigned_partitions
        .iter()
        .flat_map(|tp| {
            tp.partitions
                .iter()
                .map(|p| TopicPartition::new(tp.topic.0.as_str(), *p as u32))
        })
        .collect();
    out.sort();
    out
}

/// One TCP connection to a broker, requests and answers in order.
pub struct WireConn {
    stream: TcpStream,
    correlation: i32,
    /// API key and version of the requests written and not yet answered, in order.
    waiting: Vec<(ApiKey, i16)>,
    /// The JoinGroup version sent: 5 (default; `group.instance.id`, before KIP-814) or 9
    /// (KIP-814's `SkipAssignment`: a broker 3.2+ answers a restarted static leader with
    /// it).
    pub join_group_version: i16,
}

impl WireConn {
    /// Connects to `address` (`host:port`).
    ///
    /// # Errors
    /// The connection's error, as text.
    pub fn connect(address: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(address).map_err(|e| format!("connect {address}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self {
            stream,
            correlation: 0,
            waiting: Vec::new(),
            join_group_version: 5,
        })
    }

    /// Whether an answer is still to come.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Writes `request`.
    ///
    /// # Panics
    /// For a request this module does not speak.
    pub fn send(&mut self, request: &Request) -> Result<(), String> {
        let (key, version, body) = encode(request, self.join_group_version);
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(s("eosim-differential")));
        let mut frame = BytesMut::new();
        header
            .encode(&mut frame, key.request_header_version(version))
            .expect("encode header");
        frame.extend_from_slice(&body);
        let mut out = BytesMut::with_capacity(frame.len() + 4);
        out.put_i32(frame.len() as i32);
        out.extend_from_slice(&frame);
        self.stream
            .write_all(&out)
            .map_err(|e| format!("write: {e}"))?;
        self.waiting.push((key, version));
        Ok(())
    }

    /// The next answer if one arrives within `wait`; `None` if none did.
    pub fn try_recv(&mut self, wait: Duration) -> Result<Option<Response>, String> {
        let Some(&(key, version)) = self.waiting.first() else {
            return Ok(None);
        };
        self.stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .map_err(|e| e.to_string())?;
        let mut size = [0u8; 4];
        match self.stream.peek(&mut size[..1]) {
            Ok(0) => return Err("the broker closed the connection".into()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(None)
            }
            Err(e) => return Err(format!("read: {e}")),
        }
        self.stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        self.stream
            .read_exact(&mut size)
            .map_err(|e| format!("read size: {e}"))?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream
            .read_exact(&mut frame)
            .map_err(|e| format!("read frame: {e}"))?;
        let mut buf = Bytes::from(frame);
        let header = ResponseHeader::decode(&mut buf, key.response_header_version(version))
            .map_err(|e| format!("decode header: {e}"))?;
        let expected = self.correlation - self.waiting.len() as i32 + 1;
        if header.correlation_id != expected {
            return Err(format!(
                "correlation id {} where {expected} was due",
                header.correlation_id
            ));
        }
        self.waiting.remove(0);
        Ok(Some(decode(key, version, buf)))
    }

    /// Sends `request` and waits up to 30 s for its answer.
    pub fn call(&mut self, request: &Request) -> Result<Response, String> {
        self.send(request)?;
        self.try_recv(Duration::from_secs(30))?
            .ok_or_else(|| format!("no answer to {request:?} within 30 s"))
    }
}

fn encode(request: &Request, join_group_version: i16) -> (ApiKey, i16, BytesMut) {
    let mut body = BytesMut::new();
    let (key, version) = match request {
        Request::FindCoordinator { key, kind } => {
            let v = 3;
            let key_type = match kind {
                CoordinatorKind::Group => 0,
                CoordinatorKind::Transaction => 1,
            };
            FindCoordinatorRequest::default()
                .with_key(s(key))
                .with_key_type(key_type)
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::FindCoordinator, v)
        }
        Request::JoinGroup {
            group_id,
            member_id,
            group_instance_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            topics,
            protocols,
        } => {
            let v = join_group_version;
            let offered = protocols.names.iter().map(|name| {
                JoinGroupRequestProtocol::default()
                    .with_name(s(name))
                    .with_metadata(subscription(topics, &protocols.owned))
            });
            JoinGroupRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_session_timeout_ms(*session_timeout_ms as i32)
                .with_rebalance_timeout_ms(*rebalance_timeout_ms as i32)
                .with_member_id(s(member_id))
                .with_group_instance_id(group_instance_id.as_deref().map(s))
                .with_protocol_type(s("consumer"))
                .with_protocols(offered.collect())
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::JoinGroup, v)
        }
        Request::SyncGroup {
            group_id,
            generation,
            member_id,
            assignments,
        } => {
            let v = 3;
            SyncGroupRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_generation_id(*generation)
                .with_member_id(s(member_id))
                .with_assignments(
                    assignments
                        .iter()
                        .map(|(member, partitions)| {
                            SyncGroupRequestAssignment::default()
                                .with_member_id(s(member))
                                .with_assignment(assignment(partitions))
                        })
                        .collect(),
                )
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::SyncGroup, v)
        }
        Request::Heartbeat {
            group_id,
            generation,
            member_id,
        } => {
            let v = 3;
            HeartbeatRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_generation_id(*generation)
                .with_member_id(s(member_id))
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::Heartbeat, v)
        }
        Request::LeaveGroup {
            group_id,
            member_id,
        } => {
            let v = 3;
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_members(vec![MemberIdentity::default().with_member_id(s(member_id))])
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::LeaveGroup, v)
        }
        Request::OffsetCommit {
            group_id,
            generation,
            member_id,
            offsets,
        } => {
            let v = 7;
            let mut by_topic: BTreeMap<
                &str,
                Vec<offset_commit_request::OffsetCommitRequestPartition>,
            > = BTreeMap::new();
            for (tp, offset) in offsets {
                by_topic.entry(&tp.topic).or_default().push(
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(tp.partition as i32)
                        .with_committed_offset(*offset)
                        .with_committed_leader_epoch(-1),
                );
            }
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_generation_id_or_member_epoch(*generation)
                .with_member_id(s(member_id))
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(topic, partitions)| {
                            offset_commit_request::OffsetCommitRequestTopic::default()
                                .with_name(TopicName(s(topic)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::OffsetCommit, v)
        }
        Request::OffsetFetch {
            group_id,
            partitions,
        } => {
            let v = 5;
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in partitions {
                by_topic
                    .entry(&tp.topic)
                    .or_default()
                    .push(tp.partition as i32);
            }
            OffsetFetchRequest::default()
                .with_group_id(GroupId(s(group_id)))
                .with_topics(Some(
                    by_topic
                        .into_iter()
                        .map(|(topic, indexes)| {
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(TopicName(s(topic)))
                                .with_partition_indexes(indexes)
                        })
                        .collect(),
                ))
                .encode(&mut body, v)
                .expect("encode");
            (ApiKey::OffsetFetch, v)
        }
        other => panic!("wire: {other:?} is not spoken here"),
    };
    (key, version, body)
}

fn decode(key: ApiKey, version: i16, mut buf: Bytes) -> Response {
    let or_error = |code: i16, ok: Response| match error(code) {
        Some(e) => Response::Error(e),
        None => ok,
    };
    match key {
        ApiKey::FindCoordinator => {
            let r = FindCoordinatorResponse::decode(&mut buf, version).expect("decode");
            or_error(
                r.error_code,
                Response::FindCoordinator {
                    broker: r.node_id.0 as u32,
                },
            )
        }
        ApiKey::JoinGroup => {
            let r = JoinGroupResponse::decode(&mut buf, version).expect("decode");
            if error(r.error_code) == Some(KafkaError::MemberIdRequired) {
                return Response::MemberIdRequired {
                    member_id: r.member_id.to_string(),
                };
            }
            let subscriptions: Vec<(String, (Vec<String>, OwnedPartitions))> = (r.members.iter())
                .map(|m| (m.member_id.to_string(), subscribed(m.metadata.clone())))
                .collect();
            let members = (subscriptions.iter())
                .map(|(id, (topics, _))| (id.clone(), topics.clone()))
                .collect();
            let owned = (subscriptions.into_iter())
                .map(|(id, (_, owned))| (id, owned))
                .collect();
            or_error(
                r.error_code,
                Response::JoinGroup {
                    generation: r.generation_id,
                    member_id: r.member_id.to_string(),
                    leader: r.leader.to_string(),
                    protocol: r
                        .protocol_name
                        .as_ref()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    members,
                    owned,
                    skip_assignment: r.skip_assignment,
                },
            )
        }
        ApiKey::SyncGroup => {
            let r = SyncGroupResponse::decode(&mut buf, version).expect("decode");
            let assignment = assigned_partitions(r.assignment.clone());
            or_error(r.error_code, Response::SyncGroup { assignment })
        }
        ApiKey::Heartbeat => {
            let r = HeartbeatResponse::decode(&mut buf, version).expect("decode");
            or_error(r.error_code, Response::Heartbeat)
        }
        ApiKey::LeaveGroup => {
            let r = LeaveGroupResponse::decode(&mut buf, version).expect("decode");
            let code = std::iter::once(r.error_code)
                .chain(r.members.iter().map(|m| m.error_code))
                .find(|c| *c != 0)
                .unwrap_or(0);
            or_error(code, Response::LeaveGroup)
        }
        ApiKey::OffsetCommit => {
            let r = OffsetCommitResponse::decode(&mut buf, version).expect("decode");
            let code = r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .find(|c| *c != 0)
                .unwrap_or(0);
            or_error(code, Response::OffsetCommit)
        }
        ApiKey::OffsetFetch => {
            let r = OffsetFetchResponse::decode(&mut buf, version).expect("decode");
            let offsets = r
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            TopicPartition::new(t.name.0.as_str(), p.partition_index as u32),
                            p.committed_offset,
                        )
                    })
                })
                .collect();
            or_error(r.error_code, Response::OffsetFetch { offsets })
        }
        other => panic!("wire: no decoder for {other:?}"),
    }
}
