//! Kafka-on-Pulsar (KoP, streamnative/kop) as a broker flavour of the Kafka model
//! (`[cluster] flavour = "kop"`).
//!
//! KoP is a Pulsar protocol handler that answers the Kafka wire protocol. The model keeps
//! every Kafka behaviour of [`super::model::Cluster`] and changes only the two things a
//! pipeline can tell apart from the outside, each a documented, deterministic function of
//! the configuration below.
//!
//! # What the flavour changes
//!
//! 1. **Offsets come from Pulsar entry positions** ([`OffsetScheme`]). One Kafka produce
//!    batch is one Pulsar entry (KoP's `kafka` entry format; a control marker is one entry
//!    too). Where the entry's records get their offsets depends on the broker's
//!    `brokerEntryMetadataInterceptors`:
//!    - with `org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor` (required
//!      by KoP since 2.8, its documented setup): the broker stamps each entry with an
//!      index that grows by the entry's number of messages; KoP reads an entry's last
//!      offset as that index and its base offset as `index - numMessagesInBatch + 1`
//!      (`MessageMetadataUtils.peekBaseOffsetFromEntry`, `MessageIdUtils`), and the log end
//!      offset as `index + 1` (`getLogEndOffset`). Offsets are then dense over the records
//!      and every marker entry takes one ([`OffsetScheme::BrokerEntryIndex`]): the gaps a
//!      consumer sees are the markers, as in Kafka.
//!    - without it (KoP before 2.8, `MessageIdUtils.getOffset(ledgerId, entryId,
//!      batchIndex)`): an offset packs the Pulsar position,
//!      `ledgerId << 44 | entryId << 12 | batchIndex` (`LEDGER_BITS = 20`,
//!      `ENTRY_BITS = 32`, `BATCH_BITS = 12`). Every entry owns 4096 offsets whatever it
//!      holds, and a ledger roll (after `managedLedgerMaxEntriesPerLedger` entries, Pulsar's
//!      default 50000) jumps by 2^44 ([`OffsetScheme::LedgerEntryBatch`]). Here a consumer
//!      sees gaps after every batch.
//!
//!    In both, the log end offset (and so the high watermark a fetch reports) is one past
//!    the last record or marker, and the next entry starts at or after it: only the base of
//!    the next batch is moved. Nothing in the model or the harness may take offset + 1 for
//!    the next record's offset, or `HW - committed` for a count of records.
//!
//! 2. **The transaction coordinator is a switch**, `kafkaTransactionCoordinatorEnabled`
//!    (KoP's `KafkaServiceConfiguration`, default `false`). With it off, KoP's
//!    `KafkaRequestHandler.getTransactionCoordinator()` throws `IllegalArgumentException`
//!    ("Broker has disabled transaction coordinator, please enable it before using
//!    transaction.") from `handleInitProducerId`, `handleAddPartitionsToTxn`,
//!    `handleAddOffsetsToTxn` and `handleEndTxn`; the exception leaves the handler
//!    synchronously, and `KafkaCommandDecoder.channelRead` answers it with
//!    `log.error("error while handle command:")` and `close()`: **no error code, the
//!    connection is closed**. The model answers these requests with
//!    [`super::Response::ConnectionClosed`], which a client sees as a lost connection (the
//!    request's outcome unknown, retried until its deadline). InitProducerId is refused
//!    with or without a `transactional.id`, so an idempotent producer cannot start either;
//!    a producer with `enable.idempotence=false` and plain consumers are untouched.
//!
//! # What the flavour keeps
//!
//! Everything else is the Kafka model: keyed partitioning, replication, leader election and
//! the high watermark (Pulsar's bookie ensemble and managed-ledger fencing are not
//! modelled; a KoP partition keeps Kafka's replica model), consumer groups and committed
//! offsets (KoP's `GroupCoordinator` is a port of Kafka's), idempotent-producer state, and,
//! with the coordinator on, Kafka's transactions (KoP's `TransactionCoordinator` is a port
//! of Kafka's). A read_committed Fetch is served with the coordinator off as well: KoP's
//! `handleFetchRequest` asks for the transaction coordinator only when it is enabled, and
//! `PartitionLog.readRecords` stops at the first undecided offset, of which there is none
//! when no transaction can start.
//!
//! # Sources
//! streamnative/kop: `kafka-impl/.../KafkaRequestHandler.java`
//! (`getTransactionCoordinator`, `throwIfTransactionCoordinatorDisabled`,
//! `handleInitProducerId`, `handleFetchRequest`), `KafkaCommandDecoder.java`
//! (`channelRead`), `utils/MessageIdUtils.java` (both generations),
//! `utils/MessageMetadataUtils.java`, `storage/PartitionLog.java`; KoP's docs
//! (`docs/configuration.md`: `kafkaTransactionCoordinatorEnabled`,
//! `brokerEntryMetadataInterceptors`); Pulsar's `AppendIndexMetadataInterceptor` and
//! `managedLedgerMaxEntriesPerLedger` (`broker.conf`).
//!
//! # The seed
//! SPEC.md P4 saw a final Routine Load progress of 51,139,566 for 50,000,000 rows. Neither
//! scheme is fitted to that number: with the index interceptor a non-transactional topic
//! is dense, without it the offsets are far larger. What the model guarantees instead is
//! that the gap shape is known for each setting and that pipelines are judged under it.

use super::types::Offset;
use serde::{Deserialize, Serialize};

/// Pulsar's class name of the interceptor that makes KoP's offsets continuous.
pub const APPEND_INDEX_METADATA_INTERCEPTOR: &str =
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor";

/// `MessageIdUtils.BATCH_BITS` (KoP before 2.8): bits of the batch index in an offset.
pub const BATCH_BITS: u32 = 12;
/// `MessageIdUtils.ENTRY_BITS`: bits of the entry id.
pub const ENTRY_BITS: u32 = 32;
/// `MessageIdUtils.LEDGER_BITS`: bits of the ledger id (the sign bit stays clear).
pub const LEDGER_BITS: u32 = 20;
const _: () = assert!(LEDGER_BITS + ENTRY_BITS + BATCH_BITS == 64);

/// Records one entry can hold under [`OffsetScheme::LedgerEntryBatch`]: the batch index has
/// [`BATCH_BITS`] bits (`checkArgument(batchIndex < (1 << BATCH_BITS))` in KoP).
pub const RECORDS_PER_ENTRY_MAX: usize = 1 << BATCH_BITS;

/// Pulsar's default `managedLedgerMaxEntriesPerLedger`.
pub const MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER_DEFAULT: u64 = 50_000;

/// How a partition log gives offsets to an appended batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OffsetScheme {
    /// Kafka (`UnifiedLog`): a batch starts at the log end offset.
    #[default]
    Dense,
    /// KoP with `AppendIndexMetadataInterceptor`: the broker entry index. A batch of `n`
    /// records moves the index by `n`, a marker entry by 1, so offsets are placed as
    /// Kafka places them; kept apart from [`OffsetScheme::Dense`] so reports and tests say
    /// which broker gave them.
    BrokerEntryIndex,
    /// KoP without the interceptor: `ledgerId << 44 | entryId << 12 | batchIndex`.
    LedgerEntryBatch {
        /// `managedLedgerMaxEntriesPerLedger`: entries before the ledger rolls over.
        max_entries_per_ledger: u64,
    },
}

/// A Pulsar position as KoP before 2.8 packed it into an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// Ledger id (the model numbers each partition's ledgers 0, 1, 2, ...).
    pub ledger_id: i64,
    /// Entry id within the ledger.
    pub entry_id: i64,
    /// Index of the record within the entry's batch.
    pub batch_index: i64,
}

impl Position {
    /// `MessageIdUtils.getOffset(ledgerId, entryId, batchIndex)`.
    pub fn offset(self) -> Offset {
        assert!(
            self.ledger_id >= 0 && self.ledger_id < 1 << LEDGER_BITS,
            "ledger id"
        );
        assert!(
            self.entry_id >= 0 && self.entry_id < 1 << ENTRY_BITS,
            "entry id"
        );
        assert!(
            self.batch_index >= 0 && self.batch_index < 1 << BATCH_BITS,
            "batch index"
        );
        (self.ledger_id << (ENTRY_BITS + BATCH_BITS))
            | (self.entry_id << BATCH_BITS)
            | self.batch_index
    }

    /// The position an offset packs (the inverse of [`Position::offset`]).
    pub fn of(offset: Offset) -> Self {
        assert!(offset >= 0, "offsets are not negative");
        Self {
            ledger_id: offset >> (ENTRY_BITS + BATCH_BITS),
            entry_id: (offset >> BATCH_BITS) & ((1 << ENTRY_BITS) - 1),
            batch_index: offset & ((1 << BATCH_BITS) - 1),
        }
    }
}

impl OffsetScheme {
    /// The scheme a KoP broker with these `brokerEntryMetadataInterceptors` uses.
    pub fn for_kop(interceptors: &[String], max_entries_per_ledger: u64) -> Self {
        if interceptors
            .iter()
            .any(|i| i == APPEND_INDEX_METADATA_INTERCEPTOR)
        {
            OffsetScheme::BrokerEntryIndex
        } else {
            OffsetScheme::LedgerEntryBatch {
                max_entries_per_ledger: max_entries_per_ledger.max(1),
            }
        }
    }

    /// Base offset of the next entry of a log whose end offset is `log_end_offset` and
    /// whose last batch starts at `last_base` (`None`: empty log). Never below the log end
    /// offset; equal to it except under [`OffsetScheme::LedgerEntryBatch`], where the next
    /// entry is the entry after the last one's (the next ledger after
    /// `max_entries_per_ledger` entries).
    pub fn next_base_offset(self, log_end_offset: Offset, last_base: Option<Offset>) -> Offset {
        let next = match (self, last_base) {
            (OffsetScheme::Dense | OffsetScheme::BrokerEntryIndex, _) => log_end_offset,
            (OffsetScheme::LedgerEntryBatch { .. }, None) => {
                // An empty log (or one truncated to nothing) starts its ledger again at
                // the first entry at or after the log end offset.
                let p = Position::of(log_end_offset);
                let bump = i64::from(p.batch_index > 0);
                Position {
                    ledger_id: p.ledger_id,
                    entry_id: p.entry_id + bump,
                    batch_index: 0,
                }
                .offset()
            }
            (
                OffsetScheme::LedgerEntryBatch {
                    max_entries_per_ledger,
                },
                Some(base),
            ) => {
                let p = Position::of(base);
                let rolls = (p.entry_id + 1) as u64 >= max_entries_per_ledger;
                let next = if rolls {
                    Position {
                        ledger_id: p.ledger_id + 1,
                        entry_id: 0,
                        batch_index: 0,
                    }
                } else {
                    Position {
                        entry_id: p.entry_id + 1,
                        batch_index: 0,
                        ..p
                    }
                };
                next.offset()
            }
        };
        assert!(
            next >= log_end_offset,
            "the next entry starts at or after the LEO"
        );
        next
    }

    /// Records one batch may hold under this scheme, if bounded.
    pub fn records_per_batch_max(self) -> Option<usize> {
        match self {
            OffsetScheme::LedgerEntryBatch { .. } => Some(RECORDS_PER_ENTRY_MAX),
            _ => None,
        }
    }
}

/// The KoP-specific broker settings, with KoP's and Pulsar's names.
///
/// ## Default values
/// `kafka_transaction_coordinator_enabled = false` (KoP's default),
/// `broker_entry_metadata_interceptors = [AppendIndexMetadataInterceptor]` (KoP's documented
/// setup), `managed_ledger_max_entries_per_ledger = 50000` (Pulsar's default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KopConfig {
    /// `kafkaTransactionCoordinatorEnabled`.
    pub kafka_transaction_coordinator_enabled: bool,
    /// `brokerEntryMetadataInterceptors` (Pulsar class names).
    pub broker_entry_metadata_interceptors: Vec<String>,
    /// `managedLedgerMaxEntriesPerLedger`.
    pub managed_ledger_max_entries_per_ledger: u64,
}

impl Default for KopConfig {
    fn default() -> Self {
        Self {
            kafka_transaction_coordinator_enabled: false,
            broker_entry_metadata_interceptors: vec![APPEND_INDEX_METADATA_INTERCEPTOR.into()],
            managed_ledger_max_entries_per_ledger: MANAGED_LEDGER_MAX_ENTRIES_PER_LEDGER_DEFAULT,
        }
    }
}

impl KopConfig {
    /// The offset scheme these settings give.
    pub fn offset_scheme(&self) -> OffsetScheme {
        OffsetScheme::for_kop(
            &self.broker_entry_metadata_interceptors,
            self.managed_ledger_max_entries_per_ledger,
        )
    }
}

/// Which broker answers the Kafka protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Flavour {
    /// Apache Kafka.
    #[default]
    Kafka,
    /// Kafka-on-Pulsar with its settings.
    Kop(KopConfig),
}

impl Flavour {
    /// The offset scheme of every partition log.
    pub fn offset_scheme(&self) -> OffsetScheme {
        match self {
            Flavour::Kafka => OffsetScheme::Dense,
            Flavour::Kop(kop) => kop.offset_scheme(),
        }
    }

    /// Why a transaction-coordinator request is refused by closing the connection, if it
    /// is (KoP with `kafkaTransactionCoordinatorEnabled=false`).
    pub fn transaction_coordinator_refusal(&self) -> Option<&'static str> {
        match self {
            Flavour::Kop(kop) if !kop.kafka_transaction_coordinator_enabled => {
                Some(TRANSACTION_COORDINATOR_DISABLED)
            }
            _ => None,
        }
    }
}

/// The reason KoP gives (in its log) when it closes a connection over a transaction
/// request with the coordinator disabled.
pub const TRANSACTION_COORDINATOR_DISABLED: &str =
    "KoP kafkaTransactionCoordinatorEnabled=false: Broker has disabled transaction \
     coordinator, please enable it before using transaction.";

#[cfg(test)]
mod tests {
    use super::*;

    const LEGACY: OffsetScheme = OffsetScheme::LedgerEntryBatch {
        max_entries_per_ledger: 3,
    };

    #[test]
    fn positions_pack_as_kop_message_id_utils_packs_them() {
        let p = Position {
            ledger_id: 5,
            entry_id: 7,
            batch_index: 9,
        };
        assert_eq!(p.offset(), (5 << 44) | (7 << 12) | 9);
        assert_eq!(Position::of(p.offset()), p);
    }

    #[test]
    fn legacy_entries_own_4096_offsets_and_ledgers_roll_by_two_to_the_44() {
        let first = LEGACY.next_base_offset(0, None);
        assert_eq!(first, 0);
        let second = LEGACY.next_base_offset(first + 10, Some(first));
        assert_eq!(second, 4096, "the next entry, whatever the first held");
        let third = LEGACY.next_base_offset(second + 1, Some(second));
        assert_eq!(third, 8192);
        let fourth = LEGACY.next_base_offset(third + 1, Some(third));
        assert_eq!(
            fourth,
            1 << 44,
            "entry 3 of a 3-entry ledger opens ledger 1"
        );
    }

    #[test]
    fn index_offsets_follow_the_log_end_offset_as_kafka_does() {
        for scheme in [OffsetScheme::Dense, OffsetScheme::BrokerEntryIndex] {
            assert_eq!(scheme.next_base_offset(17, Some(12)), 17);
        }
    }

    #[test]
    fn interceptors_choose_the_scheme() {
        let kop = KopConfig::default();
        assert_eq!(kop.offset_scheme(), OffsetScheme::BrokerEntryIndex);
        let legacy = KopConfig {
            broker_entry_metadata_interceptors: vec![],
            ..KopConfig::default()
        };
        assert!(matches!(
            legacy.offset_scheme(),
            OffsetScheme::LedgerEntryBatch {
                max_entries_per_ledger: 50_000
            }
        ));
        assert!(Flavour::Kop(kop)
            .transaction_coordinator_refusal()
            .is_some());
        assert!(Flavour::Kafka.transaction_coordinator_refusal().is_none());
    }
}
