//! Limits and validation rules of request fields (API.md "Details":
//! "Limits"). Character limits count Unicode scalar values; byte limits
//! count UTF-8 bytes.

use std::collections::{BTreeMap, HashSet};

use chatd_core::MessagePart;

use crate::error::{ApiError, ApiResult};
use crate::objects::{ChatInputPart, DynamicTool};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Title of a chat created without one.
pub const DEFAULT_TITLE: &str = "New Chat";
/// Longest system prompt, in characters.
pub const MAX_SYSTEM_PROMPT_CHARS: usize = 10_000;
/// Most labels per chat.
pub const MAX_LABELS: usize = 50;
/// Longest label key, in characters.
pub const MAX_LABEL_KEY_CHARS: usize = 64;
/// Longest label value, in characters.
pub const MAX_LABEL_VALUE_CHARS: usize = 256;
/// Most text in one message, in bytes (256 KiB).
pub const MAX_MESSAGE_TEXT_BYTES: usize = 256 * 1024;
/// Most parts in one message.
pub const MAX_MESSAGE_PARTS: usize = 100;
/// Most dynamic tools per chat.
pub const MAX_DYNAMIC_TOOLS: usize = 250;
/// Longest dynamic tool name, in characters.
pub const MAX_TOOL_NAME_CHARS: usize = 64;
/// Most MCP servers per chat.
pub const MAX_MCP_SERVERS: usize = 100;
/// Longest `client_message_id`, in bytes.
pub const MAX_CLIENT_MESSAGE_ID_BYTES: usize = 256;
/// Most tool results in one submission.
pub const MAX_TOOL_RESULTS: usize = 250;
/// Longest dynamic tool description, in characters.
pub const MAX_TOOL_DESCRIPTION_CHARS: usize = 10_000;
/// Longest free-text name fields (display names, token names), in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// Checks message `content` (at `field`) and converts it to stored parts:
/// non-empty, at most [`MAX_MESSAGE_PARTS`] parts, total text at most
/// [`MAX_MESSAGE_TEXT_BYTES`].
///
/// A file part becomes a stored file part without media type or name: the
/// transaction that links the file fills them in
/// ([`chatd_store::ChatTx::link_files`]); whether the file exists, is the
/// owner's and free is checked there too ([`file_link_error`]).
///
/// # Errors
/// `400` naming the field.
pub fn message_content(parts: &[ChatInputPart], field: &str) -> ApiResult<Vec<MessagePart>> {
    if parts.is_empty() {
        return Err(ApiError::invalid(field, "must contain at least one part"));
    }
    if parts.len() > MAX_MESSAGE_PARTS {
        return Err(ApiError::invalid(
            field,
            format!("must contain at most {MAX_MESSAGE_PARTS} parts"),
        ));
    }
    let mut total = 0usize;
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            ChatInputPart::Text { text } => {
                total += text.len();
                out.push(MessagePart::text(text.clone()));
            }
            ChatInputPart::File { file_id } => {
                out.push(MessagePart::File {
                    file_id: *file_id,
                    media_type: String::new(),
                    name: None,
                });
            }
        }
    }
    if total > MAX_MESSAGE_TEXT_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("total text must be at most {MAX_MESSAGE_TEXT_BYTES} bytes (got {total})"),
        ));
    }
    if out
        .iter()
        .all(|p| matches!(p, MessagePart::Text { text, .. } if text.trim().is_empty()))
    {
        return Err(ApiError::invalid(field, "must contain some non-blank text"));
    }
    Ok(out)
}

/// The `400` of a rejected `LinkFiles` for the message `parts` at
/// `field`: an unavailable file names `field[i].file_id` (missing, another
/// user's or linked to another chat: indistinguishable on purpose, so that
/// nobody learns which ids exist), a full chat names `field`. Other errors
/// pass through.
pub fn file_link_error(
    err: chatd_store::StoreError,
    parts: &[ChatInputPart],
    field: &str,
) -> ApiError {
    match err.state() {
        Some(chatd_core::StateError::ChatFileUnavailable { file_id }) => {
            let i = parts
                .iter()
                .position(|p| matches!(p, ChatInputPart::File { file_id: f } if f == file_id))
                .unwrap_or(0);
            ApiError::invalid(
                format!("{field}[{i}].file_id"),
                "file not found, or attached to another chat",
            )
        }
        Some(chatd_core::StateError::ChatFileCapExceeded { max }) => ApiError::invalid(
            field,
            format!("a chat can have at most {max} files attached"),
        ),
        _ => err.into(),
    }
}

/// Checks a title: 1 to [`MAX_TITLE_CHARS`] characters, not blank.
///
/// # Errors
/// `400` naming `title`.
pub fn title(title: &str) -> ApiResult<String> {
    let trimmed = title.trim();
    if trimmed.is_empty() {
        return Err(ApiError::invalid("title", "must not be blank"));
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::invalid(
            "title",
            format!("must be at most {MAX_TITLE_CHARS} characters"),
        ));
    }
    Ok(trimmed.to_owned())
}

/// Checks labels: at most [`MAX_LABELS`]; keys 1 to [`MAX_LABEL_KEY_CHARS`]
/// characters without `:` (the filter syntax `label=k:v` splits at the first
/// colon); values at most [`MAX_LABEL_VALUE_CHARS`] characters.
///
/// # Errors
/// `400` naming `labels` or `labels.<key>`.
pub fn labels(labels: &BTreeMap<String, String>) -> ApiResult<()> {
    if labels.len() > MAX_LABELS {
        return Err(ApiError::invalid(
            "labels",
            format!("at most {MAX_LABELS} labels"),
        ));
    }
    for (k, v) in labels {
        if k.is_empty() || k.chars().count() > MAX_LABEL_KEY_CHARS || k.contains(':') {
            return Err(ApiError::invalid(
                "labels",
                format!("label keys must be 1 to {MAX_LABEL_KEY_CHARS} characters without ':'"),
            ));
        }
        if v.chars().count() > MAX_LABEL_VALUE_CHARS {
            return Err(ApiError::invalid(
                format!("labels.{k}"),
                format!("must be at most {MAX_LABEL_VALUE_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

/// Checks dynamic tools: at most [`MAX_DYNAMIC_TOOLS`], unique names of 1 to
/// [`MAX_TOOL_NAME_CHARS`] letters, digits, `_` or `-`, `input_schema` a JSON
/// object.
///
/// # Errors
/// `400` naming `dynamic_tools[i].<field>`.
pub fn dynamic_tools(tools: &[DynamicTool]) -> ApiResult<()> {
    if tools.len() > MAX_DYNAMIC_TOOLS {
        return Err(ApiError::invalid(
            "dynamic_tools",
            format!("at most {MAX_DYNAMIC_TOOLS} tools"),
        ));
    }
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let valid_name = !tool.name.is_empty()
            && tool.name.chars().count() <= MAX_TOOL_NAME_CHARS
            && tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(ApiError::invalid(
                format!("dynamic_tools[{i}].name"),
                format!(
                    "must be 1 to {MAX_TOOL_NAME_CHARS} characters of letters, digits, '_' or '-'"
                ),
            ));
        }
        if !names.insert(tool.name.as_str()) {
            return Err(ApiError::invalid(
                format!("dynamic_tools[{i}].name"),
                format!("duplicate tool name {:?}", tool.name),
            ));
        }
        if tool.description.chars().count() > MAX_TOOL_DESCRIPTION_CHARS {
            return Err(ApiError::invalid(
                format!("dynamic_tools[{i}].description"),
                format!("must be at most {MAX_TOOL_DESCRIPTION_CHARS} characters"),
            ));
        }
        if !tool.input_schema.is_object() {
            return Err(ApiError::invalid(
                format!("dynamic_tools[{i}].input_schema"),
                "must be a JSON Schema object",
            ));
        }
    }
    Ok(())
}

/// Checks a free-text name field: at most [`MAX_NAME_CHARS`] characters.
///
/// # Errors
/// `400` naming `field`.
pub fn name(value: &str, field: &str) -> ApiResult<()> {
    if value.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    Ok(())
}

/// Checks an `http`/`https` URL of at most 2048 bytes.
///
/// # Errors
/// `400` naming `field`.
pub fn http_url(value: &str, field: &str) -> ApiResult<()> {
    let ok = value.len() <= 2048
        && url::Url::parse(value)
            .map(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "must be an http or https URL of at most 2048 bytes",
        ))
    }
}

// ---- Rules shared with the OpenAPI document ---------------------------------
//
// Each rule below is one value used twice: by the handler that checks a field
// and by the `#[schema(schema_with = ...)]` of the request type that documents
// it (issue 32, point 8: the OpenAPI document says exactly what the server
// does), so that the two cannot drift apart. The patterns are written in the
// common subset of ECMA-262 (what JSON Schema means), Python's `re` (what
// schemathesis generates from) and the `regex` crate (what the handlers match
// with).

/// The characters [`str::trim`] removes, Unicode `White_Space` as
/// [`char::is_whitespace`] has it (a test checks every character), in the
/// `\xXX`/`\uXXXX` spelling ECMA-262, Python and the `regex` crate share.
const WHITE_SPACE_CLASS_U: &str =
    r"\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";

/// A string with at least one character that is not white space (unanchored:
/// JSON Schema's `pattern` matches anywhere). What "not blank" means in
/// [`title`], [`message_content`] and the admin routes' `model` and
/// `command`: `s.trim()` is not empty.
pub fn not_blank_pattern() -> String {
    format!("^[^\\u0000]*[^\\u0000{WHITE_SPACE_CLASS_U}][^\\u0000]*$")
}

/// A string without NUL (`\u0000`), which PostgreSQL cannot store: every
/// string of a request is checked for it ([`crate::extract::parse_json`],
/// [`crate::extract::QueryParams::parse`]), and the OpenAPI document states
/// it on every string it lists (`crate::openapi`, `NoNul`).
pub const NO_NUL_PATTERN: &str = "^[^\\u0000]*$";

/// Whether `s` is blank: empty or only white space ([`not_blank_pattern`]
/// does not match).
pub fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// An integer field's range, `min..=max`: checked by [`IntRange::check`],
/// documented by [`IntRange::schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntRange {
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value.
    pub max: i64,
}

impl IntRange {
    /// `min..=max`.
    pub const fn new(min: i64, max: i64) -> Self {
        Self { min, max }
    }

    /// Whether `value` is in the range.
    pub fn contains(&self, value: i64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// Checks `value`.
    ///
    /// # Errors
    /// `400` naming `field`: "must be in min..=max".
    pub fn check(&self, value: i64, field: &str) -> ApiResult<i64> {
        if self.contains(value) {
            Ok(value)
        } else {
            Err(ApiError::invalid(
                field,
                format!("must be in {}..={}", self.min, self.max),
            ))
        }
    }

    /// The JSON Schema of the range: an integer with `minimum` and `maximum`
    /// (`format` `int32` when the range fits in 32 bits, else `int64`).
    pub fn schema(&self) -> utoipa::openapi::schema::Object {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let int32 = self.min >= i64::from(i32::MIN) && self.max <= i64::from(i32::MAX);
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(if int32 {
                KnownFormat::Int32
            } else {
                KnownFormat::Int64
            })))
            .minimum(Some(self.min))
            .maximum(Some(self.max))
            .build()
    }

    /// [`IntRange::schema`] that also accepts `null`.
    pub fn nullable_schema(&self) -> utoipa::openapi::schema::Object {
        nullable(self.schema())
    }
}

/// `schema` with `null` added to its type.
pub fn nullable(mut schema: utoipa::openapi::schema::Object) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    schema.schema_type = match schema.schema_type {
        SchemaType::Type(t) => SchemaType::Array(vec![t, Type::Null]),
        SchemaType::Array(mut ts) => {
            if !ts.contains(&Type::Null) {
                ts.push(Type::Null);
            }
            SchemaType::Array(ts)
        }
        SchemaType::AnyValue => SchemaType::AnyValue,
    };
    schema
}

/// A string schema of `min..=max` characters, not blank when `not_blank`.
pub fn text_schema(min: usize, max: usize, not_blank: bool) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length((min > 0).then_some(min))
        .max_length(Some(max))
        .pattern(not_blank.then(not_blank_pattern))
        .build()
}

/// `Chat.pin_order` (`PATCH /chats/{chat}`): `0..=2^31-1`, 0 = not pinned.
pub const PIN_ORDER: IntRange = IntRange::new(0, i32::MAX as i64);
/// The 0-based queue index of `POST .../queue/{queued}/move` (past the end =
/// last).
pub const QUEUE_POSITION: IntRange = IntRange::new(0, i64::MAX);
/// A positive 64-bit id (messages, queued messages; `after_id`,
/// `before_id` of the message list): what [`crate::extract::parse_id`]
/// accepts.
pub const ID: IntRange = IntRange::new(1, i64::MAX);

/// The pattern of a dynamic tool's name: 1 to [`MAX_TOOL_NAME_CHARS`] ASCII
/// letters, digits, `_` or `-`.
pub fn tool_name_pattern() -> String {
    format!("^[A-Za-z0-9_-]{{1,{MAX_TOOL_NAME_CHARS}}}$")
}

/// The pattern of a label key: no `:` (the filter `label=k:v` splits at the
/// first colon).
pub const LABEL_KEY_PATTERN: &str = "^[^:\\u0000]*$";

/// The pattern of a `label` filter of `GET /chats`: `key:value`, split at
/// the first colon.
pub const LABEL_FILTER_PATTERN: &str = ":";

/// [`LABEL_FILTER_PATTERN`] as a whole-value pattern without NUL.
pub const LABEL_FILTER_VALUE_PATTERN: &str = "^[^\\u0000]*:[^\\u0000]*$";

/// Schema of a title: at most [`MAX_TITLE_CHARS`] characters, not blank;
/// `null` is the same as absent.
pub fn title_schema() -> utoipa::openapi::schema::Object {
    nullable(text_schema(1, MAX_TITLE_CHARS, true))
}

/// Schema of a system prompt: at most [`MAX_SYSTEM_PROMPT_CHARS`]
/// characters (a blank one is none); `null` is the same as absent.
pub fn system_prompt_schema() -> utoipa::openapi::schema::Object {
    nullable(text_schema(0, MAX_SYSTEM_PROMPT_CHARS, false))
}

/// Schema of a free-text name ([`name`]); `null` is the same as absent.
pub fn name_schema() -> utoipa::openapi::schema::Object {
    nullable(text_schema(0, MAX_NAME_CHARS, false))
}

/// Schema of a `client_message_id`: 1 to [`MAX_CLIENT_MESSAGE_ID_BYTES`]
/// (bytes; the schema counts characters, which is the same for ASCII);
/// `null` is the same as absent.
pub fn client_message_id_schema() -> utoipa::openapi::schema::Object {
    nullable(text_schema(1, MAX_CLIENT_MESSAGE_ID_BYTES, false))
}

/// Schema of labels ([`labels`]): at most [`MAX_LABELS`]; keys 1 to
/// [`MAX_LABEL_KEY_CHARS`] characters without `:`; values at most
/// [`MAX_LABEL_VALUE_CHARS`] characters; `null` is the same as absent.
pub fn labels_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
    let mut key = text_schema(1, MAX_LABEL_KEY_CHARS, false);
    key.pattern = Some(LABEL_KEY_PATTERN.to_owned());
    let mut schema = ObjectBuilder::new()
        .schema_type(Type::Object)
        .max_properties(Some(MAX_LABELS))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(
            text_schema(0, MAX_LABEL_VALUE_CHARS, false),
        )))))
        .build();
    schema.property_names = Some(Box::new(Schema::Object(key)));
    nullable(schema)
}

/// Schema of message `content` ([`message_content`]): 1 to
/// [`MAX_MESSAGE_PARTS`] `ChatInputPart`s of which at least one is a file
/// or a text that is not blank. (The 256 KiB of text in all is stated in
/// the description only.)
pub fn message_content_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, Type};
    use utoipa::openapi::{Ref, extensions::Extensions};
    let mut array = ArrayBuilder::new()
        .schema_type(Type::Array)
        .items(Ref::from_schema_name("ChatInputPart"))
        .min_items(Some(1))
        .max_items(Some(MAX_MESSAGE_PARTS))
        .description(Some(format!(
            "1 to {MAX_MESSAGE_PARTS} parts, at least one a file or a text that is not blank; at most {MAX_MESSAGE_TEXT_BYTES} bytes of text in all"
        )))
        .build();
    let mut extensions = Extensions::default();
    // utoipa has no `contains`; its extensions serialize as given.
    extensions.insert(
        "contains".to_owned(),
        serde_json::json!({
            "anyOf": [
                {"type": "object", "required": ["type"], "properties": {"type": {"const": "file"}}},
                {"type": "object", "required": ["type", "text"], "properties": {
                    "type": {"const": "text"},
                    "text": {"type": "string", "pattern": not_blank_pattern()},
                }},
            ]
        }),
    );
    array.extensions = Some(extensions);
    array
}

/// [`message_content_schema`] that also accepts `null` (an optional
/// replacement content).
pub fn nullable_message_content_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{SchemaType, Type};
    let mut array = message_content_schema();
    array.schema_type = SchemaType::Array(vec![Type::Array, Type::Null]);
    array
}

/// Schema of `dynamic_tools` ([`dynamic_tools`]): at most
/// [`MAX_DYNAMIC_TOOLS`] `DynamicTool`s (names unique: stated in the
/// description); `null` is the same as absent.
pub fn dynamic_tools_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::Ref;
    use utoipa::openapi::schema::{ArrayBuilder, SchemaType, Type};
    ArrayBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::Array, Type::Null]))
        .items(Ref::from_schema_name("DynamicTool"))
        .max_items(Some(MAX_DYNAMIC_TOOLS))
        .description(Some(format!(
            "At most {MAX_DYNAMIC_TOOLS} client-executed tools with unique names"
        )))
        .build()
}

/// Schema of `mcp_server_ids`: at most [`MAX_MCP_SERVERS`] ids of existing
/// MCP servers; `null` is the same as absent.
pub fn mcp_server_ids_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{
        ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type,
    };
    ArrayBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::Array, Type::Null]))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid))),
        )
        .max_items(Some(MAX_MCP_SERVERS))
        .description(Some(format!(
            "Existing MCP servers to offer the model (at most {MAX_MCP_SERVERS})"
        )))
        .build()
}

/// `PIN_ORDER`'s schema, `null` allowed (same as absent).
pub fn pin_order_schema() -> utoipa::openapi::schema::Object {
    PIN_ORDER.nullable_schema()
}

/// `QUEUE_POSITION`'s schema.
pub fn queue_position_schema() -> utoipa::openapi::schema::Object {
    QUEUE_POSITION.schema()
}

/// [`ID`]'s schema (path and query ids).
pub fn id_schema() -> utoipa::openapi::schema::Object {
    ID.schema()
}

/// The constraints of `chatd_core` types that the API checks here (their
/// schemas are derived in `chatd-core`, which does not know these limits):
/// `(component, property, schema)`, applied by the OpenAPI document's
/// modifier ([`crate::openapi`]), which fails when a property is missing.
pub fn core_constraints() -> Vec<(&'static str, &'static str, utoipa::openapi::schema::Object)> {
    use chatd_core::model_options as mo;
    let mut name = text_schema(1, MAX_TOOL_NAME_CHARS, false);
    name.pattern = Some(tool_name_pattern());
    let range =
        |r: &std::ops::RangeInclusive<i64>| IntRange::new(*r.start(), *r.end()).nullable_schema();
    let temperature = nullable(
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Number)
            .format(Some(utoipa::openapi::schema::SchemaFormat::KnownFormat(
                utoipa::openapi::schema::KnownFormat::Double,
            )))
            .minimum(Some(*mo::TEMPERATURE_RANGE.start()))
            .maximum(Some(*mo::TEMPERATURE_RANGE.end()))
            .build(),
    );
    vec![
        (
            "ModelOptions",
            "max_output_tokens",
            range(&mo::MAX_OUTPUT_TOKENS_RANGE),
        ),
        ("ModelOptions", "temperature", temperature),
        (
            "ModelOptions",
            "input_price_micros_per_mtok",
            range(&mo::PRICE_RANGE),
        ),
        (
            "ModelOptions",
            "output_price_micros_per_mtok",
            range(&mo::PRICE_RANGE),
        ),
        (
            "ModelOptions",
            "compact_recent_messages",
            range(&mo::COMPACT_RECENT_MESSAGES_RANGE),
        ),
        ("DynamicTool", "name", name),
        (
            "DynamicTool",
            "description",
            text_schema(0, MAX_TOOL_DESCRIPTION_CHARS, false),
        ),
    ]
}

// ---- Admin resources (`crate::admin`) ----

/// Longest model name of a model config, in characters (not blank).
pub const MAX_MODEL_CHARS: usize = 256;
/// A model config's `context_limit`: positive.
pub const CONTEXT_LIMIT: IntRange = IntRange::new(1, i64::MAX);
/// A model config's `compression_threshold`: a percentage.
pub const COMPRESSION_THRESHOLD: IntRange = IntRange::new(0, 100);
/// Longest MCP server slug.
pub const MAX_SLUG_CHARS: usize = 64;
/// The form of an MCP server slug: `a-z`, `0-9`, `_`, `-`, starting with a
/// letter or digit, without `__` (tools are offered as `<slug>__<tool>`);
/// at most [`MAX_SLUG_CHARS`] long (stated as `maxLength`).
pub const SLUG_PATTERN: &str = "^[a-z0-9](?:_?[a-z0-9-])*_?$";
/// Longest URL (`base_url`, an MCP server's `url`), in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The start of an accepted URL: `http://` or `https://`, any case.
pub const URL_PATTERN: &str = "^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\u0000][^\\u0000]*$";
/// Most tool names in a `require_approval` list.
pub const MAX_APPROVAL_TOOLS: usize = 256;
/// Longest tool name in a `require_approval` list, in bytes.
pub const MAX_APPROVAL_TOOL_BYTES: usize = 128;

/// `model` of a model config: 1 to [`MAX_MODEL_CHARS`] characters, not
/// blank.
pub fn model_name_schema() -> utoipa::openapi::schema::Object {
    text_schema(1, MAX_MODEL_CHARS, true)
}

/// [`model_name_schema`], `null` allowed (same as absent).
pub fn nullable_model_name_schema() -> utoipa::openapi::schema::Object {
    nullable(model_name_schema())
}

/// [`CONTEXT_LIMIT`]'s schema.
pub fn context_limit_schema() -> utoipa::openapi::schema::Object {
    CONTEXT_LIMIT.schema()
}

/// [`CONTEXT_LIMIT`]'s schema, `null` allowed (same as absent).
pub fn nullable_context_limit_schema() -> utoipa::openapi::schema::Object {
    CONTEXT_LIMIT.nullable_schema()
}

/// [`COMPRESSION_THRESHOLD`]'s schema, `null` allowed (same as absent).
pub fn compression_threshold_schema() -> utoipa::openapi::schema::Object {
    COMPRESSION_THRESHOLD.nullable_schema()
}

/// An MCP server slug: [`SLUG_PATTERN`], at most [`MAX_SLUG_CHARS`].
pub fn slug_schema() -> utoipa::openapi::schema::Object {
    let mut schema = text_schema(1, MAX_SLUG_CHARS, false);
    schema.pattern = Some(SLUG_PATTERN.to_owned());
    schema
}

/// [`slug_schema`], `null` allowed (same as absent).
pub fn nullable_slug_schema() -> utoipa::openapi::schema::Object {
    nullable(slug_schema())
}

/// An `http`/`https` URL of at most [`MAX_URL_BYTES`] ([`http_url`]; the
/// schema counts characters), `null` allowed (same as absent, or "clear"
/// where the field says so).
pub fn nullable_url_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::SchemaFormat;
    let mut schema = text_schema(1, MAX_URL_BYTES, false);
    schema.pattern = Some(URL_PATTERN.to_owned());
    schema.format = Some(SchemaFormat::Custom("uri".to_owned()));
    nullable(schema)
}

/// Most entries of an MCP server's `env` or `headers`, and most `args`.
pub const MAX_MCP_ENTRIES: usize = 256;
/// Longest key of `env` or `headers`, in bytes.
pub const MAX_MCP_KEY_BYTES: usize = 256;
/// Longest value of `env` or `headers`, argument or command, in bytes.
pub const MAX_MCP_VALUE_BYTES: usize = 4096;

/// `env` or `headers` of an MCP server: at most [`MAX_MCP_ENTRIES`], keys
/// 1 to [`MAX_MCP_KEY_BYTES`], values at most [`MAX_MCP_VALUE_BYTES`] (the
/// schema counts characters); `null` is the same as absent.
pub fn mcp_map_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
    let mut map = ObjectBuilder::new()
        .schema_type(Type::Object)
        .max_properties(Some(MAX_MCP_ENTRIES))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(
            text_schema(0, MAX_MCP_VALUE_BYTES, false),
        )))))
        .build();
    map.property_names = Some(Box::new(Schema::Object(text_schema(
        1,
        MAX_MCP_KEY_BYTES,
        false,
    ))));
    nullable(map)
}

/// `args` of an MCP server: at most [`MAX_MCP_ENTRIES`] of at most
/// [`MAX_MCP_VALUE_BYTES`]; `null` is the same as absent.
pub fn mcp_args_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, SchemaType, Type};
    ArrayBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::Array, Type::Null]))
        .items(text_schema(0, MAX_MCP_VALUE_BYTES, false))
        .max_items(Some(MAX_MCP_ENTRIES))
        .build()
}

/// `command` of an MCP server: at most [`MAX_MCP_VALUE_BYTES`]; `null` is
/// the same as absent (or "clear" where the field says so).
pub fn mcp_command_schema() -> utoipa::openapi::schema::Object {
    nullable(text_schema(0, MAX_MCP_VALUE_BYTES, false))
}

/// `require_approval` of an MCP server: `"never"`, `"always"`, or at most
/// [`MAX_APPROVAL_TOOLS`] tool names of 1 to [`MAX_APPROVAL_TOOL_BYTES`];
/// `null` is the same as absent.
pub fn require_approval_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["never", "always"])),
            )
            .item(
                ArrayBuilder::new()
                    .items(text_schema(1, MAX_APPROVAL_TOOL_BYTES, false))
                    .max_items(Some(MAX_APPROVAL_TOOLS)),
            )
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .build(),
    )
}

/// Rules across the fields of a request body, as JSON Schema keywords added
/// to its component: `(component, keyword, value)`.
/// - An MCP server's transport needs its own field: `stdio` a `command`
///   that is not blank, `streamable_http` a `url` (`crate::admin::mcp_servers`).
/// - An `openai-compat` provider has no default address: it needs a
///   `base_url` (`crate::admin::providers`).
/// - A disabled model config cannot be the default; reasoning effort
///   bounds keep `default` ≤ `max` (`crate::admin::model_configs`).
pub fn component_rules() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    use chatd_core::ReasoningEffort;
    use serde_json::json;
    let default_and_disabled = json!({
        "required": ["is_default", "enabled"],
        "properties": {"is_default": {"const": true}, "enabled": {"const": false}},
    });
    let effort_pairs = ReasoningEffort::ALL
        .iter()
        .flat_map(|default| {
            ReasoningEffort::ALL
                .iter()
                .filter(move |max| default <= *max)
                .map(move |max| {
                    json!({"properties": {
                        "default": {"const": default.as_str()},
                        "max": {"const": max.as_str()},
                    }})
                })
        })
        .collect();
    vec![
        (
            "CreateMcpServerRequest",
            "anyOf",
            json!([
                {
                    "required": ["transport", "command"],
                    "properties": {
                        "transport": {"const": "stdio"},
                        "command": {"type": "string", "pattern": not_blank_pattern()},
                    },
                },
                {
                    "required": ["transport", "url"],
                    "properties": {
                        "transport": {"const": "streamable_http"},
                        "url": {"type": "string"},
                    },
                },
            ]),
        ),
        (
            // A disabled model config cannot be the default.
            "CreateModelConfigRequest",
            "not",
            default_and_disabled.clone(),
        ),
        ("UpdateModelConfigRequest", "not", default_and_disabled),
        (
            // `default` ≤ `max` (chatd_core::ModelOptions::validate): the
            // pairs in the order of ReasoningEffort::ALL.
            "ReasoningEffortOptions",
            "anyOf",
            serde_json::Value::Array(effort_pairs),
        ),
        (
            // An archived chat takes no plan mode (`crate::chats`: `400`).
            "UpdateChatRequest",
            "not",
            json!({"required": ["archived", "plan_mode"], "properties": {"archived": {"const": true}}}),
        ),
        (
            "CreateProviderRequest",
            "anyOf",
            json!([
                {"properties": {"provider": {"enum": ["openai", "anthropic"]}}},
                {"required": ["base_url"], "properties": {"base_url": {"type": "string"}}},
            ]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    /// Every string of up to `len` characters over `alphabet`.
    fn strings(alphabet: &[char], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn the_not_blank_pattern_is_what_trim_keeps() {
        let pattern = Regex::new(&not_blank_pattern()).unwrap();
        for c in (1..=0x10FFFF).filter_map(char::from_u32) {
            let s = c.to_string();
            assert_eq!(pattern.is_match(&s), !is_blank(&s), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn the_slug_pattern_is_what_the_mcp_routes_accept() {
        let pattern = Regex::new(SLUG_PATTERN).unwrap();
        for s in strings(&['a', '0', '_', '-', 'A', ' '], 5) {
            let schema_ok = pattern.is_match(&s) && s.chars().count() <= MAX_SLUG_CHARS;
            assert_eq!(
                schema_ok,
                crate::admin::mcp_servers::validate_slug(&s).is_ok(),
                "{s:?}"
            );
        }
        let long = "a".repeat(MAX_SLUG_CHARS + 1);
        assert!(crate::admin::mcp_servers::validate_slug(&long).is_err());
        assert!(crate::admin::mcp_servers::validate_slug(&long[1..]).is_ok());
    }

    #[test]
    fn the_tool_name_pattern_is_what_dynamic_tools_accepts() {
        let pattern = Regex::new(&tool_name_pattern()).unwrap();
        let tool = |name: &str| DynamicTool {
            name: name.to_owned(),
            description: String::new(),
            input_schema: serde_json::json!({}),
            read_only: false,
        };
        for s in strings(&['a', 'Z', '0', '_', '-', ' ', '.', 'é'], 3) {
            assert_eq!(
                pattern.is_match(&s),
                dynamic_tools(&[tool(&s)]).is_ok(),
                "{s:?}"
            );
        }
        for len in [MAX_TOOL_NAME_CHARS, MAX_TOOL_NAME_CHARS + 1] {
            let s = "a".repeat(len);
            assert_eq!(
                pattern.is_match(&s),
                dynamic_tools(&[tool(&s)]).is_ok(),
                "{len}"
            );
        }
    }

    #[test]
    fn the_label_key_pattern_is_what_labels_accepts() {
        let pattern = Regex::new(LABEL_KEY_PATTERN).unwrap();
        for key in ["a", "a:b", ":", "team", "x y"] {
            let labels = BTreeMap::from([(key.to_owned(), String::new())]);
            assert_eq!(
                pattern.is_match(key),
                super::labels(&labels).is_ok(),
                "{key:?}"
            );
        }
    }

    #[test]
    fn ranges_check_and_document_the_same_bounds() {
        let range = IntRange::new(1, 100);
        assert!(range.check(0, "f").is_err());
        assert_eq!(range.check(1, "f").unwrap(), 1);
        assert_eq!(range.check(100, "f").unwrap(), 100);
        assert!(range.check(101, "f").is_err());
        let schema = serde_json::to_value(range.schema()).unwrap();
        assert_eq!(schema["minimum"], 1);
        assert_eq!(schema["maximum"], 100);
        let wide = serde_json::to_value(CONTEXT_LIMIT.nullable_schema()).unwrap();
        assert_eq!(wide["maximum"], i64::MAX);
        assert_eq!(wide["type"], serde_json::json!(["integer", "null"]));
    }
}
