//! The invariant checker, run on the database once the run has settled.
//!
//! - No acknowledged message lost: every acknowledged send or edit of a chat
//!   written after the chat's last edit ended is in its history (a user
//!   message, not deleted) or still queued, unless its queued row's deletion
//!   was acknowledged.
//! - None duplicated: each token is in at most one live user message or
//!   queued row (a retried send reuses its `client_message_id`).
//! - Every chat idle (`waiting` or `error`) with no owner after settling,
//!   and no `waiting` chat with a non-empty queue.
//! - Every tool call answered exactly once among live messages.
//! - Each watcher's reconstructed history equals the database's visible
//!   live messages (ids and revisions).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use sqlx::PgConnection;

use crate::client::Ledger;
use crate::watch::View;

/// The texts of a content array's text parts.
fn texts(content: &Value) -> Vec<String> {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// The token in a user text (`tok-C-N`), if any.
fn token_of(text: &str) -> Option<String> {
    let start = text.find("tok-")?;
    let rest = &text[start..];
    let end = rest
        .char_indices()
        .find(|(i, c)| *i > 4 && !(c.is_ascii_digit() || *c == '-'))
        .map_or(rest.len(), |(i, _)| i);
    Some(rest[..end].to_owned())
}

/// Checks every invariant; returns the violations.
pub async fn check(
    conn: &mut PgConnection,
    chats: &[String],
    ledger: &Ledger,
    views: &[(String, View)],
) -> anyhow::Result<Vec<String>> {
    let mut violations = Vec::new();
    // Token → (chat, copies).
    let mut copies: HashMap<String, (String, usize)> = HashMap::new();
    for chat in chats {
        let id: uuid::Uuid = chat.parse()?;
        let (status, worker, queue_len): (String, Option<uuid::Uuid>, i64) = sqlx::query_as(
            "SELECT status, worker_id, (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id)
             FROM chats c WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
        if !(status == "waiting" || status == "error") || worker.is_some() {
            violations.push(format!(
                "chat {chat}: not idle after settling (status {status}, worker {worker:?})"
            ));
        }
        if status == "waiting" && queue_len > 0 {
            violations.push(format!(
                "chat {chat}: waiting with {queue_len} queued messages (a stuck queue)"
            ));
        }
        let rows: Vec<(i64, String, Value, String, bool, i64)> = sqlx::query_as(
            "SELECT id, role, content, visibility, deleted, revision FROM chat_messages
             WHERE chat_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        let queued: Vec<Value> =
            sqlx::query_scalar("SELECT content FROM chat_queued_messages WHERE chat_id = $1")
                .bind(id)
                .fetch_all(&mut *conn)
                .await?;
        let live_users = rows
            .iter()
            .filter(|r| r.1 == "user" && !r.4)
            .map(|r| &r.2)
            .chain(queued.iter());
        for content in live_users {
            for text in texts(content) {
                if let Some(token) = token_of(&text) {
                    copies.entry(token).or_insert_with(|| (chat.clone(), 0)).1 += 1;
                }
            }
        }
        // Tool calls answered exactly once.
        let mut calls: BTreeMap<String, usize> = BTreeMap::new();
        let mut results: HashMap<String, usize> = HashMap::new();
        for row in rows.iter().filter(|r| !r.4) {
            for part in row.2.as_array().into_iter().flatten() {
                let Some(call) = part["tool_call_id"].as_str() else {
                    continue;
                };
                match part["type"].as_str() {
                    Some("tool-call") => *calls.entry(call.to_owned()).or_default() += 1,
                    Some("tool-result") => *results.entry(call.to_owned()).or_default() += 1,
                    _ => {}
                }
            }
        }
        for (call, n) in &calls {
            let answered = results.get(call).copied().unwrap_or(0);
            if *n != 1 || answered != 1 {
                violations.push(format!(
                    "chat {chat}: tool call {call} made {n} times and answered {answered} times"
                ));
            }
        }
        for (call, n) in &results {
            if !calls.contains_key(call) {
                violations.push(format!("chat {chat}: {n} results for unknown call {call}"));
            }
        }
        // Watchers.
        let visible: BTreeMap<i64, i64> = rows
            .iter()
            .filter(|r| !r.4 && r.3 != "model")
            .map(|r| (r.0, r.5))
            .collect();
        for (watched, view) in views.iter().filter(|(c, _)| c == chat) {
            if view.messages != visible {
                let missing: Vec<_> = visible
                    .keys()
                    .filter(|k| !view.messages.contains_key(k))
                    .collect();
                let extra: Vec<_> = view
                    .messages
                    .keys()
                    .filter(|k| !visible.contains_key(k))
                    .collect();
                let stale: Vec<_> = visible
                    .iter()
                    .filter(|(k, r)| view.messages.get(k).is_some_and(|v| v != *r))
                    .map(|(k, _)| k)
                    .collect();
                violations.push(format!(
                    "chat {watched}: a watcher's history differs from the database: missing {missing:?}, extra {extra:?}, other revision {stale:?}"
                ));
            }
        }
    }
    for (token, (chat, n)) in &copies {
        if *n > 1 {
            violations.push(format!("chat {chat}: {token} is stored {n} times"));
        }
    }
    let deleted: HashSet<(String, i64)> = ledger.queue_deleted.iter().cloned().collect();
    for written in ledger.written.iter().filter(|w| w.acked) {
        let edited_after = ledger
            .last_edit_end
            .get(&written.chat)
            .is_some_and(|end| *end >= written.started);
        let queue_deleted = written
            .queued_id
            .is_some_and(|q| deleted.contains(&(written.chat.clone(), q)));
        let present = copies.get(&written.token).is_some_and(|(_, n)| *n > 0);
        if queue_deleted && present {
            violations.push(format!(
                "chat {}: {} is stored although its queued row's deletion was acknowledged",
                written.chat, written.token
            ));
        }
        if !edited_after && !queue_deleted && !present {
            violations.push(format!(
                "chat {}: acknowledged {} is lost",
                written.chat, written.token
            ));
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_in_every_kind_of_text() {
        assert_eq!(token_of("tok-1-22").as_deref(), Some("tok-1-22"));
        assert_eq!(token_of("slow tok-3-4").as_deref(), Some("tok-3-4"));
        assert_eq!(
            token_of("call lookup {\"token\":\"tok-0-9\"}").as_deref(),
            Some("tok-0-9")
        );
        assert_eq!(token_of("hello"), None);
    }
}
