//! Converters: record bytes to the JSON a [`SinkRecord`](super::task::SinkRecord) carries,
//! after Kafka Connect's `JsonConverter` and `StringConverter`.
//!
//! `JsonConverter` with `schemas.enable=true` expects the envelope `{"schema": ...,
//! "payload": ...}` and yields the payload; with `false` any JSON document. Null bytes are
//! a null value (a tombstone). Failures are Connect's `DataException`, raised in the
//! converter stage where `errors.tolerance` applies.

use super::config::STRING_CONVERTER;
use bytes::Bytes;
use serde_json::Value;

/// A converter as configured for keys or values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converter {
    /// The class name (`JsonConverter` or `StringConverter`).
    pub class: String,
    /// `schemas.enable` (JsonConverter only).
    pub schemas_enable: bool,
}

impl Converter {
    /// Converts `bytes` (`None` = null).
    ///
    /// # Errors
    /// The `DataException` message Connect would raise.
    pub fn to_connect_data(&self, bytes: Option<&Bytes>) -> Result<Option<Value>, String> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        if self.class == STRING_CONVERTER {
            return Ok(Some(Value::String(
                String::from_utf8_lossy(bytes).into_owned(),
            )));
        }
        let json: Value = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "Converting byte[] to Kafka Connect data failed due to serialization error: {e}"
            )
        })?;
        if !self.schemas_enable {
            return Ok(Some(json));
        }
        match json {
            Value::Object(mut map)
                if map.len() == 2 && map.contains_key("schema") && map.contains_key("payload") =>
            {
                Ok(map.remove("payload").filter(|p| !p.is_null()))
            }
            _ => Err(
                "JsonConverter with schemas.enable requires \"schema\" and \"payload\" \
                      fields and may not contain additional fields. If you are trying to \
                      deserialize plain JSON data, set schemas.enable=false in your converter \
                      configuration."
                    .to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::config::JSON_CONVERTER;

    fn json(schemas_enable: bool) -> Converter {
        Converter {
            class: JSON_CONVERTER.into(),
            schemas_enable,
        }
    }

    #[test]
    fn plain_json_needs_schemas_disabled() {
        let bytes = Bytes::from_static(br#"{"id":1}"#);
        assert_eq!(
            json(false).to_connect_data(Some(&bytes)),
            Ok(Some(serde_json::json!({"id":1})))
        );
        assert!(json(true).to_connect_data(Some(&bytes)).is_err());
    }

    #[test]
    fn schema_envelope_yields_its_payload() {
        let bytes = Bytes::from_static(br#"{"schema":{"type":"int32"},"payload":5}"#);
        assert_eq!(
            json(true).to_connect_data(Some(&bytes)),
            Ok(Some(serde_json::json!(5)))
        );
    }

    #[test]
    fn null_bytes_are_a_tombstone_and_garbage_is_an_error() {
        assert_eq!(json(false).to_connect_data(None), Ok(None));
        let bad = Bytes::from_static(b"not json");
        assert!(json(false)
            .to_connect_data(Some(&bad))
            .unwrap_err()
            .contains("serialization"));
    }
}
