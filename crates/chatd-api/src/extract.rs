//! Input parsing that answers in the API.md error shape (API.md "Errors" and
//! "Details": order of checks).
//!
//! axum's stock extractors answer `422`/`415` with plain-text bodies and read
//! the body before the handler runs. Here:
//! - [`PathParams`] only collects the raw path parameters; handlers parse them
//!   ([`PathParams::uuid`], [`PathParams::id`]) after authentication, so that
//!   `401` comes before `400`.
//! - [`Json<T>`] is the one extractor of a JSON request body: the handler
//!   names its request type `T` (which the `#[utoipa::path]` of the handler
//!   documents as the request body, so the OpenAPI document and the handler
//!   cannot disagree), and reads it with [`Json::read`] after the visibility
//!   and permission checks, so that `404` and `403` (admin) come before
//!   `415`, `413` and `400`. Reading checks the media type (`415` for a body
//!   that is not `application/json`), the size (`413`), then hands the bytes
//!   to [`parse_json`] (the leaf [`crate::json`], re-exported here), which parses them
//!   into a [`serde_json::Value`] first (malformed JSON, nesting deeper than
//!   128, numbers out of range → `400` naming `body`), then checks it for
//!   NUL characters, which PostgreSQL cannot store, then deserializes it into
//!   `T` with the failing field's path ([`serde_path_to_error`]). An integer
//!   field takes any JSON number without a fractional part (`3.0` is `3`),
//!   as the document's `integer` type promises.
//! - [`QueryParams`] parses the query string (repeated keys allowed).

use std::marker::PhantomData;

use axum::body::{Body, HttpBody as _};
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use futures::StreamExt as _;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
pub use crate::json::parse_json;

/// The JSON request body of a route, of type `T`, not yet read.
///
/// Extracting it never fails and reads nothing: it keeps the body, whether
/// the request declared a JSON media type and the body limit
/// ([`crate::ApiOptions::body_limit_bytes`]). [`Json::read`] reads and
/// checks it when the handler's earlier checks have passed.
#[derive(Debug)]
pub struct Json<T> {
    body: Body,
    media_type: MediaType,
    limit: usize,
    request: PhantomData<fn() -> T>,
}

/// What the request's `Content-Type` says about its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MediaType {
    /// `application/json` (parameters such as `charset` allowed).
    Json,
    /// No `Content-Type`.
    Absent,
    /// Anything else.
    Other,
}

impl<T: DeserializeOwned> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let media_type = media_type(request.headers());
        Ok(Self {
            body: request.into_body(),
            media_type,
            limit: state.options().body_limit_bytes,
            request: PhantomData,
        })
    }
}

impl<T: DeserializeOwned> Json<T> {
    /// Reads at most the body limit of bytes and deserializes them into `T`.
    ///
    /// A request without `Content-Type` and without a body (declared empty)
    /// is read as the empty body, which is not JSON (`400` naming `body`), as
    /// a JSON-typed empty body is.
    ///
    /// # Errors
    /// `415` when the body is not declared `application/json` (nothing is
    /// read); `413` when it is larger than the limit; `400` with
    /// `validations` for malformed JSON, NUL characters, wrong types,
    /// unknown fields or enum values and out-of-range numbers.
    pub async fn read(self) -> ApiResult<T> {
        let declared_empty = self.body.size_hint().exact() == Some(0);
        match self.media_type {
            MediaType::Json => {}
            MediaType::Absent if declared_empty => {}
            MediaType::Absent | MediaType::Other => return Err(ApiError::unsupported_media_type()),
        }
        let bytes = read_body(self.body, self.limit).await?;
        parse_json(&bytes)
    }
}

impl<T: DeserializeOwned + Default> Json<T> {
    /// [`Json::read`] for a route whose body is optional: no body at all
    /// (declared empty or sent empty, with or without a JSON
    /// `Content-Type`) and a JSON `null` are `T::default()`.
    ///
    /// # Errors
    /// As [`Json::read`] for a body that is there.
    pub async fn read_or_default(self) -> ApiResult<T> {
        if self.body.size_hint().exact() == Some(0) && self.media_type != MediaType::Other {
            return Ok(T::default());
        }
        match self.media_type {
            MediaType::Json | MediaType::Absent => {}
            MediaType::Other => return Err(ApiError::unsupported_media_type()),
        }
        let bytes = read_body(self.body, self.limit).await?;
        if bytes.is_empty() {
            return Ok(T::default());
        }
        if self.media_type == MediaType::Absent {
            return Err(ApiError::unsupported_media_type());
        }
        // JSON `null` is no body too (the OpenAPI document lets the body be
        // null).
        Ok(parse_json::<Option<T>>(&bytes)?.unwrap_or_default())
    }
}

/// The media type of `headers`' `Content-Type`: `application/json`, with
/// any parameters, in any letter case.
fn media_type(headers: &HeaderMap) -> MediaType {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return MediaType::Absent;
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    if essence.eq_ignore_ascii_case("application/json") {
        MediaType::Json
    } else {
        MediaType::Other
    }
}

/// Collects the body, failing with `413` as soon as it exceeds `limit` bytes,
/// or before reading anything when its declared length (`Content-Length`)
/// does (so a client waiting for `100 Continue` is not asked for it).
///
/// # Errors
/// `413` over the limit; `400` when the body cannot be read.
pub async fn read_body(body: Body, limit: usize) -> ApiResult<Vec<u8>> {
    if body.size_hint().lower() > limit as u64 {
        return Err(ApiError::too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "Could not read the request body.")
                .with_detail(e.to_string())
        })?;
        if bytes.len() + chunk.len() > limit {
            return Err(ApiError::too_large(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The raw, percent-decoded path parameters of a request. Never rejects
/// except for percent-encodings that are not UTF-8 (`400`).
#[derive(Debug, Clone, Default)]
pub struct PathParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for PathParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid_path("path", e.body_text()))?;
        Ok(Self(
            raw.iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ))
    }
}

impl PathParams {
    fn get(&self, name: &str) -> ApiResult<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| ApiError::invalid_path(name, "missing"))
    }

    /// Parameter `name` as a UUID.
    ///
    /// # Errors
    /// `400` naming `name` when it is not a UUID.
    pub fn uuid(&self, name: &str) -> ApiResult<Uuid> {
        parse_uuid(self.get(name)?).ok_or_else(|| ApiError::invalid_path(name, "must be a UUID"))
    }

    /// Parameter `name` as a positive 64-bit id (message and queued-message
    /// ids).
    ///
    /// # Errors
    /// `400` naming `name` when it is not an integer in `1..=2^63-1`.
    pub fn id(&self, name: &str) -> ApiResult<i64> {
        parse_id(self.get(name)?)
            .ok_or_else(|| ApiError::invalid_path(name, "must be a positive 64-bit integer"))
    }

    /// Parameter `name` as given.
    ///
    /// # Errors
    /// `400` when missing.
    pub fn raw(&self, name: &str) -> ApiResult<&str> {
        self.get(name)
    }
}

/// The spellings [`parse_uuid`] accepts, as a regular expression (ECMA-262,
/// Python and the `regex` crate alike): hyphenated or simple, either case.
pub const UUID_PATTERN: &str = "^(?:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}|[0-9A-Fa-f]{32})$";

/// Parses a UUID in its hyphenated (or simple) form ([`UUID_PATTERN`]);
/// braces and URNs are rejected so that one id has one spelling.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    if s.len() != 36 && s.len() != 32 {
        return None;
    }
    Uuid::try_parse(s).ok()
}

/// Parses a positive `i64` written in plain decimal digits.
pub fn parse_id(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok().filter(|v| *v > 0)
}

/// Parsed query string: every `key=value` pair in order.
#[derive(Debug, Clone, Default)]
pub struct QueryParams(Vec<(String, String)>);

impl QueryParams {
    /// Parses `query` (`None` is empty).
    ///
    /// # Errors
    /// `400` when a key or value contains NUL.
    pub fn parse(query: Option<&str>) -> ApiResult<Self> {
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
        if let Some((k, _)) = pairs
            .iter()
            .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::invalid_query(
                k.replace('\0', ""),
                "must not contain NUL characters",
            ));
        }
        Ok(Self(pairs))
    }

    /// The value of `name` (the last one when repeated).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `name` as an integer in `min..=max`, or `default` when absent.
    ///
    /// # Errors
    /// `400` naming `name`.
    pub fn int_in(&self, name: &str, min: i64, max: i64, default: i64) -> ApiResult<i64> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid_query(name, format!("must be an integer in {min}..={max}"))
                }),
        }
    }

    /// `name` as a positive id, if present.
    ///
    /// # Errors
    /// `400` naming `name`.
    pub fn id(&self, name: &str) -> ApiResult<Option<i64>> {
        self.get(name)
            .map(|v| {
                parse_id(v).ok_or_else(|| {
                    ApiError::invalid_query(name, "must be a positive 64-bit integer")
                })
            })
            .transpose()
    }

    /// `name` as a UUID, if present.
    ///
    /// # Errors
    /// `400` naming `name`.
    pub fn uuid(&self, name: &str) -> ApiResult<Option<Uuid>> {
        self.get(name)
            .map(|v| parse_uuid(v).ok_or_else(|| ApiError::invalid_query(name, "must be a UUID")))
            .transpose()
    }

    /// `name` as a boolean (`true`/`false`), if present.
    ///
    /// # Errors
    /// `400` naming `name`.
    pub fn bool(&self, name: &str) -> ApiResult<Option<bool>> {
        self.get(name)
            .map(|v| match v {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(ApiError::invalid_query(name, "must be true or false")),
            })
            .transpose()
    }
}

/// Deserializes a field that distinguishes "absent" (`None`) from `null`
/// (`Some(None)`); use with `#[serde(default, deserialize_with = "...")]`.
///
/// # Errors
/// The inner type's deserialization errors.
pub fn double_option<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_pattern_is_what_parse_uuid_accepts() {
        let pattern = regex::Regex::new(UUID_PATTERN).unwrap();
        let id = Uuid::new_v4();
        for text in [
            id.hyphenated().to_string(),
            id.hyphenated().to_string().to_uppercase(),
            id.simple().to_string(),
            id.braced().to_string(),
            id.urn().to_string(),
            id.hyphenated().to_string().replace('-', "_"),
            format!("{}0", id.simple()),
            "me".to_owned(),
            String::new(),
            "0".repeat(36),
            "g".repeat(32),
        ] {
            assert_eq!(
                pattern.is_match(&text),
                parse_uuid(&text).is_some(),
                "{text}"
            );
        }
    }

    #[test]
    fn ids_are_positive_decimal() {
        assert_eq!(parse_id("1"), Some(1));
        assert_eq!(parse_id("9223372036854775807"), Some(i64::MAX));
        for bad in [
            "0",
            "-1",
            "+1",
            "1.0",
            "9223372036854775808",
            "99999999999999999999",
            "",
            "abc",
        ] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }
}
