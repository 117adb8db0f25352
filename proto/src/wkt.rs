//! The protobuf well-known types the contract uses (`google.protobuf.Struct`,
//! `Value`, `ListValue`, `NullValue`, `Empty`, `Timestamp`), for the generated
//! code: `prost-types`' fields — a Struct's in a `BTreeMap`, so that every
//! answer lists them in one order — with serde's proto3 JSON, which the A2A
//! types' generated JSON (pbjson) writes them with. (`pbjson-types` has the
//! JSON but a `HashMap`: a Struct's fields came out in a new order each time.)

use std::collections::BTreeMap;

use serde::ser::{SerializeMap as _, SerializeSeq as _};
use serde_json::{Map, Value as Json};

pub use crate::timestamp::Timestamp;

/// A JSON object.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Struct {
    #[prost(btree_map = "string, message", tag = "1")]
    pub fields: BTreeMap<String, Value>,
}

/// A JSON value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(oneof = "value::Kind", tags = "1, 2, 3, 4, 5, 6")]
    pub kind: Option<value::Kind>,
}

pub mod value {
    /// What a [`super::Value`] holds.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(enumeration = "super::NullValue", tag = "1")]
        NullValue(i32),
        #[prost(double, tag = "2")]
        NumberValue(f64),
        #[prost(string, tag = "3")]
        StringValue(String),
        #[prost(bool, tag = "4")]
        BoolValue(bool),
        #[prost(message, tag = "5")]
        StructValue(super::Struct),
        #[prost(message, tag = "6")]
        ListValue(super::ListValue),
    }
}

/// A JSON array.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<Value>,
}

/// JSON's null.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NullValue {
    NullValue = 0,
}

/// No fields.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Empty {}

impl serde::Serialize for Struct {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use value::Kind;
        match &self.kind {
            None | Some(Kind::NullValue(_)) => serializer.serialize_unit(),
            // proto3 JSON writes the numbers JSON has none for as strings.
            Some(Kind::NumberValue(n)) if n.is_nan() => serializer.serialize_str("NaN"),
            Some(Kind::NumberValue(n)) if n.is_infinite() && *n > 0.0 => {
                serializer.serialize_str("Infinity")
            }
            Some(Kind::NumberValue(n)) if n.is_infinite() => serializer.serialize_str("-Infinity"),
            Some(Kind::NumberValue(n)) => serializer.serialize_f64(*n),
            Some(Kind::StringValue(s)) => serializer.serialize_str(s),
            Some(Kind::BoolValue(b)) => serializer.serialize_bool(*b),
            Some(Kind::StructValue(s)) => s.serialize(serializer),
            Some(Kind::ListValue(l)) => l.serialize(serializer),
        }
    }
}

impl serde::Serialize for ListValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.values.len()))?;
        for value in &self.values {
            seq.serialize_element(value)?;
        }
        seq.end()
    }
}

impl serde::Serialize for Empty {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_map(Some(0))?.end()
    }
}

impl<'de> serde::Deserialize<'de> for Struct {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(crate::json::to_struct(Map::deserialize(deserializer)?))
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(crate::json::to_value(Json::deserialize(deserializer)?))
    }
}

impl<'de> serde::Deserialize<'de> for ListValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let values = Vec::<Json>::deserialize(deserializer)?;
        Ok(Self {
            values: values.into_iter().map(crate::json::to_value).collect(),
        })
    }
}

impl<'de> serde::Deserialize<'de> for Empty {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::<String, Json>::deserialize(deserializer)?;
        Ok(Self {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_is_written_as_its_json_in_one_order_and_read_back() {
        let json = serde_json::json!({ "z": 1, "a": [true, null, "s", { "m": 1.5 }] });
        let value = crate::json::to_value(json.clone());
        let written = serde_json::to_string(&value).expect("JSON");
        assert_eq!(written, r#"{"a":[true,null,"s",{"m":1.5}],"z":1.0}"#);
        let read: Value = serde_json::from_str(&written).expect("read");
        assert_eq!(read, value);
        let nan = Value {
            kind: Some(value::Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(serde_json::to_string(&nan).expect("JSON"), r#""NaN""#);
    }
}
