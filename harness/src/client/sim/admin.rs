//! The simulated admin client.

use super::conn::Connection;
use crate::client::{Admin, ClientError};
use async_trait::async_trait;
use eosim_sim::kafka::{KafkaError, Request, Response, TopicConfig};
use std::time::Duration;

/// Admin calls over a [`Connection`], retried on timeouts and retriable errors for up to
/// `timeout`.
pub struct SimAdmin {
    conn: Connection,
    timeout: Duration,
}

impl SimAdmin {
    /// An admin client that gives up after `timeout`.
    pub fn new(conn: Connection, timeout: Duration) -> Self {
        Self { conn, timeout }
    }
}

#[async_trait]
impl Admin for SimAdmin {
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
    ) -> Result<(), ClientError> {
        let deadline = madsim::time::Instant::now() + self.timeout;
        let request = Request::CreateTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            config,
        };
        let mut retried = false;
        loop {
            let attempt = self
                .conn
                .request_any(request.clone(), Duration::from_secs(5))
                .await;
            let error = match attempt {
                Ok(Response::CreateTopic) => return Ok(()),
                // A retry after a lost response finds the topic made by the first attempt.
                Ok(Response::Error(KafkaError::TopicAlreadyExists)) if retried => return Ok(()),
                Ok(Response::Error(e)) if !e.is_retriable() => return Err(ClientError::Kafka(e)),
                Ok(Response::Error(e)) => ClientError::Kafka(e),
                Ok(other) => return Err(ClientError::Fatal(format!("unexpected {other:?}"))),
                Err(e) => e,
            };
            if madsim::time::Instant::now() >= deadline {
                return Err(error);
            }
            retried = true;
            madsim::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
