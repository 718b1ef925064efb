//! SQL of the HTTP layer, one function per statement, grouped by table.
//!
//! Reads of chat rows and metadata updates only: every write of execution
//! state (status, archived, messages, queue, versions) goes through the
//! transitions of `chatd_store`. The exceptions are a metadata update run
//! under [`chatd_store::ChatMachine::lock`] and a hard delete, both of which
//! leave no chat row with changed execution state behind.

use chatd_store::{Chat, ChatMessage};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::admin::{McpTransport, ModelOptions, ProviderKind};
use crate::auth::{Role, UserRow};
use crate::users::Replica;

// ---------------------------------------------------------------- chats

/// One chat row.
pub async fn chat(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<Chat>> {
    sqlx::query_as("SELECT * FROM chats WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// Whether chat `id` exists and belongs to `owner`.
pub async fn chat_owned_by(pool: &PgPool, id: Uuid, owner: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2)")
        .bind(id)
        .bind(owner)
        .fetch_one(pool)
        .await
}

/// Filters of `GET /chats`.
#[derive(Debug, Clone)]
pub struct ChatFilter {
    /// Whose chats.
    pub owner: Uuid,
    /// Archived ones or unarchived ones.
    pub archived: bool,
    /// Case-insensitive title substring.
    pub q: Option<String>,
    /// Label keys that must match...
    pub label_keys: Vec<String>,
    /// ...these values, pairwise.
    pub label_values: Vec<String>,
    /// Cursor: the last chat of the previous page.
    pub after_id: Option<Uuid>,
    /// Page size.
    pub limit: i64,
}

/// A page of chats, newest `updated_at` first, ties by id descending.
pub async fn list_chats(pool: &PgPool, f: &ChatFilter) -> sqlx::Result<Vec<Chat>> {
    sqlx::query_as(
        "SELECT c.* FROM chats c
         WHERE c.owner_id = $1
           AND c.archived = $2
           AND ($3::text IS NULL OR strpos(lower(c.title), lower($3)) > 0)
           AND NOT EXISTS (
               SELECT 1 FROM unnest($4::text[], $5::text[]) AS f(k, v)
               WHERE (c.labels ->> f.k) IS DISTINCT FROM f.v)
           AND ($6::uuid IS NULL
                OR (c.updated_at, c.id) < (SELECT a.updated_at, a.id FROM chats a WHERE a.id = $6))
         ORDER BY c.updated_at DESC, c.id DESC
         LIMIT $7",
    )
    .bind(f.owner)
    .bind(f.archived)
    .bind(&f.q)
    .bind(&f.label_keys)
    .bind(&f.label_values)
    .bind(f.after_id)
    .bind(f.limit)
    .fetch_all(pool)
    .await
}

/// Metadata fields of a `PATCH /chats/{chat}`; `None` keeps a column.
#[derive(Debug, Clone, Default)]
pub struct MetadataChanges {
    /// New title.
    pub title: Option<String>,
    /// New labels (JSON object).
    pub labels: Option<Value>,
    /// New pin order.
    pub pin_order: Option<i32>,
    /// New plan mode (`Some(None)` clears it).
    pub plan_mode: Option<Option<String>>,
}

/// Applies metadata changes and advances `updated_at` (strictly, even within
/// one microsecond), returning the row. The caller holds the row lock.
pub async fn update_metadata(
    conn: &mut PgConnection,
    id: Uuid,
    c: &MetadataChanges,
) -> sqlx::Result<Chat> {
    sqlx::query_as(
        "UPDATE chats SET
             title = COALESCE($2, title),
             labels = COALESCE($3, labels),
             pin_order = COALESCE($4, pin_order),
             plan_mode = CASE WHEN $5 THEN $6 ELSE plan_mode END,
             updated_at = greatest(now(), updated_at + interval '1 microsecond')
         WHERE id = $1
         RETURNING *",
    )
    .bind(id)
    .bind(&c.title)
    .bind(&c.labels)
    .bind(c.pin_order)
    .bind(c.plan_mode.is_some())
    .bind(c.plan_mode.clone().flatten())
    .fetch_one(conn)
    .await
}

/// Locks chat `id` and its descendants (by `parent_chat_id`) `FOR UPDATE`
/// in id order and returns `(id, status, archived, queue non-empty)` of
/// each.
pub async fn lock_descendants(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Vec<(Uuid, String, bool, bool)>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "WITH RECURSIVE sub AS (
             SELECT id FROM chats WHERE id = $1
             UNION
             SELECT c.id FROM chats c JOIN sub ON c.parent_chat_id = sub.id)
         SELECT c.id FROM chats c WHERE c.id IN (SELECT id FROM sub) ORDER BY c.id FOR UPDATE",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query_as(
        "SELECT c.id, c.status, c.archived,
                EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id)
         FROM chats c WHERE c.id = ANY($1) ORDER BY c.id",
    )
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// Deletes chat `id`; its rows and descendants go with it (`ON DELETE
/// CASCADE`).
pub async fn delete_chat(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM chats WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
}

// ---------------------------------------------------------------- messages

/// Where a message page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    /// The newest messages.
    Latest,
    /// The newest messages with a smaller id.
    Before(i64),
    /// The oldest messages with a larger id.
    After(i64),
}

/// A page of client-visible messages (not deleted, not model-only),
/// ascending by id, and whether more exist beyond it in the paging
/// direction.
pub async fn message_page(
    conn: &mut PgConnection,
    chat_id: Uuid,
    cursor: Cursor,
    limit: i64,
) -> sqlx::Result<(Vec<ChatMessage>, bool)> {
    const VISIBLE: &str = "chat_id = $1 AND NOT deleted AND visibility <> 'model'";
    let (sql, bound) = match cursor {
        Cursor::Latest => (
            format!(
                "SELECT * FROM (SELECT * FROM chat_messages WHERE {VISIBLE} ORDER BY id DESC LIMIT $2) m ORDER BY id"
            ),
            None,
        ),
        Cursor::Before(id) => (
            format!(
                "SELECT * FROM (SELECT * FROM chat_messages WHERE {VISIBLE} AND id < $3 ORDER BY id DESC LIMIT $2) m ORDER BY id"
            ),
            Some(id),
        ),
        Cursor::After(id) => (
            format!("SELECT * FROM chat_messages WHERE {VISIBLE} AND id > $3 ORDER BY id LIMIT $2"),
            Some(id),
        ),
    };
    let mut query = sqlx::query_as::<_, ChatMessage>(sqlx::AssertSqlSafe(sql))
        .bind(chat_id)
        .bind(limit + 1);
    if let Some(id) = bound {
        query = query.bind(id);
    }
    let mut rows = query.fetch_all(conn).await?;
    let has_more = rows.len() as i64 > limit;
    if has_more {
        match cursor {
            Cursor::After(_) => {
                rows.pop();
            }
            _ => {
                rows.remove(0);
            }
        }
    }
    Ok((rows, has_more))
}

/// Client-visible messages after the latest compaction boundary (a
/// `compressed` row), or in the whole history when there is none.
pub async fn visible_messages_since_boundary(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND visibility <> 'model'
           AND id > COALESCE((SELECT max(id) FROM chat_messages
                              WHERE chat_id = $1 AND compressed AND NOT deleted), 0)",
    )
    .bind(chat_id)
    .fetch_one(conn)
    .await
}

/// Rows of the chat changed after history version `since` (`revision >
/// since`), soft-deleted and model-only ones included, in id order (stream
/// loop message synchronisation).
pub async fn messages_changed_since(
    conn: &mut PgConnection,
    chat_id: Uuid,
    since: i64,
) -> sqlx::Result<Vec<ChatMessage>> {
    sqlx::query_as("SELECT * FROM chat_messages WHERE chat_id = $1 AND revision > $2 ORDER BY id")
        .bind(chat_id)
        .bind(since)
        .fetch_all(conn)
        .await
}

/// Every current client-visible message of the chat (not soft-deleted, not
/// model-only), in id order (the stream loop's full refresh).
pub async fn current_messages(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Vec<ChatMessage>> {
    sqlx::query_as(
        "SELECT * FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND visibility <> 'model' ORDER BY id",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await
}

// ---------------------------------------------------------------- send receipts

/// The stored `(request hash, response)` of an earlier send with `key`.
pub async fn send_receipt(
    conn: &mut PgConnection,
    chat_id: Uuid,
    key: &str,
) -> sqlx::Result<Option<(Vec<u8>, Value)>> {
    sqlx::query_as(
        "SELECT request_hash, response FROM chat_send_receipts WHERE chat_id = $1 AND client_message_id = $2",
    )
    .bind(chat_id)
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Remembers the response of a send with `key`.
pub async fn insert_send_receipt(
    conn: &mut PgConnection,
    chat_id: Uuid,
    key: &str,
    hash: &[u8],
    response: &Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO chat_send_receipts (chat_id, client_message_id, request_hash, response)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(chat_id)
    .bind(key)
    .bind(hash)
    .bind(response)
    .execute(conn)
    .await
    .map(|_| ())
}

// ---------------------------------------------------------------- users

/// One user.
pub(crate) async fn user(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as("SELECT id, username, role, created_at FROM users WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// Inserts a user (a duplicate name is a unique violation, `23505`).
pub(crate) async fn insert_user(
    pool: &PgPool,
    username: &str,
    role: Role,
) -> sqlx::Result<UserRow> {
    sqlx::query_as(
        "INSERT INTO users (id, username, role) VALUES ($1, $2, $3)
         RETURNING id, username, role, created_at",
    )
    .bind(Uuid::new_v4())
    .bind(username)
    .bind(role.as_str())
    .fetch_one(pool)
    .await
}

/// Every registered replica, oldest first.
pub(crate) async fn list_replicas(pool: &PgPool) -> sqlx::Result<Vec<Replica>> {
    sqlx::query_as(
        "SELECT id, advertise_url, started_at, last_seen_at FROM replicas ORDER BY started_at, id",
    )
    .fetch_all(pool)
    .await
}

/// The advertised URL of replica `id` (the parts endpoint's host), if it is
/// registered.
pub async fn replica_url(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT advertise_url FROM replicas WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

// ---------------------------------------------------------------- sync poller

#[derive(sqlx::FromRow)]
struct VersionsRow {
    id: Uuid,
    snapshot_version: i64,
    history_version: i64,
    queue_version: i64,
    retry_state_version: i64,
    generation_attempt: i64,
    status: String,
    worker_id: Option<Uuid>,
}

/// The version columns of every chat among `ids` that exists, in one query
/// (spec "Sync poller" → "Polling", verbatim). Rows with an unknown status
/// are skipped.
pub async fn chat_versions(
    pool: &PgPool,
    ids: &[Uuid],
) -> sqlx::Result<Vec<crate::stream::ChatVersions>> {
    let rows: Vec<VersionsRow> = sqlx::query_as(
        "SELECT id, snapshot_version, history_version, queue_version, retry_state_version, generation_attempt, status, worker_id
         FROM chats
         WHERE id = ANY($1::uuid[])",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some(crate::stream::ChatVersions {
                id: r.id,
                snapshot_version: r.snapshot_version,
                history_version: r.history_version,
                queue_version: r.queue_version,
                retry_state_version: r.retry_state_version,
                generation_attempt: r.generation_attempt,
                status: r.status.parse().ok()?,
                worker_id: r.worker_id,
            })
        })
        .collect())
}

// ---------------------------------------------------------------- providers

/// A row of `chat_providers`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProviderRow {
    /// Id.
    pub id: Uuid,
    /// Kind.
    pub provider: String,
    /// Display name.
    pub display_name: String,
    /// Base URL.
    pub base_url: Option<String>,
    /// API key (never sent to clients).
    pub api_key: Option<String>,
    /// Enabled.
    pub enabled: bool,
    /// Creation time.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Last change.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// A complete provider definition to write.
#[derive(Debug, Clone)]
pub struct ProviderDef {
    /// Id.
    pub id: Uuid,
    /// Kind.
    pub provider: ProviderKind,
    /// Display name.
    pub display_name: String,
    /// Base URL.
    pub base_url: Option<String>,
    /// API key.
    pub api_key: Option<String>,
    /// Enabled.
    pub enabled: bool,
}

/// Every provider, oldest first.
pub async fn list_providers(pool: &PgPool) -> sqlx::Result<Vec<ProviderRow>> {
    sqlx::query_as("SELECT * FROM chat_providers ORDER BY created_at, id")
        .fetch_all(pool)
        .await
}

/// Inserts a provider, or (same id) overwrites it.
pub async fn upsert_provider(
    conn: impl PgExecutor<'_>,
    d: &ProviderDef,
) -> sqlx::Result<ProviderRow> {
    sqlx::query_as(
        "INSERT INTO chat_providers (id, provider, display_name, base_url, api_key, enabled)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider,
             display_name = EXCLUDED.display_name, base_url = EXCLUDED.base_url,
             api_key = EXCLUDED.api_key, enabled = EXCLUDED.enabled, updated_at = now()
         RETURNING *",
    )
    .bind(d.id)
    .bind(d.provider.as_str())
    .bind(&d.display_name)
    .bind(&d.base_url)
    .bind(&d.api_key)
    .bind(d.enabled)
    .fetch_one(conn)
    .await
}

/// Inserts a new provider.
pub async fn insert_provider(pool: &PgPool, d: &ProviderDef) -> sqlx::Result<ProviderRow> {
    upsert_provider(pool, d).await
}

/// Overwrites provider `d.id`.
pub async fn update_provider(
    conn: &mut PgConnection,
    d: &ProviderDef,
) -> sqlx::Result<ProviderRow> {
    upsert_provider(conn, d).await
}

/// One provider, locked `FOR UPDATE`.
pub async fn provider_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<ProviderRow>> {
    sqlx::query_as("SELECT * FROM chat_providers WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Whether provider `id` exists.
pub async fn provider_exists(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM chat_providers WHERE id = $1)")
        .bind(id)
        .fetch_one(conn)
        .await
}

/// Deletes provider `id` (its model configs cascade); false when unknown.
pub async fn delete_provider(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query("DELETE FROM chat_providers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

// ---------------------------------------------------------------- model configs

/// Advisory lock key serialising model-config mutations.
const MODEL_CONFIG_LOCK: i64 = 7_700_201;
/// Advisory lock key serialising config-file application.
pub(crate) const CONFIG_FILE_LOCK: i64 = 7_700_202;

/// A row of `chat_model_configs`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ModelConfigRow {
    /// Id.
    pub id: Uuid,
    /// Provider.
    pub provider_id: Uuid,
    /// Model name.
    pub model: String,
    /// Display name.
    pub display_name: String,
    /// Context window, tokens.
    pub context_limit: i64,
    /// Compaction threshold, percent.
    pub compression_threshold: i32,
    /// Default marker.
    pub is_default: bool,
    /// Enabled.
    pub enabled: bool,
    /// Options JSON.
    pub options: Value,
    /// Creation time.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Last change.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// A complete model config definition to write.
#[derive(Debug, Clone)]
pub struct ModelConfigDef {
    /// Id.
    pub id: Uuid,
    /// Provider.
    pub provider_id: Uuid,
    /// Model name.
    pub model: String,
    /// Display name.
    pub display_name: String,
    /// Context window, tokens.
    pub context_limit: i64,
    /// Compaction threshold, percent.
    pub compression_threshold: i32,
    /// Default marker.
    pub is_default: bool,
    /// Enabled.
    pub enabled: bool,
    /// Options.
    pub options: ModelOptions,
}

/// Takes the transaction-scoped advisory lock of model-config mutations.
pub async fn lock_model_configs(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MODEL_CONFIG_LOCK)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Every model config (or only the enabled ones of enabled providers),
/// default first, then oldest first.
pub async fn list_model_configs(
    pool: &PgPool,
    only_enabled: bool,
) -> sqlx::Result<Vec<ModelConfigRow>> {
    sqlx::query_as(
        "SELECT m.* FROM chat_model_configs m JOIN chat_providers p ON p.id = m.provider_id
         WHERE NOT $1 OR (m.enabled AND p.enabled)
         ORDER BY m.is_default DESC, m.created_at, m.id",
    )
    .bind(only_enabled)
    .fetch_all(pool)
    .await
}

/// One model config.
pub async fn model_config(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<ModelConfigRow>> {
    sqlx::query_as("SELECT * FROM chat_model_configs WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Whether model config `id` exists and is enabled.
pub async fn model_config_enabled(pool: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM chat_model_configs WHERE id = $1 AND enabled)")
        .bind(id)
        .fetch_one(pool)
        .await
}

/// The enabled default model config.
pub async fn default_model_config(pool: &PgPool) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar("SELECT id FROM chat_model_configs WHERE is_default AND enabled LIMIT 1")
        .fetch_optional(pool)
        .await
}

/// Inserts or overwrites a model config; when it is the default, the
/// previous default is unset first (same transaction). Hold
/// [`lock_model_configs`].
pub async fn upsert_model_config(
    conn: &mut PgConnection,
    d: &ModelConfigDef,
) -> sqlx::Result<ModelConfigRow> {
    if d.is_default {
        sqlx::query(
            "UPDATE chat_model_configs SET is_default = false, updated_at = now()
             WHERE is_default AND id <> $1",
        )
        .bind(d.id)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query_as(
        "INSERT INTO chat_model_configs (id, provider_id, model, display_name, context_limit,
             compression_threshold, is_default, enabled, options)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (id) DO UPDATE SET provider_id = EXCLUDED.provider_id, model = EXCLUDED.model,
             display_name = EXCLUDED.display_name, context_limit = EXCLUDED.context_limit,
             compression_threshold = EXCLUDED.compression_threshold,
             is_default = EXCLUDED.is_default, enabled = EXCLUDED.enabled,
             options = EXCLUDED.options, updated_at = now()
         RETURNING *",
    )
    .bind(d.id)
    .bind(d.provider_id)
    .bind(&d.model)
    .bind(&d.display_name)
    .bind(d.context_limit)
    .bind(d.compression_threshold)
    .bind(d.is_default)
    .bind(d.enabled)
    .bind(serde_json::to_value(&d.options).unwrap_or_else(|_| Value::Object(Default::default())))
    .fetch_one(conn)
    .await
}

/// Restores "exactly one enabled default while any config is enabled": a
/// disabled config is never the default, and without an enabled default the
/// oldest enabled config becomes it. Hold [`lock_model_configs`].
pub async fn ensure_default_model_config(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE chat_model_configs SET is_default = false, updated_at = now()
         WHERE is_default AND NOT enabled",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE chat_model_configs SET is_default = true, updated_at = now()
         WHERE id = (SELECT id FROM chat_model_configs WHERE enabled ORDER BY created_at, id LIMIT 1)
           AND NOT EXISTS (SELECT 1 FROM chat_model_configs WHERE is_default AND enabled)",
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes model config `id`; false when unknown.
pub async fn delete_model_config(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query("DELETE FROM chat_model_configs WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

// ---------------------------------------------------------------- MCP servers

/// A row of `chat_mcp_servers`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct McpServerRow {
    /// Id.
    pub id: Uuid,
    /// Slug.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Transport.
    pub transport: String,
    /// Command.
    pub command: Option<String>,
    /// Arguments (JSON array).
    pub args: Value,
    /// Environment (JSON object).
    pub env: Value,
    /// URL.
    pub url: Option<String>,
    /// Headers (JSON object).
    pub headers: Value,
    /// Enabled.
    pub enabled: bool,
    /// Creation time.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Last change.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// A complete MCP server definition to write.
#[derive(Debug, Clone)]
pub struct McpServerDef {
    /// Id.
    pub id: Uuid,
    /// Slug.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Transport.
    pub transport: McpTransport,
    /// Command.
    pub command: Option<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// URL.
    pub url: Option<String>,
    /// Headers.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Enabled.
    pub enabled: bool,
}

/// Every MCP server, by slug.
pub async fn list_mcp_servers(pool: &PgPool) -> sqlx::Result<Vec<McpServerRow>> {
    sqlx::query_as("SELECT * FROM chat_mcp_servers ORDER BY slug")
        .fetch_all(pool)
        .await
}

/// The ids among `ids` that are MCP servers.
pub async fn existing_mcp_servers(pool: &PgPool, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT id FROM chat_mcp_servers WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(pool)
        .await
}

/// Inserts an MCP server (a taken slug is `23505`).
pub async fn insert_mcp_server(pool: &PgPool, d: &McpServerDef) -> sqlx::Result<McpServerRow> {
    mcp_statement(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *",
        pool,
        d,
    )
    .await
}

/// Inserts an MCP server or overwrites the one with the same slug (config
/// file).
pub async fn upsert_mcp_server_by_slug(
    conn: &mut PgConnection,
    d: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    mcp_statement(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (slug) DO UPDATE SET display_name = EXCLUDED.display_name,
             transport = EXCLUDED.transport, command = EXCLUDED.command, args = EXCLUDED.args,
             env = EXCLUDED.env, url = EXCLUDED.url, headers = EXCLUDED.headers,
             enabled = EXCLUDED.enabled, updated_at = now()
         RETURNING *",
        conn,
        d,
    )
    .await
}

/// Overwrites MCP server `d.id` (a taken slug is `23505`).
pub async fn update_mcp_server(
    conn: &mut PgConnection,
    d: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    mcp_statement(
        "UPDATE chat_mcp_servers SET slug = $2, display_name = $3, transport = $4, command = $5,
             args = $6, env = $7, url = $8, headers = $9, enabled = $10, updated_at = now()
         WHERE id = $1 RETURNING *",
        conn,
        d,
    )
    .await
}

async fn mcp_statement(
    sql: &'static str,
    conn: impl PgExecutor<'_>,
    d: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    sqlx::query_as(sql)
        .bind(d.id)
        .bind(&d.slug)
        .bind(&d.display_name)
        .bind(d.transport.as_str())
        .bind(&d.command)
        .bind(serde_json::to_value(&d.args).unwrap_or(Value::Null))
        .bind(serde_json::to_value(&d.env).unwrap_or(Value::Null))
        .bind(&d.url)
        .bind(serde_json::to_value(&d.headers).unwrap_or(Value::Null))
        .bind(d.enabled)
        .fetch_one(conn)
        .await
}

/// One MCP server, locked `FOR UPDATE`.
pub async fn mcp_server_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<McpServerRow>> {
    sqlx::query_as("SELECT * FROM chat_mcp_servers WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Deletes MCP server `id`; false when unknown.
pub async fn delete_mcp_server(pool: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query("DELETE FROM chat_mcp_servers WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(result.rows_affected() > 0)
}
