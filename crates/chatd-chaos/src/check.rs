//! The invariant checker, run on the database once the run has settled.
//!
//! - No acknowledged message lost: every acknowledged send or edit of a chat
//!   written after the chat's last branch change (edit, regenerate, branch
//!   switch) ended is on its active branch (a user message, not deleted) or
//!   still queued, unless its queued row's deletion was acknowledged; and
//!   every acknowledged message stored at once (a send not queued, an edit)
//!   is still stored, on some branch, with its text.
//! - None duplicated: each token is in at most one live user message or
//!   queued row (a retried send reuses its `client_message_id`).
//! - Every chat idle (`waiting` or `error`) with no owner after settling,
//!   and no `waiting` chat with a non-empty queue.
//! - Every tool call answered exactly once among live messages.
//! - No answer duplicated: the fake LLM's complete echo of a user text
//!   (`echo: <text>`) is at most once among a chat's live, client-visible
//!   assistant messages (a turn run twice, say by two owners or by a retry
//!   that kept the first attempt, shows it twice).
//! - Each watcher's reconstructed history equals the database's visible
//!   live messages (ids and revisions).
//! - Branches ([`branches`]): one active branch per chat, the one the API
//!   shows.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rand::rngs::StdRng;
use reqwest::Method;
use serde_json::Value;
use sqlx::PgConnection;

use crate::client::{Ledger, Shared, request};
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
    // (chat, message id) → the tokens in the stored user message, on any
    // branch.
    let mut stored: HashMap<(String, i64), Vec<String>> = HashMap::new();
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
        for row in rows.iter().filter(|r| r.1 == "user") {
            let tokens = texts(&row.2).iter().filter_map(|t| token_of(t)).collect();
            stored.insert((chat.clone(), row.0), tokens);
        }
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
        violations.extend(duplicated_answers(&rows).map(|v| format!("chat {chat}: {v}")));
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
            .last_branch_change
            .get(&written.chat)
            .is_some_and(|end| *end >= written.started);
        if let Some(id) = written.message_id {
            let kept = stored
                .get(&(written.chat.clone(), id))
                .is_some_and(|tokens| tokens.contains(&written.token));
            if !kept {
                violations.push(format!(
                    "chat {}: acknowledged {} (message {id}) is no longer stored on any branch",
                    written.chat, written.token
                ));
            }
        }
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

/// The answers stored more than once among `rows` (a chat's
/// `(id, role, content, visibility, deleted, revision)` in id order): live,
/// client-visible assistant messages whose whole text is the fake LLM's
/// complete echo (`echo: <text>`) of the live user message before them (a
/// partial answer, cut by an interrupt, is not one), counted per user
/// message.
fn duplicated_answers(
    rows: &[(i64, String, Value, String, bool, i64)],
) -> impl Iterator<Item = String> {
    let mut answers: BTreeMap<i64, (String, Vec<i64>)> = BTreeMap::new();
    let mut last_user: Option<(i64, String)> = None;
    for row in rows.iter().filter(|r| !r.4) {
        let text = texts(&row.2).concat();
        match row.1.as_str() {
            "user" => last_user = Some((row.0, text)),
            "assistant" if row.3 != "model" => {
                if let Some((user, said)) = &last_user
                    && text == format!("echo: {said}")
                {
                    answers
                        .entry(*user)
                        .or_insert_with(|| (said.clone(), Vec::new()))
                        .1
                        .push(row.0);
                }
            }
            _ => {}
        }
    }
    answers
        .into_iter()
        .filter(|(_, (_, ids))| ids.len() > 1)
        .map(|(user, (said, ids))| {
            format!(
                "the answer to message {user} ({said:?}) is stored {} times: messages {ids:?}",
                ids.len()
            )
        })
}

/// A `chat_messages` row as the branch check reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
struct BranchRow {
    id: i64,
    parent_id: Option<i64>,
    /// Off the active branch.
    deleted: bool,
    /// Shown to clients (visibility is not `model`).
    visible: bool,
    /// Deleted by an edit before branches existed: in no tree.
    detached: bool,
}

impl BranchRow {
    /// Whether the tree and sibling lists show it.
    fn in_tree(&self) -> bool {
        self.visible && !self.detached
    }
}

/// The branch invariants of every chat (API.md "Branches, regenerate and
/// fork"), read from the database and through the API of a live replica:
/// - every message's parent is a message of the same chat;
/// - `chats.active_leaf_id` is the newest live (not deleted) message, or
///   null exactly when the chat has no messages;
/// - walking `parent_id` from the active leaf to the first message visits
///   exactly the live messages (one active branch, no cycle);
/// - `GET /chats/{chat}/messages`, paged, is exactly the branch's
///   client-visible messages, each with its `parent_id`, and `sibling_ids`
///   the ascending client-visible messages of the same parent, itself
///   included (`[]` when it is the only one);
/// - `GET /chats/{chat}/messages/tree` is every client-visible message of
///   every branch (not the rows an edit deleted before branches existed),
///   each with its nearest client-visible ancestor as its parent and
///   `active` = live.
pub async fn branches(
    conn: &mut PgConnection,
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    chats: &[String],
) -> anyhow::Result<Vec<String>> {
    let mut violations = Vec::new();
    for chat in chats {
        let id: uuid::Uuid = chat.parse()?;
        let strays: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT m.id, m.parent_id FROM chat_messages m
             LEFT JOIN chat_messages p ON p.id = m.parent_id
             WHERE m.chat_id = $1 AND m.parent_id IS NOT NULL
               AND (p.id IS NULL OR p.chat_id <> m.chat_id)
             ORDER BY m.id",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        for (message, parent) in &strays {
            violations.push(format!(
                "chat {chat}: message {message}'s parent {parent} is not a message of the chat"
            ));
        }
        let leaf: Option<i64> =
            sqlx::query_scalar("SELECT active_leaf_id FROM chats WHERE id = $1")
                .bind(id)
                .fetch_one(&mut *conn)
                .await?;
        let rows: Vec<BranchRow> = sqlx::query_as(
            "SELECT id, parent_id, deleted, visibility <> 'model' AS visible, detached
             FROM chat_messages WHERE chat_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        let api = match api_view(shared, http, rng, chat).await {
            Ok(api) => Some(api),
            Err(err) => {
                violations.push(format!("chat {chat}: reading its branches: {err:#}"));
                None
            }
        };
        violations.extend(
            branch_violations(&rows, leaf, api.as_ref())
                .into_iter()
                .map(|v| format!("chat {chat}: {v}")),
        );
    }
    Ok(violations)
}

/// What the API shows of a chat's branches.
#[derive(Debug, Default)]
struct ApiView {
    /// `GET /messages`, every page, ascending: (id, parent_id, sibling_ids).
    messages: Vec<(i64, Option<i64>, Vec<i64>)>,
    /// `GET /messages/tree`: (id, parent_id, active).
    tree: Vec<(i64, Option<i64>, bool)>,
}

/// Reads [`ApiView`] of `chat` from a live replica: the message pages
/// newest first (`before_id`), then the tree.
///
/// # Errors
/// A request that does not answer `200` (named with its status).
async fn api_view(
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    chat: &str,
) -> anyhow::Result<ApiView> {
    let mut view = ApiView::default();
    let mut path = format!("/chats/{chat}/messages?limit=200");
    loop {
        let page = request(shared, http, rng, "check", Method::GET, &path, None).await;
        anyhow::ensure!(page.status == 200, "GET {path}: {}", page.status);
        let messages = page.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for m in &messages {
            let siblings = m["sibling_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .collect();
            view.messages.push((
                m["id"].as_i64().unwrap_or(0),
                m["parent_id"].as_i64(),
                siblings,
            ));
        }
        let oldest = messages.first().and_then(|m| m["id"].as_i64());
        match oldest {
            Some(oldest) if page.body["has_more"] == true => {
                path = format!("/chats/{chat}/messages?limit=200&before_id={oldest}");
            }
            _ => break,
        }
    }
    view.messages.sort_by_key(|m| m.0);
    let path = format!("/chats/{chat}/messages/tree");
    let tree = request(shared, http, rng, "check", Method::GET, &path, None).await;
    anyhow::ensure!(tree.status == 200, "GET {path}: {}", tree.status);
    view.tree = tree.body["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["id"].as_i64().unwrap_or(0),
                n["parent_id"].as_i64(),
                n["active"] == true,
            )
        })
        .collect();
    Ok(view)
}

/// The branch invariants of one chat (see [`branches`]) given its rows in
/// id order, its `active_leaf_id` and what the API showed (`None`: it could
/// not be read, already reported).
fn branch_violations(rows: &[BranchRow], leaf: Option<i64>, api: Option<&ApiView>) -> Vec<String> {
    let mut violations = Vec::new();
    let newest_live = rows.iter().filter(|r| !r.deleted).map(|r| r.id).max();
    if leaf != newest_live {
        violations.push(format!(
            "active_leaf_id is {leaf:?}, the newest message on the active branch {newest_live:?}"
        ));
    }
    if leaf.is_none() && !rows.is_empty() {
        violations.push(format!(
            "no active leaf, with {} messages and none on the active branch",
            rows.len()
        ));
    }
    // The walk from the leaf.
    let parents: HashMap<i64, Option<i64>> = rows.iter().map(|r| (r.id, r.parent_id)).collect();
    let mut branch: BTreeSet<i64> = BTreeSet::new();
    let mut at = leaf;
    while let Some(id) = at {
        if !branch.insert(id) {
            violations.push(format!("the active branch has a cycle through {id}"));
            break;
        }
        let Some(parent) = parents.get(&id) else {
            violations.push(format!(
                "the active branch reaches {id}, not a message of the chat"
            ));
            break;
        };
        at = *parent;
    }
    let live: BTreeSet<i64> = rows.iter().filter(|r| !r.deleted).map(|r| r.id).collect();
    if branch != live {
        let off: Vec<_> = live.difference(&branch).collect();
        let deleted: Vec<_> = branch.difference(&live).collect();
        violations.push(format!(
            "the active branch is not the live messages: live but off the branch {off:?}, \
             on the branch but deleted {deleted:?}"
        ));
    }
    let Some(api) = api else {
        return violations;
    };
    // A row's nearest ancestor the tree shows (rows come parents first):
    // what `GET /messages` and `GET /messages/tree` give as `parent_id`.
    let mut shown_as: HashMap<i64, Option<i64>> = HashMap::new();
    let mut shown_parent: HashMap<i64, Option<i64>> = HashMap::new();
    let mut want = Vec::new();
    for r in rows.iter().filter(|r| !r.detached) {
        let parent = r
            .parent_id
            .and_then(|p| shown_as.get(&p).copied().unwrap_or(Some(p)));
        if r.visible {
            shown_as.insert(r.id, Some(r.id));
            shown_parent.insert(r.id, parent);
            want.push((r.id, parent, !r.deleted));
        } else {
            shown_as.insert(r.id, parent);
        }
    }
    let want_messages: Vec<(i64, Option<i64>)> = rows
        .iter()
        .filter(|r| !r.deleted && r.visible)
        .map(|r| (r.id, shown_parent.get(&r.id).copied().flatten()))
        .collect();
    let got: Vec<(i64, Option<i64>)> = api.messages.iter().map(|m| (m.0, m.1)).collect();
    if got != want_messages {
        violations.push(format!(
            "GET /messages shows (id, parent) {got:?}, the active branch's visible messages are {want_messages:?}"
        ));
    }
    for (id, parent, siblings) in &api.messages {
        let mut same_parent: Vec<i64> = rows
            .iter()
            .filter(|r| r.in_tree() && shown_parent.get(&r.id) == Some(parent))
            .map(|r| r.id)
            .collect();
        if same_parent.len() < 2 {
            same_parent.clear();
        }
        if *siblings != same_parent {
            violations.push(format!(
                "message {id}: sibling_ids {siblings:?}, the visible messages of its parent {same_parent:?}"
            ));
        }
    }
    if api.tree != want {
        violations.push(format!(
            "GET /messages/tree shows (id, parent, active) {:?}, the database {want:?}",
            api.tree
        ));
    }
    violations
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

    fn message(
        id: i64,
        role: &str,
        text: &str,
        deleted: bool,
    ) -> (i64, String, Value, String, bool, i64) {
        (
            id,
            role.to_owned(),
            serde_json::json!([{"type": "text", "text": text}]),
            "all".to_owned(),
            deleted,
            1,
        )
    }

    #[test]
    fn an_answer_given_twice_on_the_active_branch_is_a_violation() {
        let mut rows = vec![
            message(1, "user", "tok-0-1", false),
            message(2, "assistant", "echo: tok-0-1", false),
            // A partial answer cut by an interrupt (it looks like the
            // answer to message 1), then the interrupting message's.
            message(3, "user", "tok-0-12", false),
            message(4, "assistant", "echo: tok-0-1", false),
            message(5, "user", "slow tok-1-2", false),
            message(6, "assistant", "echo: slow tok-1-2", false),
            // Regenerated: the old answer is off the active branch.
            message(7, "user", "tok-1-3", false),
            message(8, "assistant", "echo: tok-1-3", true),
            message(9, "assistant", "echo: tok-1-3", false),
        ];
        assert_eq!(duplicated_answers(&rows).count(), 0);
        rows.push(message(10, "assistant", "echo: tok-1-3", false));
        let v: Vec<String> = duplicated_answers(&rows).collect();
        assert_eq!(
            v,
            vec![
                "the answer to message 7 (\"tok-1-3\") is stored 2 times: messages [9, 10]"
                    .to_owned()
            ]
        );
    }

    fn row(id: i64, parent: Option<i64>, deleted: bool) -> BranchRow {
        BranchRow {
            id,
            parent_id: parent,
            deleted,
            visible: true,
            detached: false,
        }
    }

    /// 1 ← 2 ← 3 (edited into 4) ← 5; 4 ← 6 is active.
    fn edited() -> Vec<BranchRow> {
        vec![
            row(1, None, false),
            row(2, Some(1), false),
            row(3, Some(2), true),
            row(4, Some(2), false),
            row(5, Some(3), true),
            row(6, Some(4), false),
        ]
    }

    fn api(rows: &[BranchRow]) -> ApiView {
        ApiView {
            messages: rows
                .iter()
                .filter(|r| !r.deleted)
                .map(|r| {
                    let siblings = if r.id == 4 { vec![3, 4] } else { vec![] };
                    (r.id, r.parent_id, siblings)
                })
                .collect(),
            tree: rows
                .iter()
                .map(|r| (r.id, r.parent_id, !r.deleted))
                .collect(),
        }
    }

    #[test]
    fn one_active_branch_shown_as_stored_has_no_violation() {
        let rows = edited();
        assert_eq!(
            branch_violations(&rows, Some(6), Some(&api(&rows))),
            Vec::<String>::new()
        );
        assert_eq!(
            branch_violations(&[], None, Some(&ApiView::default())),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_wrong_leaf_a_stray_live_message_or_a_cycle_is_a_violation() {
        let rows = edited();
        let stale_leaf = branch_violations(&rows, Some(4), None);
        assert!(
            stale_leaf[0].contains("active_leaf_id is Some(4)"),
            "{stale_leaf:?}"
        );
        assert!(stale_leaf[1].contains("[6]"), "{stale_leaf:?}");

        let mut two_live = rows.clone();
        two_live[4].deleted = false; // 5 is live but not on 6's branch.
        let v = branch_violations(&two_live, Some(6), None);
        assert!(v.iter().any(|v| v.contains("off the branch [5]")), "{v:?}");

        let cycle = vec![row(1, Some(2), false), row(2, Some(1), false)];
        let v = branch_violations(&cycle, Some(2), None);
        assert!(v.iter().any(|v| v.contains("cycle")), "{v:?}");

        let v = branch_violations(&[row(1, None, true)], None, None);
        assert!(v.iter().any(|v| v.contains("no active leaf")), "{v:?}");
    }

    #[test]
    fn the_api_must_show_the_active_branch_its_siblings_and_the_whole_tree() {
        let rows = edited();
        let mut stale = api(&rows);
        stale.messages.push((5, Some(3), vec![]));
        let v = branch_violations(&rows, Some(6), Some(&stale));
        assert!(v.iter().any(|v| v.contains("GET /messages shows")), "{v:?}");

        let mut no_siblings = api(&rows);
        no_siblings.messages[2].2.clear();
        let v = branch_violations(&rows, Some(6), Some(&no_siblings));
        assert!(
            v.iter().any(|v| v.contains("message 4: sibling_ids []")),
            "{v:?}"
        );

        let mut wrong_tree = api(&rows);
        wrong_tree.tree[2].2 = true;
        let v = branch_violations(&rows, Some(6), Some(&wrong_tree));
        assert!(v.iter().any(|v| v.contains("GET /messages/tree")), "{v:?}");

        // Rows only the model reads are in neither; both `GET /messages`
        // and the tree hang their children from the nearest visible
        // ancestor. Rows an edit deleted before branches existed are in no
        // tree.
        let mut hidden = rows.clone();
        hidden.push(BranchRow {
            visible: false,
            ..row(7, Some(6), false)
        });
        hidden.push(row(8, Some(7), false));
        hidden.push(BranchRow {
            detached: true,
            ..row(9, None, true)
        });
        let mut shown = api(&rows);
        shown.messages.push((8, Some(6), vec![]));
        shown.tree.push((8, Some(6), true));
        let v = branch_violations(&hidden, Some(8), Some(&shown));
        assert_eq!(v, Vec::<String>::new());
        shown.tree.last_mut().unwrap().1 = Some(7);
        let v = branch_violations(&hidden, Some(8), Some(&shown));
        assert!(v.iter().any(|v| v.contains("GET /messages/tree")), "{v:?}");
        shown.messages.last_mut().unwrap().1 = Some(7);
        let v = branch_violations(&hidden, Some(8), Some(&shown));
        assert!(v.iter().any(|v| v.contains("GET /messages shows")), "{v:?}");
    }
}
