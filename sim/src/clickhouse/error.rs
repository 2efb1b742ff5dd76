//! ClickHouse server errors, named and numbered as in ClickHouse's
//! `src/Common/ErrorCodes.cpp`.

use super::keeper::KeeperError;
use serde::{Deserialize, Serialize};

/// A ClickHouse error code: the number and the name `ErrorCodes.cpp` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// 16: a column named in the input does not exist (`NO_SUCH_COLUMN_IN_TABLE`).
    NoSuchColumnInTable,
    /// 27: the text parser met something it did not expect (`Cannot parse input: ...`).
    CannotParseInputAssertionFailed,
    /// 36: bad arguments, e.g. KeeperMap without `keeper_map_path_prefix`.
    BadArguments,
    /// 41: a DateTime value could not be parsed.
    CannotParseDatetime,
    /// 53: a value of the wrong type for its column (for example a JSON object for UInt8).
    TypeMismatch,
    /// 56: unknown table engine (KeeperMap on 18.16).
    UnknownStorage,
    /// 57: `CREATE TABLE` of a table that exists.
    TableAlreadyExists,
    /// 60: the table does not exist.
    UnknownTable,
    /// 69: a value outside its type's range (`convertFieldToTypeOrThrow`).
    ArgumentOutOfBound,
    /// 115: a setting this server version does not know.
    UnknownSetting,
    /// 117: incorrect data, e.g. an unknown field in JSONEachRow.
    IncorrectData,
    /// 181: `FINAL` on an engine that does not support it.
    IllegalFinal,
    /// 225: no ZooKeeper/Keeper configured or reachable.
    NoZookeeper,
    /// 242: a Replicated table without a Keeper session is read-only.
    TableIsReadOnly,
    /// 290: a limit was exceeded (KeeperMap `keys_limit`).
    LimitExceeded,
    /// 319: the connection to Keeper was lost while the part was committed.
    UnknownStatusOfInsert,
    /// 349: NULL in a non-Nullable column where NULL is not turned into the default.
    CannotInsertNullInOrdinaryColumn,
    /// 999: an error from Keeper (node exists, bad version, no node...).
    KeeperException,
    /// Any other number a real server reported (the model raises none of these).
    Other(i32),
}

impl ErrorCode {
    /// The number ClickHouse reports (`Code: N.`).
    pub fn number(self) -> i32 {
        match self {
            Self::NoSuchColumnInTable => 16,
            Self::CannotParseInputAssertionFailed => 27,
            Self::BadArguments => 36,
            Self::CannotParseDatetime => 41,
            Self::TypeMismatch => 53,
            Self::UnknownStorage => 56,
            Self::TableAlreadyExists => 57,
            Self::UnknownTable => 60,
            Self::ArgumentOutOfBound => 69,
            Self::UnknownSetting => 115,
            Self::IncorrectData => 117,
            Self::IllegalFinal => 181,
            Self::NoZookeeper => 225,
            Self::TableIsReadOnly => 242,
            Self::LimitExceeded => 290,
            Self::UnknownStatusOfInsert => 319,
            Self::CannotInsertNullInOrdinaryColumn => 349,
            Self::KeeperException => 999,
            Self::Other(n) => n,
        }
    }

    /// The codes the model names, each once.
    pub const NAMED: [ErrorCode; 18] = [
        Self::NoSuchColumnInTable,
        Self::CannotParseInputAssertionFailed,
        Self::BadArguments,
        Self::CannotParseDatetime,
        Self::TypeMismatch,
        Self::UnknownStorage,
        Self::TableAlreadyExists,
        Self::UnknownTable,
        Self::ArgumentOutOfBound,
        Self::UnknownSetting,
        Self::IncorrectData,
        Self::IllegalFinal,
        Self::NoZookeeper,
        Self::TableIsReadOnly,
        Self::LimitExceeded,
        Self::UnknownStatusOfInsert,
        Self::CannotInsertNullInOrdinaryColumn,
        Self::KeeperException,
    ];

    /// The code a server reported as `Code: n`: a named one, or [`ErrorCode::Other`].
    pub fn from_number(n: i32) -> Self {
        Self::NAMED
            .into_iter()
            .find(|c| c.number() == n)
            .unwrap_or(Self::Other(n))
    }

    /// The name in `ErrorCodes.cpp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoSuchColumnInTable => "NO_SUCH_COLUMN_IN_TABLE",
            Self::CannotParseInputAssertionFailed => "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
            Self::BadArguments => "BAD_ARGUMENTS",
            Self::CannotParseDatetime => "CANNOT_PARSE_DATETIME",
            Self::TypeMismatch => "TYPE_MISMATCH",
            Self::UnknownStorage => "UNKNOWN_STORAGE",
            Self::TableAlreadyExists => "TABLE_ALREADY_EXISTS",
            Self::UnknownTable => "UNKNOWN_TABLE",
            Self::ArgumentOutOfBound => "ARGUMENT_OUT_OF_BOUND",
            Self::UnknownSetting => "UNKNOWN_SETTING",
            Self::IncorrectData => "INCORRECT_DATA",
            Self::IllegalFinal => "ILLEGAL_FINAL",
            Self::NoZookeeper => "NO_ZOOKEEPER",
            Self::TableIsReadOnly => "TABLE_IS_READ_ONLY",
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::UnknownStatusOfInsert => "UNKNOWN_STATUS_OF_INSERT",
            Self::CannotInsertNullInOrdinaryColumn => "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
            Self::KeeperException => "KEEPER_EXCEPTION",
            Self::Other(_) => "OTHER",
        }
    }
}

/// An exception as the server reports it: `Code: 53. DB::Exception: <message>. (TYPE_MISMATCH)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("Code: {}. DB::Exception: {message}. ({})", code.number(), code.name())]
pub struct ChError {
    /// The code.
    pub code: ErrorCode,
    /// The message (ClickHouse's wording where known).
    pub message: String,
    /// For `KEEPER_EXCEPTION`: the Keeper error behind it.
    pub keeper_error: Option<KeeperError>,
}

impl ChError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            keeper_error: None,
        }
    }
}

impl From<KeeperError> for ChError {
    /// `KEEPER_EXCEPTION` (999) carrying the Keeper error, as ClickHouse's
    /// `Coordination::Exception` does.
    fn from(e: KeeperError) -> Self {
        let mut error = Self::new(
            ErrorCode::KeeperException,
            format!("Coordination::Exception: {e}"),
        );
        error.keeper_error = Some(e);
        error
    }
}
