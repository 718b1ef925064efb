//! SQL of the `chat_messages` table: inserts and soft deletes (for
//! `crate::transitions` only: the triggers turn them into
//! `history_version` changes), the model's view of the history, and the
//! client-visible reads of the message routes and the stream.

use chatd_core::{ChatRole, FinishReason, MessagePart};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use chatd_core::context::ContextEntry;

use crate::models::{Chat, ChatMessage, NewMessage};

/// The columns of a [`ChatMessage`] of alias `m`, for the compile-checked
/// statements; [`message_of`] makes the row of the record.
macro_rules! message_columns {
    (@sql $d:tt $k:tt () $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            r#"m.id, m.chat_id, m.role, m.content AS "content: crate::queries::col::Content",
             m.visibility, m.compressed, m.deleted, m.revision AS "revision!", m.created_by,
             m.model_config_id, m.reasoning_effort, m.input_tokens, m.output_tokens,
             m.reasoning_tokens, m.cache_read_tokens, m.cache_creation_tokens, m.total_tokens,
             m.context_limit, m.total_cost_micros, m.runtime_ms, m.finish_reason,
             m.provider_response_id, m.queued_message_id, m.client_message_id,
             m.compacted_through_id, m.token_estimate, m.parent_id, m.visible_parent_id,
             m.sibling_ids, m.created_at"#
            $($rest)*)
    };
}

/// The [`ChatMessage`] of a record `$r` of a statement that selects
/// [`message_columns`]; an unknown role, visibility or finish reason is the
/// `ColumnDecode` error `FromRow` gives. Use where `?` returns a
/// `sqlx::Error`.
macro_rules! message_of {
    ($r:ident) => {
        ChatMessage {
            id: $r.id,
            chat_id: $r.chat_id,
            role: crate::queries::decode_column("role", $r.role)?,
            content: $r.content,
            visibility: crate::queries::decode_column("visibility", $r.visibility)?,
            compressed: $r.compressed,
            deleted: $r.deleted,
            parent_id: $r.parent_id,
            visible_parent_id: $r.visible_parent_id,
            sibling_ids: $r.sibling_ids,
            revision: $r.revision,
            created_by: $r.created_by,
            model_config_id: $r.model_config_id,
            reasoning_effort: $r.reasoning_effort,
            input_tokens: $r.input_tokens,
            output_tokens: $r.output_tokens,
            reasoning_tokens: $r.reasoning_tokens,
            cache_read_tokens: $r.cache_read_tokens,
            cache_creation_tokens: $r.cache_creation_tokens,
            total_tokens: $r.total_tokens,
            context_limit: $r.context_limit,
            total_cost_micros: $r.total_cost_micros,
            runtime_ms: $r.runtime_ms,
            finish_reason: match $r.finish_reason {
                Some(reason) => Some(crate::queries::decode_column("finish_reason", reason)?),
                None => None,
            },
            provider_response_id: $r.provider_response_id,
            queued_message_id: $r.queued_message_id,
            client_message_id: $r.client_message_id,
            compacted_through_id: $r.compacted_through_id,
            token_estimate: $r.token_estimate,
            created_at: $r.created_at,
        }
    };
}

/// Inserts one message; the trigger assigns `revision` and advances
/// `history_version`. Returns the row as stored: the statement returns only
/// what the database assigns (`id`, `revision`, `created_at`), the rest is
/// what was bound (issue 15: the whole row, content included, sent back
/// over the wire and parsed again, cost more than the insert's own work).
/// The content is stored as bound, since `jsonb` keeps this JSON as it is
/// (`serde_json` sorts object keys as `jsonb` does, and integers keep their
/// digits); content with a fractional number (a tool result's float) is
/// read back, since `jsonb` prints some of them otherwise (`1e16` as
/// `10000000000000000`). The test `insert_returns_the_row_a_read_finds`
/// compares the returned row with a read.
pub async fn insert(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    queued_message_id: Option<i64>,
) -> sqlx::Result<ChatMessage> {
    let role = message.role.map(|r| r.as_str()).unwrap_or("");
    let usage = message.usage;
    let token_estimate = chatd_core::context::estimate_tokens(&message.content);
    macro_rules! insert_sql {
        ($returning:tt) => {
            sqlx::query!(
                r#"INSERT INTO chat_messages (id, chat_id, role, content, visibility, compressed, created_by,
                     model_config_id, reasoning_effort, input_tokens, output_tokens, reasoning_tokens,
                     cache_read_tokens, cache_creation_tokens, total_tokens, context_limit,
                     total_cost_micros, runtime_ms, provider_response_id, queued_message_id,
                     client_message_id, finish_reason, compacted_through_id, token_estimate)
                 VALUES (
                     CASE WHEN $2 = 'assistant' THEN COALESCE(
                         (SELECT min(r.answer_message_id) FROM chat_responses r
                          WHERE r.chat_id = $1 AND r.answer_message_id >
                              (SELECT COALESCE(max(p.id), 0) FROM chat_messages p WHERE p.chat_id = $1)),
                         nextval('chat_messages_id_seq'))
                     ELSE nextval('chat_messages_id_seq') END,
                     $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                     $18, $19, $20, $21, $22, $23)
                 RETURNING id, revision AS "revision!", created_at, parent_id,
                     visible_parent_id, sibling_ids"#
                    + $returning,
                chat_id,
                role,
                Json(&message.content) as _,
                message.visibility.as_str(),
                message.compressed,
                message.created_by,
                message.model_config_id,
                message.reasoning_effort.as_deref(),
                usage.map(|u| u.input_tokens),
                usage.map(|u| u.output_tokens),
                usage.map(|u| u.reasoning_tokens),
                usage.map(|u| u.cache_read_tokens),
                usage.map(|u| u.cache_creation_tokens),
                usage.map(|u| u.total_tokens),
                message.context_limit,
                message.total_cost_micros,
                message.runtime_ms,
                message.provider_response_id.as_deref(),
                queued_message_id,
                message.client_message_id.as_deref(),
                message.finish_reason.map(FinishReason::as_str),
                message.compacted_through_id,
                token_estimate,
            )
        };
    }
    // Content with a fractional number reads back as `jsonb` prints it,
    // which is not always how it was bound (`1e16` comes back as
    // `10000000000000000`, an integer): such content is read back.
    let read_back = message.content.iter().any(has_fraction);
    type Assigned = (
        i64,
        i64,
        DateTime<Utc>,
        [Option<i64>; 2],
        Vec<i64>,
        Option<Json<Vec<MessagePart>>>,
    );
    let (id, revision, created_at, [parent_id, visible_parent_id], sibling_ids, stored): Assigned =
        if read_back {
            insert_sql!(r#", content AS "content: crate::queries::col::Content""#)
                .map(|r| {
                    (
                        r.id,
                        r.revision,
                        r.created_at,
                        [r.parent_id, r.visible_parent_id],
                        r.sibling_ids,
                        Some(r.content),
                    )
                })
                .fetch_one(&mut *conn)
                .await?
        } else {
            insert_sql!("")
                .map(|r| {
                    (
                        r.id,
                        r.revision,
                        r.created_at,
                        [r.parent_id, r.visible_parent_id],
                        r.sibling_ids,
                        None,
                    )
                })
                .fetch_one(&mut *conn)
                .await?
        };
    if let (Some(queued), Some(ChatRole::User)) = (queued_message_id, message.role) {
        // A response sent while the chat was busy starts now: its turn's
        // first message and the id of its answer (API.md "Compatible
        // protocols").
        sqlx::query!(
            "UPDATE chat_responses
             SET start_message_id = $3, answer_message_id = nextval('chat_messages_id_seq')
             WHERE chat_id = $1 AND queued_message_id = $2 AND start_message_id IS NULL",
            chat_id,
            queued,
            id
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(ChatMessage {
        id,
        chat_id,
        // The role's CHECK rejected a row without one.
        role: message.role.unwrap_or(ChatRole::User),
        content: stored.unwrap_or_else(|| Json(message.content.clone())),
        visibility: message.visibility,
        compressed: message.compressed,
        deleted: false,
        parent_id,
        visible_parent_id,
        sibling_ids,
        revision,
        created_by: message.created_by,
        model_config_id: message.model_config_id,
        reasoning_effort: message.reasoning_effort.clone(),
        input_tokens: usage.map(|u| u.input_tokens),
        output_tokens: usage.map(|u| u.output_tokens),
        reasoning_tokens: usage.map(|u| u.reasoning_tokens),
        cache_read_tokens: usage.map(|u| u.cache_read_tokens),
        cache_creation_tokens: usage.map(|u| u.cache_creation_tokens),
        total_tokens: usage.map(|u| u.total_tokens),
        context_limit: message.context_limit,
        total_cost_micros: message.total_cost_micros,
        runtime_ms: message.runtime_ms,
        finish_reason: message.finish_reason,
        provider_response_id: message.provider_response_id.clone(),
        queued_message_id,
        client_message_id: message.client_message_id.clone(),
        compacted_through_id: message.compacted_through_id,
        token_estimate: Some(token_estimate),
        created_at,
    })
}

/// Whether `part` holds a JSON number written with a fraction or an
/// exponent (a tool result's float), which `jsonb` may print back
/// otherwise.
fn has_fraction(part: &MessagePart) -> bool {
    fn value(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) => n.is_f64(),
            serde_json::Value::Array(items) => items.iter().any(value),
            serde_json::Value::Object(map) => map.values().any(value),
            _ => false,
        }
    }
    match part {
        MessagePart::ToolResult { result, .. } => value(result),
        _ => false,
    }
}

/// One message of the chat (deleted or not).
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<ChatMessage>> {
    sql!(query() [, chat_id, id]:
        "SELECT " message_columns!() " FROM chat_messages m WHERE m.chat_id = $1 AND m.id = $2")
    .try_map(|r| Ok(message_of!(r)))
    .fetch_optional(conn)
    .await
}

/// The model's view of the history (`chatd_core::context::model_context`):
/// with no boundary every active row; after a summary the leading system
/// rows, the summary, then the rows after what it covers; after a
/// clear-context marker the rows after it. In the order the model reads
/// them. User-only rows are left out.
pub async fn active_history(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Vec<ChatMessage>> {
    let mut rows: Vec<Option<ChatMessage>> =
        sql!(query() [, chat_id]: context_candidates!("SELECT " message_columns!()))
            .try_map(|r| Ok(message_of!(r)))
            .fetch_all(conn)
            .await?
            .into_iter()
            .map(Some)
            .collect();
    let entries: Vec<ContextEntry> = rows
        .iter()
        .flatten()
        .map(ChatMessage::context_entry)
        .collect();
    Ok(chatd_core::context::model_context(&entries)
        .into_iter()
        .filter_map(|i| rows[i].take())
        .collect())
}

/// What the context rules read of the model's rows
/// ([`active_history`]'s rows, in id order, unordered for the model), without
/// message bodies (a row older than the stored estimate is estimated from
/// its size in the database).
pub async fn context_entries(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Vec<ContextEntry>> {
    let rows: Vec<crate::models::EntryRow> = sql!(query_as(crate::models::EntryRow,) [, chat_id]:
        context_candidates!(context_entry_columns!(checked)))
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(crate::models::EntryRow::into_entry)
        .collect())
}

/// The context entry of a stored row, as [`context_entries`] would read it
/// (`context_entry_columns!`); `None` for a deleted row, or one without a
/// stored size estimate (rows written before the column existed, whose
/// estimate the statement computes from the stored JSON text).
pub(crate) fn entry_of(message: &ChatMessage) -> Option<ContextEntry> {
    if message.deleted {
        return None;
    }
    let usage = match (message.role, message.input_tokens) {
        (ChatRole::Assistant, Some(input)) => Some((
            input
                + message.cache_read_tokens.unwrap_or(0)
                + message.cache_creation_tokens.unwrap_or(0),
            message.output_tokens.unwrap_or(0),
        )),
        _ => None,
    };
    Some(ContextEntry {
        id: message.id,
        role: message.role,
        visibility: message.visibility,
        compressed: message.compressed,
        compacted_through_id: message.compacted_through_id,
        token_estimate: message.token_estimate?,
        usage,
    })
}

/// Contents of the active messages from the latest user message on (the only
/// place an unanswered tool call can be: every transition that inserts a user
/// message answers the calls before it), in id order.
pub async fn tail_contents(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Vec<Vec<MessagePart>>> {
    let rows: Vec<Json<Vec<MessagePart>>> = sqlx::query_scalar!(
        r#"SELECT content AS "content: crate::queries::col::Content" FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND id >= COALESCE(
             (SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND role = 'user'), 0)
         ORDER BY id"#,
        chat_id
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|Json(parts)| parts).collect())
}

/// Takes the active messages with `id >= from_id` off the active branch
/// (`deleted`: they stay, on an inactive branch), returning the ids of the
/// client-visible ones in ascending order (model-only rows are never named
/// to clients). Ids grow along a branch, so these are the active
/// branch's rows from `from_id` on.
pub async fn soft_delete_from(
    conn: &mut PgConnection,
    chat_id: Uuid,
    from_id: i64,
) -> sqlx::Result<Vec<i64>> {
    let mut ids: Vec<i64> = sqlx::query_scalar!(
        r#"WITH gone AS (
             UPDATE chat_messages SET deleted = true
             WHERE chat_id = $1 AND id >= $2 AND NOT deleted
             RETURNING id, visibility
         )
         SELECT id AS "id!" FROM gone WHERE visibility <> 'model'"#,
        chat_id,
        from_id
    )
    .fetch_all(conn)
    .await?;
    ids.sort_unstable();
    Ok(ids)
}

/// Sets the chat's active leaf (`chats.active_leaf_id`): the row the next
/// inserted message will follow (migration `0017_branches.sql`). Only the
/// branch transitions call it, after moving the `deleted` flags to match.
pub async fn set_active_leaf(
    conn: &mut PgConnection,
    chat_id: Uuid,
    leaf_id: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE chats SET active_leaf_id = $2 WHERE id = $1",
        chat_id,
        leaf_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The newest active client-visible user message before message `id`: the
/// question an assistant answer at `id` answers (`None` when there is none;
/// a compaction summary is a model-only `user` row and never counts).
pub async fn answered_user_message(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "SELECT max(id) FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND role = 'user' AND visibility <> 'model'
           AND id < $2",
        chat_id,
        id
    )
    .fetch_one(conn)
    .await
}

/// The newest row of the subtree under client-visible message `id` (itself
/// included): the leaf of the newest branch through it. Walks the tree of
/// visible parents (`chat_messages_parent_idx`), which has the same rows
/// under a visible row as the tree of parents. `None` when `id` is not a row of
/// this chat's tree (missing, another chat's, or deleted by an edit before
/// branches existed).
pub async fn newest_under(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"WITH RECURSIVE under(id) AS (
             SELECT id FROM chat_messages WHERE chat_id = $1 AND id = $2 AND NOT detached
             UNION ALL
             SELECT m.id FROM chat_messages m JOIN under u ON m.visible_parent_id = u.id
             WHERE m.chat_id = $1
         )
         SELECT max(id) AS "leaf" FROM under"#,
        chat_id,
        id
    )
    .fetch_one(conn)
    .await
}

/// Makes the branch from the root to `leaf_id` the active one: walks up
/// from `leaf_id` to the first row already active (the last row the two
/// branches share; none when they share no root), takes the active rows
/// after it off the branch and puts the walked rows on it. Returns
/// `(deactivated, activated)` ids, ascending. Work and writes are
/// proportional to the part of the two branches that differs.
pub async fn activate_path(
    conn: &mut PgConnection,
    chat_id: Uuid,
    leaf_id: i64,
) -> sqlx::Result<(Vec<i64>, Vec<i64>)> {
    let walked = sqlx::query!(
        r#"WITH RECURSIVE up(id, parent_id, deleted) AS (
             SELECT id, parent_id, deleted FROM chat_messages WHERE chat_id = $1 AND id = $2
             UNION ALL
             SELECT m.id, m.parent_id, m.deleted FROM chat_messages m JOIN up ON m.id = up.parent_id
             WHERE m.chat_id = $1 AND up.deleted
         )
         SELECT id AS "id!", deleted AS "deleted!" FROM up"#,
        chat_id,
        leaf_id
    )
    .fetch_all(&mut *conn)
    .await?;
    let shared = walked.iter().filter(|r| !r.deleted).map(|r| r.id).max();
    let joining: Vec<i64> = walked.iter().filter(|r| r.deleted).map(|r| r.id).collect();
    let mut deactivated: Vec<i64> = sqlx::query_scalar!(
        "UPDATE chat_messages SET deleted = true
         WHERE chat_id = $1 AND NOT deleted AND id > $2 RETURNING id",
        chat_id,
        shared.unwrap_or(0)
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut activated: Vec<i64> = sqlx::query_scalar!(
        "UPDATE chat_messages SET deleted = false
         WHERE chat_id = $1 AND id = ANY($2) AND deleted RETURNING id",
        chat_id,
        &joining
    )
    .fetch_all(&mut *conn)
    .await?;
    deactivated.sort_unstable();
    activated.sort_unstable();
    Ok((deactivated, activated))
}

/// One row of a chat's tree ([`tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeNode {
    /// Message id.
    pub id: i64,
    /// The row it follows (may be a model-only row, which [`tree`] leaves
    /// out: the node then hangs from that row's nearest visible ancestor).
    pub parent_id: Option<i64>,
    /// Role.
    pub role: ChatRole,
    /// The first 80 characters of its last non-empty text part.
    pub preview: Option<String>,
    /// On the active branch.
    pub active: bool,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
}

/// Every client-visible row of the chat's tree (every branch; not the rows
/// an edit deleted before branches existed), ascending by id, each with its
/// nearest client-visible ancestor as `parent_id`: what `GET
/// /chats/{chat}/messages/tree` returns.
pub async fn tree(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<TreeNode>> {
    let rows = sqlx::query!(
        r#"SELECT id, parent_id, role, visibility <> 'model' AS "visible!",
                  left(chat_message_preview(content), 80) AS preview, NOT deleted AS "active!",
                  created_at
           FROM chat_messages WHERE chat_id = $1 AND NOT detached ORDER BY id"#,
        chat_id
    )
    .fetch_all(conn)
    .await?;
    // Parents come before children (ids grow along a branch): one pass
    // resolves model-only parents. `hang_from[r]` is the visible row a child
    // of row `r` hangs from.
    let mut hang_from: std::collections::HashMap<i64, Option<i64>> =
        std::collections::HashMap::with_capacity(rows.len());
    let mut nodes = Vec::with_capacity(rows.len());
    for r in rows {
        let parent = r
            .parent_id
            .and_then(|p| hang_from.get(&p).copied().unwrap_or(Some(p)));
        if r.visible {
            hang_from.insert(r.id, Some(r.id));
            nodes.push(TreeNode {
                id: r.id,
                parent_id: parent,
                role: crate::queries::decode_column("role", r.role)?,
                preview: r.preview,
                active: r.active,
                created_at: r.created_at,
            });
        } else {
            hang_from.insert(r.id, parent);
        }
    }
    Ok(nodes)
}

/// Copies the active rows of chat `source` up to message `through_id` into
/// chat `target` (a fork, API.md "Branches, regenerate and fork") as one
/// branch, in one statement: ids are drawn in order, each copy's parent is
/// the copy before it, and the target's leaf, message count and preview are
/// set once at the end (the per-row triggers skip copies: a row-by-row
/// update of the chats row costs O(n^2) in one transaction). Each copy
/// keeps the row's content (file ids renamed by `file_map`, `{old: new}`),
/// role, visibility, usage and times, and records `copied_from_id` (the
/// usage ledger does not count copies); a boundary's
/// `compacted_through_id` names the copy of the row it named. Returns the
/// number of rows copied.
pub async fn copy_branch(
    conn: &mut PgConnection,
    source: Uuid,
    through_id: i64,
    target: Uuid,
    file_map: &serde_json::Value,
) -> sqlx::Result<u64> {
    let leaf = sqlx::query_scalar!(
        r#"WITH src AS (
             SELECT m.*, row_number() OVER (ORDER BY m.id) AS n
             FROM chat_messages m
             WHERE m.chat_id = $1 AND NOT m.deleted AND m.id <= $2
         ), ids AS (
             SELECT new_id, row_number() OVER (ORDER BY new_id) AS n
             FROM (SELECT nextval(pg_get_serial_sequence('chat_messages', 'id')) AS new_id FROM src) drawn
         ), mapped AS (
             SELECT src.*, ids.new_id, lag(ids.new_id) OVER (ORDER BY src.n) AS new_parent
             FROM src JOIN ids USING (n)
         ), copied AS (
             INSERT INTO chat_messages (id, parent_id, visible_parent_id, chat_id, role, content,
                 visibility, compressed,
                 created_by, model_config_id, reasoning_effort, input_tokens, output_tokens,
                 reasoning_tokens, cache_read_tokens, cache_creation_tokens, total_tokens,
                 context_limit, total_cost_micros, runtime_ms, provider_response_id, finish_reason,
                 compacted_through_id, token_estimate, copied_from_id, created_at)
             SELECT m.new_id, m.new_parent,
                 (SELECT c.new_id FROM mapped c WHERE c.id = m.visible_parent_id), $3, m.role,
                 CASE WHEN $4::jsonb = '{}'::jsonb OR jsonb_typeof(m.content) <> 'array' THEN m.content
                 ELSE COALESCE((
                     SELECT jsonb_agg(CASE WHEN p->>'type' = 'file' AND $4::jsonb ? (p->>'file_id')
                                           THEN jsonb_set(p, '{file_id}', $4::jsonb -> (p->>'file_id'))
                                           ELSE p END ORDER BY o)
                     FROM jsonb_array_elements(m.content) WITH ORDINALITY e(p, o)), '[]'::jsonb) END,
                 m.visibility, m.compressed, m.created_by, m.model_config_id, m.reasoning_effort,
                 m.input_tokens, m.output_tokens, m.reasoning_tokens, m.cache_read_tokens,
                 m.cache_creation_tokens, m.total_tokens, m.context_limit, m.total_cost_micros,
                 m.runtime_ms, m.provider_response_id, m.finish_reason,
                 (SELECT c.new_id FROM mapped c WHERE c.id = m.compacted_through_id),
                 m.token_estimate, m.id, m.created_at
             FROM mapped m
             ORDER BY m.n
             RETURNING id
         )
         SELECT max(id) AS "leaf" FROM copied"#,
        source,
        through_id,
        target,
        file_map
    )
    .fetch_one(&mut *conn)
    .await?;
    // The leaf, and the count and preview `maintain_chat_message_summary`
    // keeps (migration 0005), from the copies at once.
    let copied = sqlx::query!(
        r#"UPDATE chats c
         SET active_leaf_id = $2,
             message_count = v.n,
             last_message_preview = p.preview,
             last_message_preview_id = p.id
         FROM (SELECT count(*) AS n FROM chat_messages m
               WHERE m.chat_id = $1 AND NOT m.deleted AND m.visibility <> 'model') v
         LEFT JOIN LATERAL (
             SELECT q.preview, q.id FROM (
                 SELECT chat_message_preview(m.content) AS preview, m.id
                 FROM chat_messages m
                 WHERE m.chat_id = $1 AND NOT m.deleted AND m.visibility <> 'model'
                 ORDER BY m.id DESC
             ) q
             WHERE q.preview IS NOT NULL
             LIMIT 1
         ) p ON true
         WHERE c.id = $1
         RETURNING (SELECT count(*) FROM chat_messages WHERE chat_id = $1) AS "rows!""#,
        target,
        leaf
    )
    .fetch_one(&mut *conn)
    .await?
    .rows;
    Ok(copied as u64)
}

/// Whether message `id` is a client-visible row of chat `chat_id`'s active
/// branch.
pub async fn is_active_visible(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chat_messages
           WHERE chat_id = $1 AND id = $2 AND NOT deleted AND visibility <> 'model') AS "found!""#,
        chat_id,
        id
    )
    .fetch_one(conn)
    .await
}

/// Where a page of [`scan`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    /// The newest messages.
    Latest,
    /// The newest messages with a smaller id.
    Before(i64),
    /// The oldest messages with a larger id.
    After(i64),
}

/// At most `n` client-visible messages (not deleted, not model-only) from
/// `cursor`, **in paging order**: ascending by id for [`Cursor::After`],
/// descending (newest first) for [`Cursor::Latest`] and [`Cursor::Before`].
/// The message routes fetch one row more than a page can hold and cut the
/// page themselves (by count, by bytes and at tool-call groups; API.md
/// "Message windows and paging by size").
pub async fn scan(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    cursor: Cursor,
    n: i64,
) -> sqlx::Result<Vec<ChatMessage>> {
    // Client-visible rows of the chat.
    macro_rules! visible {
        ([$($args:tt)*] $rest:tt) => {
            sql!(query() [$($args)*]:
                "SELECT " message_columns!() " FROM chat_messages m
                 WHERE m.chat_id = $1 AND NOT m.deleted AND m.visibility <> 'model'" $rest)
            .try_map(|r| Ok(message_of!(r)))
            .fetch_all(conn)
            .await
        };
    }
    match cursor {
        Cursor::Latest => visible!([, chat_id, n] " ORDER BY m.id DESC LIMIT $2"),
        Cursor::Before(id) => {
            visible!([, chat_id, n, id] " AND m.id < $3 ORDER BY m.id DESC LIMIT $2")
        }
        Cursor::After(id) => visible!([, chat_id, n, id] " AND m.id > $3 ORDER BY m.id LIMIT $2"),
    }
}

/// Number of client-visible messages with `after < id < before` (the
/// omitted middle of a message window).
pub async fn count_visible_between(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    after: i64,
    before: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND visibility <> 'model' AND id > $2 AND id < $3"#,
        chat_id,
        after,
        before
    )
    .fetch_one(conn)
    .await
}

/// Number of messages a compaction could summarize or keep: the rows of
/// the model context ([`active_history`]) that are neither system rows nor
/// a summary (after a clear-context, only those after it).
pub async fn compactable_count(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<i64> {
    let entries = context_entries(conn, chat_id).await?;
    let count = chatd_core::context::model_context(&entries)
        .into_iter()
        .filter(|&i| entries[i].role != ChatRole::System && !entries[i].compressed)
        .count();
    Ok(i64::try_from(count).unwrap_or(i64::MAX))
}

/// Rows of the chat changed after history version `since` (`revision >
/// since`), soft-deleted and model-only ones included, in id order (stream
/// loop message synchronisation).
pub async fn changed_since(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    since: i64,
) -> sqlx::Result<Vec<ChatMessage>> {
    sql!(query() [, chat_id, since]:
        "SELECT " message_columns!()
        " FROM chat_messages m WHERE m.chat_id = $1 AND m.revision > $2 ORDER BY m.id")
    .try_map(|r| Ok(message_of!(r)))
    .fetch_all(conn)
    .await
}

/// At most `limit` rows of the chat with `id >= from_id`, on every branch
/// (soft-deleted and model-only ones included), in id order: what the
/// compatible protocols read to follow one turn down the tree from its
/// first message (API.md "Compatible protocols").
pub async fn from_id(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    from_id: i64,
    limit: i64,
) -> sqlx::Result<Vec<ChatMessage>> {
    sql!(query() [, chat_id, from_id, limit]:
        "SELECT " message_columns!()
        " FROM chat_messages m WHERE m.chat_id = $1 AND m.id >= $2 ORDER BY m.id LIMIT $3")
    .try_map(|r| Ok(message_of!(r)))
    .fetch_all(conn)
    .await
}

/// Every current client-visible message of the chat (not soft-deleted, not
/// model-only), in id order (the stream loop's full refresh).
pub async fn visible(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<ChatMessage>> {
    sql!(query() [, chat_id]:
        "SELECT " message_columns!() " FROM chat_messages m
         WHERE m.chat_id = $1 AND NOT m.deleted AND m.visibility <> 'model' ORDER BY m.id")
    .try_map(|r| Ok(message_of!(r)))
    .fetch_all(conn)
    .await
}

/// Recomputes `Chat.context` from the rows of the model context (no message
/// bodies but those of rows older than the stored estimate): the tokens and
/// estimate flag of [`chatd_core::context::context_usage`], the window of
/// the chat's model config (its last one, else the default), the summaries
/// in the active history and the last message the newest one covers (none
/// after a clear-context); returns the updated row. Run once by every
/// transaction that changed the history, before its commit, under the
/// chat's row lock.
pub async fn refresh_context(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Chat> {
    let entries = context_entries(&mut *conn, chat_id).await?;
    refresh_context_from(conn, chat_id, &entries, false).await
}

/// The `SET` of the context columns (`$2` tokens, `$3` estimated, `$4`
/// the last message the newest summary covers; `$1` the chat id) that
/// [`refresh_context_from`] and [`refresh_context_facts`] write.
macro_rules! context_columns_set {
    (@sql $d:tt $k:tt ($($derived:tt)+) $($rest:tt)*) => {
        $crate::queries::sql!(@go $d $k
            "UPDATE chats c SET context_tokens = $2, context_estimated = $3,
             compacted_through_message_id = $4, "
            $($derived)+
            " WHERE id = $1 "
            $($rest)*)
    };
}

/// What the context columns hold for `entries`: the tokens and estimate
/// flag of [`chatd_core::context::context_usage`] and the last message the
/// newest summary covers (none after a clear-context).
pub(crate) fn context_values(entries: &[ContextEntry]) -> (i64, bool, Option<i64>) {
    let order = chatd_core::context::model_context(entries);
    let ctx: Vec<&ContextEntry> = order.iter().map(|&i| &entries[i]).collect();
    let usage = chatd_core::context::context_usage(&ctx);
    let through = entries
        .iter()
        .rev()
        .find(|e| e.compressed)
        .filter(|b| !b.is_clear_marker())
        .map(ContextEntry::covered_through);
    (usage.tokens, usage.estimated, through)
}

/// [`refresh_context`] from the chat's [`context_entries`] read in this
/// transaction after its last write (by [`crate::models::ChatFacts`]).
/// `appended_only`: the history changed only by ordinary rows appended
/// since the row's context was last written (the entries are a bundle's
/// log, [`crate::context_cache`]), so the summaries are not counted again.
pub(crate) async fn refresh_context_from(
    conn: &mut PgConnection,
    chat_id: Uuid,
    entries: &[ContextEntry],
    appended_only: bool,
) -> sqlx::Result<Chat> {
    let (tokens, estimated, through) = context_values(entries);
    if appended_only {
        sql!(query() [, chat_id, tokens, estimated, through]:
            context_columns_set!(context_limit_set!()) "RETURNING " chat_columns!())
        .try_map(|r| Ok(chat_of!(r)))
        .fetch_one(conn)
        .await
    } else {
        sql!(query() [, chat_id, tokens, estimated, through]:
            context_columns_set!(context_derived_sets!()) "RETURNING " chat_columns!())
        .try_map(|r| Ok(chat_of!(r)))
        .fetch_one(conn)
        .await
    }
}

/// [`refresh_context_from`] returning the row's facts (without the context
/// entries, which the caller has): the read that lands a transition whose
/// history writes the bundle followed ([`crate::context_cache`]), so that
/// the landing check and `Chat.context` take one statement. The bundle
/// only appended ordinary rows, so the summaries are not counted again.
pub(crate) async fn refresh_context_facts(
    conn: &mut PgConnection,
    chat_id: Uuid,
    entries: &[ContextEntry],
) -> sqlx::Result<crate::models::ChatFacts> {
    let (tokens, estimated, through) = context_values(entries);
    sql!(query() [, chat_id, tokens, estimated, through]:
        context_columns_set!(context_limit_set!())
        "RETURNING " chat_columns!() ", " chat_facts_columns_without_entries!(checked "c")
    )
    .try_map(|r| Ok(facts_of!(r)))
    .fetch_one(conn)
    .await
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_one_message() -> anyhow::Result<()> {
        use crate::NewMessage;
        use crate::queries::{chats, messages};
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let mut tx = pool.begin().await?;
        let bumped = chats::lock_and_bump(&mut tx, chat.id)
            .await?
            .expect("exists");
        let answer = NewMessage::assistant(vec![MessagePart::text("hello")]);
        let row = messages::insert(&mut tx, chat.id, &answer, None).await?;
        // The trigger stamps the row with the bundle's snapshot version.
        assert_eq!(row.revision, bumped.facts.chat.snapshot_version);
        tx.rollback().await?; // ChatTx::commit_step and the other transitions do this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_one_message_of_the_chat_deleted_or_not() -> anyhow::Result<()> {
        use crate::queries::messages;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let first = &created.initial_messages[0];
        let row = messages::select(pool, chat.id, first.id)
            .await?
            .expect("exists");
        assert_eq!(row.content.0, first.content.0);
        assert!(
            messages::select(pool, uuid::Uuid::new_v4(), first.id)
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn active_history_the_model_s_view_of_the_history_chatd_core_context_model()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        use chatd_core::ChatRole;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let history = messages::active_history(pool, chat.id).await?;
        assert_eq!(
            history.iter().map(|m| m.role).collect::<Vec<_>>(),
            vec![ChatRole::User]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn tail_contents_contents_of_the_active_messages_from_the_latest_user()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        use chatd_core::MessagePart;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let tail = messages::tail_contents(pool, chat.id).await?;
        assert_eq!(tail, vec![vec![MessagePart::text("hi")]]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn soft_delete_from_soft_deletes_the_active_messages_with_id_from_id()
    -> anyhow::Result<()> {
        use crate::queries::{chats, messages};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let first = created.initial_messages[0].id;
        let mut tx = pool.begin().await?;
        chats::lock_and_bump(&mut tx, chat.id).await?;
        assert_eq!(
            messages::soft_delete_from(&mut tx, chat.id, first).await?,
            vec![first]
        );
        assert!(
            messages::soft_delete_from(&mut tx, chat.id, first)
                .await?
                .is_empty()
        );
        tx.rollback().await?; // ChatTx::edit_message does this for real
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn scan_at_most_n_client_visible_messages_not_deleted_not_model_only_from()
    -> anyhow::Result<()> {
        use crate::queries::messages::{self, Cursor};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let first = created.initial_messages[0].id;
        let rows = messages::scan(pool, chat.id, Cursor::Latest, 51).await?;
        assert_eq!(rows.iter().map(|m| m.id).collect::<Vec<_>>(), vec![first]);
        assert!(
            messages::scan(pool, chat.id, Cursor::After(first), 51)
                .await?
                .is_empty()
        );
        assert_eq!(
            messages::scan(pool, chat.id, Cursor::Before(first + 1), 1)
                .await?
                .len(),
            1
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn count_visible_between_number_of_client_visible_messages_with_after_id()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let first = created.initial_messages[0].id;
        assert_eq!(
            messages::count_visible_between(pool, chat.id, 0, first + 1).await?,
            1
        );
        assert_eq!(
            messages::count_visible_between(pool, chat.id, first, first + 1).await?,
            0
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn compactable_count_number_of_messages_a_compaction_could_summarize_or()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert_eq!(messages::compactable_count(pool, chat.id).await?, 1);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn changed_since_rows_of_the_chat_changed_after_history_version_since()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        assert_eq!(messages::changed_since(pool, chat.id, 0).await?.len(), 1);
        assert!(
            messages::changed_since(pool, chat.id, chat.history_version)
                .await?
                .is_empty()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn visible_every_current_client_visible_message_of_the_chat_not_soft()
    -> anyhow::Result<()> {
        use crate::queries::messages;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let rows = messages::visible(pool, chat.id).await?;
        assert_eq!(
            rows.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![created.initial_messages[0].id]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn refresh_context_recomputes_chat_context_from_the_rows_of_the_model()
    -> anyhow::Result<()> {
        use crate::queries::{chats, messages};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        // CreateChat refreshed it: one user message "hi" is an estimate of 1 + 4 tokens.
        assert_eq!(created.chat.context_tokens, Some(5));
        assert!(created.chat.context_estimated);
        let mut tx = pool.begin().await?;
        let refreshed = messages::refresh_context(&mut tx, chat.id).await?;
        assert_eq!(refreshed.context_tokens, Some(5));
        tx.commit().await?;
        Ok(())
    }
}
