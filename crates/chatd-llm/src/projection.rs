//! Provider projection: the conversation a provider is sent is a repaired
//! *copy* of the chat's active history, never the history itself (spec
//! `durable-agent-loop.md` "Provider compatibility": "Provider preparation is
//! projection-only ... Canonical history is never silently rewritten by these
//! repairs").
//!
//! History in the database can hold shapes a provider rejects: a tool call
//! whose result never came (a crash, an edit), a result without its call (an
//! edit that truncated the call), the same call id twice, a user message
//! between a call and its result, reasoning without the signature Anthropic
//! needs back, files a text-only adapter cannot send, tool call ids or names
//! with characters a provider refuses. [`project`] turns any history into one
//! that satisfies these invariants, which both adapters rely on:
//!
//! - system text comes first, as at most one [`ChatRole::System`] message;
//! - every assistant tool call is followed *immediately* by exactly one
//!   [`ChatRole::Tool`] message that answers each of its calls exactly once,
//!   in call order (a missing result is synthesized as an `is_error` result
//!   `{"error": "Tool execution cancelled"}`); tool messages appear nowhere
//!   else;
//! - tool call ids are unique in the whole conversation and match
//!   `^[A-Za-z0-9_-]+$`; tool names match `^[A-Za-z0-9_-]{1,128}$`; arguments
//!   are a JSON object (`{}` when the stored ones are not: a call cut off at
//!   the token limit);
//! - a result whose call is not in the history (an orphan, or a second result
//!   for an answered call) becomes a user text note in place;
//! - a file part of a user message whose bytes the request carries
//!   ([`ModelRequest::files`]) stays a file part when it is an image of a
//!   type both providers accept ([`IMAGE_MEDIA_TYPES`]: the adapters send
//!   it as image input), becomes a text part holding the file when it is
//!   text (`text/*`, JSON: [`is_inline_text`]), and otherwise, or without
//!   its bytes, a short text placeholder naming it ([`file_placeholder`]);
//!   blank text parts are dropped; a message left empty is dropped;
//! - provider-hosted tool calls and results (and text citations) stay where
//!   they are in assistant messages and are dropped elsewhere; they are not
//!   tool calls (no result is synthesized for them);
//! - with [`Rules::leading_user_turn`], the first non-system message is a user
//!   message; with [`Rules::trailing_user_turn`], the last one is not a plain
//!   assistant message (Anthropic would read it as a prefill).
//!
//! Provider-specific shapes (Anthropic's merged turns and `tool_result`
//! ordering, which reasoning survives) are the adapters' business; see
//! `anthropic::wire` and `openai::wire`.

use std::collections::{HashMap, HashSet};

use chatd_core::{CANCELLED_TOOL_RESULT, ChatRole, MessagePart};
use serde_json::{Value, json};

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::request::{AttachedFile, ModelRequest, RequestMessage};

/// Image types sent to providers as image input (what both OpenAI and
/// Anthropic accept).
pub const IMAGE_MEDIA_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Most bytes of a text file sent inline (256 KiB); a longer file is cut
/// there, with a note saying so.
pub const MAX_INLINE_TEXT_BYTES: usize = 256 * 1024;

/// Whether a file of `media_type` is sent inline as text: `text/*`,
/// `application/json` and `*+json`.
pub fn is_inline_text(media_type: &str) -> bool {
    media_type.starts_with("text/")
        || media_type == "application/json"
        || media_type.ends_with("+json")
}

/// How many leading bytes of a file of `media_type` and `size` bytes a
/// request needs ([`ModelRequest::files`]): all of an image of
/// [`IMAGE_MEDIA_TYPES`], at most [`MAX_INLINE_TEXT_BYTES`] of text, none
/// of anything else (it is sent as a placeholder).
pub fn file_bytes_wanted(media_type: &str, size: u64) -> usize {
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if IMAGE_MEDIA_TYPES.contains(&media_type) {
        size
    } else if is_inline_text(media_type) {
        size.min(MAX_INLINE_TEXT_BYTES)
    } else {
        0
    }
}

/// The text of the user turn inserted when the conversation would otherwise
/// not start with one.
pub const LEADING_USER_TEXT: &str = "[The earlier conversation is not available.]";
/// The text of the user turn appended after a trailing assistant message.
pub const TRAILING_USER_TEXT: &str = "Continue.";

/// Provider-dependent projection switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rules {
    /// Insert a user turn when the first non-system message is not one
    /// (Anthropic requires the conversation to start with the user).
    pub leading_user_turn: bool,
    /// Append a user turn after a trailing assistant message (Anthropic
    /// would continue that message instead of answering).
    pub trailing_user_turn: bool,
}

impl Rules {
    /// The rules of OpenAI Chat Completions.
    pub fn openai() -> Self {
        Rules::default()
    }

    /// The rules of Anthropic Messages.
    pub fn anthropic() -> Self {
        Rules {
            leading_user_turn: true,
            trailing_user_turn: true,
        }
    }
}

/// Returns a repaired copy of `history` satisfying the module's invariants,
/// with no file bytes (every file part a placeholder). `history` itself is
/// not modified.
pub fn project(history: &[RequestMessage], rules: Rules) -> Vec<RequestMessage> {
    project_with_files(history, &BTreeMap::new(), rules)
}

/// [`project`] for `request`, with the bytes of its files
/// ([`ModelRequest::files`]).
pub fn project_request(request: &ModelRequest, rules: Rules) -> Vec<RequestMessage> {
    project_with_files(&request.messages, &request.files, rules)
}

fn project_with_files(
    history: &[RequestMessage],
    files: &BTreeMap<Uuid, AttachedFile>,
    rules: Rules,
) -> Vec<RequestMessage> {
    let ids = IdMap::new(history);
    let results = assign_results(history);

    let mut out: Vec<RequestMessage> = Vec::with_capacity(history.len() + 2);
    let system: Vec<String> = history
        .iter()
        .filter(|m| m.role == ChatRole::System)
        .flat_map(|m| texts(&m.parts))
        .collect();
    if !system.is_empty() {
        out.push(RequestMessage::text(ChatRole::System, system.join("\n\n")));
    }

    let mut emitted_calls: HashSet<String> = HashSet::new();
    for (m, message) in history.iter().enumerate() {
        if message.role == ChatRole::System {
            continue;
        }
        let mut content = Vec::new();
        let mut calls = Vec::new();
        let mut orphans = Vec::new();
        for (p, part) in message.parts.iter().enumerate() {
            match part {
                MessagePart::Text { text, .. } if !text.trim().is_empty() => {
                    content.push(part.clone())
                }
                // A clear marker or an approval never reaches the model
                // (both are on client-only rows); dropped if it did.
                MessagePart::Text { .. }
                | MessagePart::ContextCleared
                | MessagePart::ToolApproval { .. } => {}
                // A provider-hosted tool's call and result stay in the
                // assistant message the provider wrote them to; the
                // adapters send them back to the provider that ran them or
                // leave them out. They never get a `tool-result`.
                MessagePart::Reasoning { .. }
                | MessagePart::ProviderToolCall { .. }
                | MessagePart::ProviderToolResult { .. } => {
                    if message.role == ChatRole::Assistant {
                        content.push(part.clone());
                    }
                }
                MessagePart::File {
                    file_id,
                    media_type,
                    name,
                } => {
                    let attached = files
                        .get(file_id)
                        .filter(|_| message.role == ChatRole::User);
                    content.push(match attached {
                        Some(file) if IMAGE_MEDIA_TYPES.contains(&file.media_type.as_str()) => {
                            part.clone()
                        }
                        Some(file) if is_inline_text(&file.media_type) => {
                            MessagePart::text(inline_text(file))
                        }
                        _ => MessagePart::text(file_placeholder(
                            &file_id.to_string(),
                            media_type,
                            name.as_deref(),
                        )),
                    });
                }
                MessagePart::ToolCall {
                    tool_call_id,
                    tool_name,
                    args,
                } => {
                    // Only the first call with an id counts; calls outside an
                    // assistant message are not calls anyone made.
                    if message.role != ChatRole::Assistant
                        || !emitted_calls.insert(tool_call_id.clone())
                    {
                        continue;
                    }
                    let call = MessagePart::ToolCall {
                        tool_call_id: ids.get(tool_call_id),
                        tool_name: sanitize_name(tool_name),
                        args: object_args(args),
                    };
                    calls.push((tool_call_id.clone(), tool_name.clone()));
                    content.push(call);
                }
                MessagePart::ToolResult {
                    tool_call_id,
                    tool_name,
                    result,
                    ..
                } => {
                    if results.get(tool_call_id).map(|r| r.at) != Some((m, p)) {
                        orphans.push(orphan_note(tool_call_id, tool_name, result));
                    }
                }
            }
        }
        if !orphans.is_empty() {
            out.push(RequestMessage {
                role: ChatRole::User,
                parts: orphans.into_iter().map(MessagePart::text).collect(),
            });
        }
        if content.is_empty() {
            continue;
        }
        let role = match message.role {
            ChatRole::Tool => ChatRole::User,
            role => role,
        };
        out.push(RequestMessage {
            role,
            parts: content,
        });
        if !calls.is_empty() {
            let answers = calls
                .iter()
                .map(|(id, name)| match results.get(id) {
                    Some(found) => MessagePart::ToolResult {
                        tool_call_id: ids.get(id),
                        tool_name: sanitize_name(name),
                        result: found.result.clone(),
                        is_error: found.is_error,
                    },
                    None => MessagePart::ToolResult {
                        tool_call_id: ids.get(id),
                        tool_name: sanitize_name(name),
                        result: json!({ "error": CANCELLED_TOOL_RESULT }),
                        is_error: true,
                    },
                })
                .collect();
            out.push(RequestMessage {
                role: ChatRole::Tool,
                parts: answers,
            });
        }
    }

    if rules.leading_user_turn {
        let first = out.iter().position(|m| m.role != ChatRole::System);
        if first.is_none_or(|i| out[i].role != ChatRole::User) {
            let at = first.unwrap_or(out.len());
            out.insert(at, RequestMessage::text(ChatRole::User, LEADING_USER_TEXT));
        }
    }
    if rules.trailing_user_turn && out.last().is_some_and(|m| m.role == ChatRole::Assistant) {
        out.push(RequestMessage::text(ChatRole::User, TRAILING_USER_TEXT));
    }
    out
}

/// The text that stands in for an attached file a text-only request cannot
/// carry.
pub fn file_placeholder(file_id: &str, media_type: &str, name: Option<&str>) -> String {
    let name = name.unwrap_or("unnamed");
    let media_type = if media_type.is_empty() {
        "unknown type"
    } else {
        media_type
    };
    format!("[Attached file {name} ({media_type}), id {file_id}, not shown to the model]")
}

/// The text part that carries a text file: a header naming it, then its
/// text (invalid UTF-8 replaced), cut at [`MAX_INLINE_TEXT_BYTES`] with a
/// note when longer.
pub fn inline_text(file: &AttachedFile) -> String {
    let text = String::from_utf8_lossy(&file.data);
    let mut out = format!(
        "[Attached file {} ({}), {} bytes]\n{text}",
        file.name, file.media_type, file.size
    );
    if (file.data.len() as u64) < file.size {
        out.push_str(&format!(
            "\n[The file is cut here: only its first {} of {} bytes are shown.]",
            file.data.len(),
            file.size
        ));
    }
    out
}

/// Whether `id` is acceptable as a tool call id by every provider.
pub fn valid_call_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` is acceptable as a tool name by every provider
/// (`^[A-Za-z0-9_-]{1,64}$`, the stricter OpenAI limit).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn texts(parts: &[MessagePart]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } if !text.trim().is_empty() => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The result that answers a call: the first result part after the call's
/// first occurrence.
struct Found {
    at: (usize, usize),
    result: Value,
    is_error: bool,
}

fn assign_results(history: &[RequestMessage]) -> HashMap<String, Found> {
    let mut called: HashSet<&str> = HashSet::new();
    let mut found: HashMap<String, Found> = HashMap::new();
    for (m, message) in history.iter().enumerate() {
        for (p, part) in message.parts.iter().enumerate() {
            match part {
                MessagePart::ToolCall { tool_call_id, .. }
                    if message.role == ChatRole::Assistant =>
                {
                    called.insert(tool_call_id);
                }
                MessagePart::ToolResult {
                    tool_call_id,
                    result,
                    is_error,
                    ..
                } if called.contains(tool_call_id.as_str())
                    && !found.contains_key(tool_call_id) =>
                {
                    found.insert(
                        tool_call_id.clone(),
                        Found {
                            at: (m, p),
                            result: result.clone(),
                            is_error: *is_error,
                        },
                    );
                }
                _ => {}
            }
        }
    }
    found
}

/// Stored call ids → ids every provider accepts, unique.
struct IdMap(HashMap<String, String>);

impl IdMap {
    fn new(history: &[RequestMessage]) -> Self {
        let mut map = HashMap::new();
        let mut taken: HashSet<String> = HashSet::new();
        let stored = history
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| match p {
                MessagePart::ToolCall { tool_call_id, .. } => Some(tool_call_id),
                _ => None,
            });
        // Valid ids keep their value; only the others are renamed, so that a
        // renamed id never takes a valid one's place.
        let stored: Vec<&String> = stored.collect();
        for id in stored.iter().filter(|id| valid_call_id(id)) {
            taken.insert((*id).clone());
            map.insert((*id).clone(), (*id).clone());
        }
        for id in stored.iter().filter(|id| !valid_call_id(id)) {
            if map.contains_key(*id) {
                continue;
            }
            let base: String = id
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let base = if base.is_empty() {
                "call".to_owned()
            } else {
                base
            };
            let mut candidate = base.clone();
            let mut n = 1;
            while taken.contains(&candidate) {
                candidate = format!("{base}_{n}");
                n += 1;
            }
            taken.insert(candidate.clone());
            map.insert((*id).clone(), candidate);
        }
        IdMap(map)
    }

    fn get(&self, id: &str) -> String {
        self.0.get(id).cloned().unwrap_or_else(|| id.to_owned())
    }
}

fn sanitize_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    if cleaned.is_empty() {
        "unknown_tool".to_owned()
    } else {
        cleaned
    }
}

fn object_args(args: &str) -> String {
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(_)) => args.to_owned(),
        _ => "{}".to_owned(),
    }
}

fn orphan_note(id: &str, name: &str, result: &Value) -> String {
    format!("[Result of an earlier call {id} of tool {name}: {result}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> MessagePart {
        MessagePart::ToolCall {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            args: r#"{"x":1}"#.into(),
        }
    }

    fn result(id: &str, value: Value) -> MessagePart {
        MessagePart::ToolResult {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            result: value,
            is_error: false,
        }
    }

    fn msg(role: ChatRole, parts: Vec<MessagePart>) -> RequestMessage {
        RequestMessage { role, parts }
    }

    #[test]
    fn a_missing_result_is_synthesized_and_an_orphan_becomes_text() {
        let history = vec![
            RequestMessage::text(ChatRole::System, "sys"),
            RequestMessage::text(ChatRole::User, "go"),
            msg(ChatRole::Assistant, vec![call("a"), call("b")]),
            msg(ChatRole::Tool, vec![result("a", json!(1))]),
            msg(ChatRole::Tool, vec![result("zzz", json!("lost"))]),
            RequestMessage::text(ChatRole::User, "next"),
        ];
        let before = history.clone();
        let out = project(&history, Rules::openai());
        assert_eq!(history, before, "the history is not touched");
        let roles: Vec<ChatRole> = out.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![
                ChatRole::System,
                ChatRole::User,
                ChatRole::Assistant,
                ChatRole::Tool,
                ChatRole::User,
                ChatRole::User
            ]
        );
        assert_eq!(
            out[3].parts,
            vec![
                result("a", json!(1)),
                MessagePart::ToolResult {
                    tool_call_id: "b".into(),
                    tool_name: "t".into(),
                    result: json!({"error": CANCELLED_TOOL_RESULT}),
                    is_error: true,
                }
            ]
        );
        assert!(
            matches!(&out[4].parts[0], MessagePart::Text { text, .. } if text.contains("zzz") && text.contains("lost"))
        );
    }

    #[test]
    fn a_result_after_an_intervening_user_message_moves_up_and_duplicates_go() {
        let history = vec![
            RequestMessage::text(ChatRole::User, "go"),
            msg(ChatRole::Assistant, vec![call("a")]),
            RequestMessage::text(ChatRole::User, "hurry"),
            msg(ChatRole::Tool, vec![result("a", json!("first"))]),
            msg(ChatRole::Tool, vec![result("a", json!("second"))]),
            msg(
                ChatRole::Assistant,
                vec![call("a"), MessagePart::text("ok")],
            ),
        ];
        let out = project(&history, Rules::anthropic());
        assert_eq!(out[1].parts, vec![call("a")]);
        assert_eq!(out[2].parts, vec![result("a", json!("first"))]);
        assert_eq!(out[3].parts, vec![MessagePart::text("hurry")]);
        // The second result is a note, the duplicate call is dropped.
        assert!(
            matches!(&out[4].parts[0], MessagePart::Text { text, .. } if text.contains("second"))
        );
        assert_eq!(out[5].parts, vec![MessagePart::text("ok")]);
        assert_eq!(
            out.last().unwrap().role,
            ChatRole::User,
            "no trailing assistant"
        );
        assert_eq!(
            out.last().unwrap().parts,
            vec![MessagePart::text(TRAILING_USER_TEXT)]
        );
    }

    #[test]
    fn ids_names_and_arguments_are_made_acceptable() {
        let history = vec![
            RequestMessage::text(ChatRole::User, "go"),
            msg(
                ChatRole::Assistant,
                vec![
                    MessagePart::ToolCall {
                        tool_call_id: "call:1".into(),
                        tool_name: "weather.get".into(),
                        args: r#"{"city": "Par"#.into(),
                    },
                    MessagePart::ToolCall {
                        tool_call_id: "call_1".into(),
                        tool_name: "t".into(),
                        args: String::new(),
                    },
                ],
            ),
            msg(
                ChatRole::Tool,
                vec![result("call:1", json!(1)), result("call_1", json!(2))],
            ),
        ];
        let out = project(&history, Rules::openai());
        let MessagePart::ToolCall {
            tool_call_id,
            tool_name,
            args,
        } = &out[1].parts[0]
        else {
            panic!("{out:?}")
        };
        assert_eq!(
            (tool_call_id.as_str(), tool_name.as_str(), args.as_str()),
            ("call_1_1", "weather_get", "{}")
        );
        assert!(
            matches!(&out[2].parts[0], MessagePart::ToolResult { tool_call_id, .. } if tool_call_id == "call_1_1")
        );
        assert!(
            matches!(&out[2].parts[1], MessagePart::ToolResult { tool_call_id, result, .. } if tool_call_id == "call_1" && result == &json!(2))
        );
    }

    #[test]
    fn a_conversation_that_starts_with_the_assistant_gets_a_user_turn_first() {
        let history = vec![
            RequestMessage::text(ChatRole::System, "sys"),
            RequestMessage::text(ChatRole::Assistant, "hello"),
            RequestMessage::text(ChatRole::User, "hi"),
        ];
        let out = project(&history, Rules::anthropic());
        assert_eq!(
            out[1],
            RequestMessage::text(ChatRole::User, LEADING_USER_TEXT)
        );
        assert_eq!(project(&history, Rules::openai()).len(), 3);
        let only_system = vec![RequestMessage::text(ChatRole::System, "sys")];
        assert_eq!(
            project(&only_system, Rules::anthropic())[1],
            RequestMessage::text(ChatRole::User, LEADING_USER_TEXT)
        );
    }
}
