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
        .all(|p| matches!(p, MessagePart::Text { text } if text.trim().is_empty()))
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
