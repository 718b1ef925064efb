//! Text that came from outside, made storable: the one sanitiser that every
//! boundary (provider streams, MCP and client tool results, request bodies)
//! applies once, before anything is stored.
//!
//! PostgreSQL cannot store the NUL character: a `text` value with a `0x00`
//! byte fails with "invalid byte sequence for encoding UTF8: 0x00", and a
//! `jsonb` value with a `\u0000` escape fails with "unsupported Unicode
//! escape sequence". Either failure is permanent, so a model answer, a tool
//! result or a title that carried one would fail every commit of the step
//! that holds it. Everything else a Rust `String` can hold is valid UTF-8
//! and storable (lone surrogates cannot reach a `String`: JSON decoders
//! reject or replace them), so NUL is replaced by U+FFFD REPLACEMENT
//! CHARACTER, the character Unicode reserves for "something was here that
//! cannot be represented" (the same one lossy UTF-8 decoding uses).
//!
//! Every function here is idempotent and leaves text without NUL untouched
//! (no allocation).

use std::borrow::Cow;

use serde_json::Value;

use crate::message::{Citation, MessagePart};

/// What replaces each NUL character: U+FFFD REPLACEMENT CHARACTER.
pub const REPLACEMENT: char = '\u{FFFD}';

/// `text` with every NUL replaced by [`REPLACEMENT`]; borrowed (no
/// allocation) when there is none.
///
/// ```
/// use chatd_core::sanitize;
/// assert_eq!(sanitize::text("a\0b"), "a\u{FFFD}b");
/// assert!(matches!(sanitize::text("clean"), std::borrow::Cow::Borrowed(_)));
/// ```
pub fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Replaces every NUL of `s` in place (see [`text`]).
///
/// ```
/// let mut s = String::from("\0x");
/// chatd_core::sanitize::string(&mut s);
/// assert_eq!(s, "\u{FFFD}x");
/// ```
pub fn string(s: &mut String) {
    if s.contains('\0') {
        *s = s.replace('\0', "\u{FFFD}");
    }
}

/// Replaces every NUL in every string of a JSON value, object keys
/// included, recursively.
///
/// ```
/// let mut v = serde_json::json!({"k\u{0}": ["x\u{0}", 1, {"y": "\u{0}"}]});
/// chatd_core::sanitize::json(&mut v);
/// assert_eq!(v, serde_json::json!({"k\u{FFFD}": ["x\u{FFFD}", 1, {"y": "\u{FFFD}"}]}));
/// ```
pub fn json(value: &mut Value) {
    match value {
        Value::String(s) => string(s),
        Value::Array(items) => items.iter_mut().for_each(json),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    json(&mut item);
                    map.insert(text(&key).into_owned(), item);
                }
            } else {
                map.values_mut().for_each(json);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Replaces every NUL in every string field of a citation.
pub fn citation(citation: &mut Citation) {
    string(&mut citation.url);
    for field in [
        &mut citation.title,
        &mut citation.cited_text,
        &mut citation.encrypted_index,
    ]
    .into_iter()
    .flatten()
    {
        string(field);
    }
}

/// Replaces every NUL in every string field of a message part (texts,
/// reasoning and its signature, tool names, ids and arguments, tool
/// results, file names and media types).
///
/// ```
/// use chatd_core::MessagePart;
/// let mut part = MessagePart::text("a\0");
/// chatd_core::sanitize::part(&mut part);
/// assert_eq!(part, MessagePart::text("a\u{FFFD}"));
/// ```
pub fn part(part: &mut MessagePart) {
    match part {
        MessagePart::Text { text, citations } => {
            string(text);
            citations.iter_mut().for_each(citation);
        }
        MessagePart::ProviderToolCall {
            tool_call_id,
            tool_name,
            input: value,
        }
        | MessagePart::ProviderToolResult {
            tool_call_id,
            tool_name,
            result: value,
            is_error: _,
        } => {
            string(tool_call_id);
            string(tool_name);
            json(value);
        }
        MessagePart::Reasoning { text, signature } => {
            string(text);
            if let Some(signature) = signature {
                string(signature);
            }
        }
        MessagePart::ToolCall {
            tool_call_id,
            tool_name,
            args,
        } => {
            string(tool_call_id);
            string(tool_name);
            string(args);
        }
        MessagePart::ToolResult {
            tool_call_id,
            tool_name,
            result,
            is_error: _,
        } => {
            string(tool_call_id);
            string(tool_name);
            json(result);
        }
        MessagePart::File {
            file_id: _,
            media_type,
            name,
        } => {
            string(media_type);
            if let Some(name) = name {
                string(name);
            }
        }
        MessagePart::ContextCleared => {}
        MessagePart::ToolApproval {
            tool_call_id,
            tool_name,
            approved: _,
            reason,
        } => {
            string(tool_call_id);
            string(tool_name);
            if let Some(reason) = reason {
                string(reason);
            }
        }
    }
}

/// [`part`] for each part of a message.
pub fn parts(parts: &mut [MessagePart]) {
    parts.iter_mut().for_each(part);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_tool_result_with_nul_in_keys_and_values_keeps_its_shape() {
        let mut p = MessagePart::ToolResult {
            tool_call_id: "c\0".into(),
            tool_name: "t".into(),
            result: serde_json::json!({"out\0": "x\0y", "n": 1}),
            is_error: false,
        };
        part(&mut p);
        assert_eq!(
            p,
            MessagePart::ToolResult {
                tool_call_id: "c\u{FFFD}".into(),
                tool_name: "t".into(),
                result: serde_json::json!({"out\u{FFFD}": "x\u{FFFD}y", "n": 1}),
                is_error: false,
            }
        );
    }

    proptest! {
        #[test]
        fn sanitised_text_has_no_nul_keeps_every_other_char_and_is_idempotent(s in "\\PC*|[\\x00a-c]*") {
            let once = text(&s).into_owned();
            prop_assert!(!once.contains('\0'));
            prop_assert_eq!(once.chars().count(), s.chars().count());
            prop_assert_eq!(
                once.chars().filter(|c| *c != REPLACEMENT).collect::<String>(),
                s.chars().filter(|c| *c != '\0' && *c != REPLACEMENT).collect::<String>()
            );
            prop_assert_eq!(text(&once).into_owned(), once.clone());
        }
    }
}
