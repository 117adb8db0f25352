//! Conversions between `serde_json::Value` and the protobuf well-known JSON types
//! (`google.protobuf.Struct` and `Value`), used for tool arguments and outputs.
//!
//! Protobuf numbers are doubles. A double with no fractional part that fits in an
//! i64 converts back to a JSON integer, so `{"offset": 10}` survives the round trip
//! as an integer and deserializes into integer fields.

use crate::wkt::value::Kind;
use crate::wkt::{ListValue, Struct, Value};
use serde_json::{Map, Number, Value as Json};

/// Converts a JSON value into a protobuf `Value`.
pub fn to_value(json: Json) -> Value {
    let kind = match json {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Kind::StringValue(s),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.into_iter().map(to_value).collect(),
        }),
        Json::Object(map) => Kind::StructValue(to_struct(map)),
    };
    Value { kind: Some(kind) }
}

/// Converts a JSON object into a protobuf `Struct`.
pub fn to_struct(map: Map<String, Json>) -> Struct {
    Struct {
        fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
    }
}

/// Converts a protobuf `Value` into JSON. A missing kind is JSON null.
pub fn from_value(value: Value) -> Json {
    match value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::ListValue(list)) => {
            Json::Array(list.values.into_iter().map(from_value).collect())
        }
        Some(Kind::StructValue(s)) => Json::Object(from_struct(s)),
    }
}

/// Converts a protobuf `Struct` into a JSON object.
pub fn from_struct(s: Struct) -> Map<String, Json> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, from_value(v)))
        .collect()
}

// Largest magnitude at which every integer is exactly representable as f64.
const EXACT_INT_LIMIT: f64 = 9_007_199_254_740_992.0;

fn number(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() <= EXACT_INT_LIMIT {
        // Exact: |n| <= 2^53 and n has no fractional part.
        #[allow(clippy::cast_possible_truncation)]
        return Json::Number(Number::from(n as i64));
    }
    Number::from_f64(n).map_or(Json::Null, Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_survive_the_round_trip_as_integers() {
        let original =
            json!({"offset": 10, "limit": -3, "ratio": 0.5, "big": 1_700_000_000_000_i64});
        let back = from_value(to_value(original.clone()));
        assert_eq!(back, original);
        assert!(back["offset"].is_i64());
    }

    #[test]
    fn nested_values_round_trip() {
        let original = json!({"patches": [{"find": "a", "replace": "b", "start_line": 3}], "flag": true, "none": null});
        assert_eq!(from_value(to_value(original.clone())), original);
    }

    #[test]
    fn non_finite_numbers_become_null() {
        let v = Value {
            kind: Some(Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(from_value(v), Json::Null);
    }
}
