//! `google.protobuf.Timestamp` of the generated code: the well-known type's
//! fields, with proto3 JSON as the mapping says to write it — RFC 3339,
//! Z-normalized, with 0, 3, 6 or 9 fractional digits — and read it (any
//! offset). (`pbjson-types`' own writes `+00:00`.)

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::Error as _;

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let nanos = u32::try_from(self.nanos)
            .map_err(|_| serde::ser::Error::custom("a timestamp's nanos are 0 or more"))?;
        let time = DateTime::<Utc>::from_timestamp(self.seconds, nanos)
            .ok_or_else(|| serde::ser::Error::custom("a timestamp out of range"))?;
        serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let time = DateTime::parse_from_rfc3339(&text)
            .map_err(|e| D::Error::custom(format!("'{text}' is not an RFC 3339 time: {e}")))?;
        Ok(Self {
            seconds: time.timestamp(),
            nanos: i32::try_from(time.timestamp_subsec_nanos()).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_z_normalized_with_the_digits_it_needs_and_read_with_any_offset() {
        let write =
            |seconds, nanos| serde_json::to_string(&Timestamp { seconds, nanos }).expect("JSON");
        assert_eq!(
            write(1_796_609_796, 341_000_000),
            r#""2026-12-07T02:16:36.341Z""#
        );
        assert_eq!(write(1_796_609_796, 0), r#""2026-12-07T02:16:36Z""#);
        assert_eq!(write(0, 1), r#""1970-01-01T00:00:00.000000001Z""#);
        let read = |text: &str| serde_json::from_str::<Timestamp>(text).expect("read");
        assert_eq!(
            read(r#""2026-12-07T03:16:36.341+01:00""#),
            Timestamp {
                seconds: 1_796_609_796,
                nanos: 341_000_000
            }
        );
        assert!(serde_json::from_str::<Timestamp>(r#""yesterday""#).is_err());
    }
}
