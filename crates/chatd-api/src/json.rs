//! JSON request bodies into typed values, in the API.md error shape (API.md
//! "Errors"): [`parse_json`]. A leaf: it knows only [`crate::error`], so the
//! wire types ([`crate::objects`]) and the extractors ([`crate::extract`],
//! whose [`Json`](crate::extract::Json) reads a body and hands it here) use
//! it without depending on the handlers' state.
//!
//! The bytes are parsed into a [`serde_json::Value`] first (malformed JSON,
//! nesting deeper than 128, numbers out of range → `400` naming `body`),
//! then checked for NUL characters, which PostgreSQL cannot store, then
//! deserialized into `T` with the failing field's path
//! ([`serde_path_to_error`]). An integer field takes any JSON number without
//! a fractional part (`3.0` is `3`), as the OpenAPI document's `integer`
//! type promises; a struct must be a JSON object (not an array of its
//! fields).

use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Deserializes JSON `bytes` into `T` (see the module doc).
///
/// # Errors
/// `400` with `validations` naming the field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "Malformed JSON body.")
            .with_validation("body", e.to_string())
    })?;
    if let Some(field) = find_nul(&value, String::new()) {
        let field = if field.is_empty() {
            "body".to_owned()
        } else {
            field
        };
        return Err(ApiError::invalid(
            field,
            "must not contain NUL (\\u0000) characters",
        ));
    }
    serde_path_to_error::deserialize::<_, T>(StrictValue(value)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        ApiError::invalid(field_of(&path, &message), message)
    })
}

/// A deserializer over a parsed [`Value`] that is stricter than
/// `serde_json`'s: a struct must be a JSON object (serde_json also accepts
/// an array of the fields in order, which would let `[]` pass for a body
/// whose fields are all optional).
struct StrictValue(Value);

impl<'de> serde::Deserializer<'de> for StrictValue {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => {
                let len = items.len();
                let mut seq =
                    serde::de::value::SeqDeserializer::new(items.into_iter().map(StrictValue));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()
                    .map_err(|_| serde::de::Error::invalid_length(len, &"fewer elements"))?;
                Ok(value)
            }
            Value::Object(map) => {
                let mut access = serde::de::value::MapDeserializer::new(
                    map.into_iter().map(|(k, v)| (k, StrictValue(v))),
                );
                let value = visitor.visit_map(&mut access)?;
                access.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(StrictValue(other)),
        }
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => Err(serde::de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_enum<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        use serde::de::IntoDeserializer as _;
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            other => Err(serde::de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_i8<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_i16<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_i32<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_i64<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_u8<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_u16<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_u32<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    fn deserialize_u64<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_integer(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

impl StrictValue {
    /// An integer field: a JSON number with no fractional part counts as
    /// the integer it equals, however it is written (`3`, `3.0`, `3e0`),
    /// as JSON Schema's `integer` says (the OpenAPI document types these
    /// fields `integer`); anything else as [`serde::Deserializer::deserialize_any`].
    fn deserialize_integer<'de, V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, serde::de::value::Error> {
        use serde::Deserializer as _;
        if let Value::Number(n) = &self.0
            && n.as_i64().is_none()
            && n.as_u64().is_none()
            && let Some(f) = n.as_f64()
            && f.fract() == 0.0
        {
            // 2^63 and 2^64 are exact in f64; within these bounds the casts
            // are exact too.
            if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                return visitor.visit_i64(f as i64);
            }
            if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                return visitor.visit_u64(f as u64);
            }
        }
        self.deserialize_any(visitor)
    }
}

impl<'de> serde::de::IntoDeserializer<'de, serde::de::value::Error> for StrictValue {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

fn unexpected(value: &Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            _ => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// The field an error is about: the path, extended with the field named in a
/// "missing field `x`" message (serde reports those at the parent's path).
fn field_of(path: &str, message: &str) -> String {
    let parent = if path == "." { "" } else { path };
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.split('`').next()
    {
        return if parent.is_empty() {
            name.to_owned()
        } else {
            format!("{parent}.{name}")
        };
    }
    if parent.is_empty() {
        "body".to_owned()
    } else {
        parent.to_owned()
    }
}

/// The path of the first string (or object key) containing NUL.
fn find_nul(value: &Value, path: String) -> Option<String> {
    match value {
        Value::String(s) if s.contains('\0') => Some(path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_nul(v, format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let child = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k.contains('\0') {
                Some(child)
            } else {
                find_nul(v, child)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Probe {
        a: i32,
        b: Option<Vec<Inner>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        x: String,
    }

    fn field(body: &str) -> String {
        let err = parse_json::<Probe>(body.as_bytes()).unwrap_err();
        err.body().validations[0].field.clone()
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field(r#"{"a": "x"}"#), "a");
        assert_eq!(field(r#"{"b": []}"#), "a");
        assert_eq!(field(r#"{"a": 99999999999}"#), "a");
        assert_eq!(field(r#"{"a": 1, "b": [{"x": 1}]}"#), "b[0].x");
        assert_eq!(field(r#"{"a": 1, "b": [{}]}"#), "b[0].x");
        assert_eq!(field(r#"{"a": 1, "b": [{"x": "a\u0000"}]}"#), "b[0].x");
        assert_eq!(field(r#"{"a": 1"#), "body");
        assert_eq!(field(r#"[1]"#), "body");
        assert_eq!(field(r#"[]"#), "body");
        assert_eq!(field(r#"{"a": 1, "b": [[]]}"#), "b[0]");
        assert_eq!(field(r#"{"a": 1.5}"#), "a");
        assert_eq!(field(r#"{"a": 3e9}"#), "a");
        assert_eq!(field(r#"{"a": 1, "c": 1}"#), "c");
    }

    #[test]
    fn whole_numbers_are_integers_however_written() {
        for body in [
            r#"{"a": 3}"#,
            r#"{"a": 3.0}"#,
            r#"{"a": 3e0}"#,
            r#"{"a": 30e-1}"#,
        ] {
            assert_eq!(parse_json::<Probe>(body.as_bytes()).unwrap().a, 3, "{body}");
        }
        assert_eq!(
            parse_json::<Probe>(br#"{"a": -2147483648.0}"#).unwrap().a,
            i32::MIN
        );
        #[derive(Debug, serde::Deserialize)]
        struct Wide {
            u: u64,
            i: i64,
            f: f64,
            v: Value,
        }
        let wide: Wide = parse_json(
            br#"{"u": 9.007199254740992e15, "i": -9.223372036854775808e18, "f": 2.0, "v": 2.0}"#,
        )
        .unwrap();
        assert_eq!(wide.u, 9_007_199_254_740_992);
        assert_eq!(wide.i, i64::MIN);
        assert_eq!(wide.f, 2.0);
        // Untyped JSON keeps its spelling.
        assert!(wide.v.is_f64());
        for bad in [
            r#"{"a": 1.5}"#,
            r#"{"a": 1.8446744073709552e19}"#,
            r#"{"a": 1e400}"#,
        ] {
            assert!(parse_json::<Probe>(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
