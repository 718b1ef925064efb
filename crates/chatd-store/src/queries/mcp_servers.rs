//! SQL of the `chat_mcp_servers` table: the MCP servers chats may use
//! (API.md "Admin routes"). Slugs are unique; a taken slug is PostgreSQL's
//! unique violation (`23505`).
//!
//! `args`, `env` and `headers` are JSON columns of strings. The admin routes
//! and the config file only ever write strings; a row written by hand with
//! other JSON values is read with each value as its JSON text (`3` becomes
//! `"3"`) rather than failing, since a server process takes strings anyway.

use std::collections::BTreeMap;

use chatd_core::{McpTransport, RequireApproval};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Row};
use uuid::Uuid;

/// A row of `chat_mcp_servers`: its definition and when it was written.
///
/// Example: [`insert`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerRow {
    /// Everything [`insert`] writes.
    pub def: McpServerDef,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl<'r> FromRow<'r, PgRow> for McpServerRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        let transport: String = row.try_get("transport")?;
        let Json(args): Json<Value> = row.try_get("args")?;
        let Json(env): Json<Value> = row.try_get("env")?;
        let Json(headers): Json<Value> = row.try_get("headers")?;
        let def = McpServerDef {
            id: row.try_get("id")?,
            slug: row.try_get("slug")?,
            display_name: row.try_get("display_name")?,
            transport: transport.parse().map_err(|e| sqlx::Error::ColumnDecode {
                index: "transport".into(),
                source: Box::new(e),
            })?,
            command: row.try_get("command")?,
            args: string_list(&args),
            env: string_map(&env),
            url: row.try_get("url")?,
            headers: string_map(&headers),
            enabled: row.try_get("enabled")?,
            require_approval: require_approval(row.try_get("require_approval")?),
        };
        Ok(McpServerRow {
            def,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

/// The stored `require_approval`; a value written by hand that is not one
/// (a list with non-strings) needs approval for every call rather than
/// failing open.
fn require_approval(Json(value): Json<Value>) -> RequireApproval {
    serde_json::from_value(value).unwrap_or(RequireApproval::Always)
}

/// A JSON value as a string: a string as it is, anything else as its JSON
/// text.
fn string_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The items of a JSON array as strings (see the module docs); empty for
/// anything but an array.
///
/// # Example
///
/// ```
/// use chatd_store::queries::mcp_servers::string_list;
/// use serde_json::json;
/// assert_eq!(string_list(&json!(["--root", "/tmp", 1])), vec!["--root", "/tmp", "1"]);
/// assert!(string_list(&json!({"not": "an array"})).is_empty());
/// ```
pub fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().map(string_of).collect())
        .unwrap_or_default()
}

/// The entries of a JSON object with their values as strings (see the
/// module docs); empty for anything but an object.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_store::queries::mcp_servers::string_map;
/// use serde_json::json;
/// let env = string_map(&json!({"TOKEN": "x", "N": 3}));
/// assert_eq!(env, BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())]));
/// ```
pub fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), string_of(v))).collect())
        .unwrap_or_default()
}

/// A complete MCP server definition: what [`insert`] writes.
///
/// Example: [`insert`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerDef {
    /// Id.
    pub id: Uuid,
    /// Unique slug; its tools are offered to the model as `<slug>__<tool>`.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Transport.
    pub transport: McpTransport,
    /// Program (stdio).
    pub command: Option<String>,
    /// Arguments (stdio).
    pub args: Vec<String>,
    /// Environment (stdio).
    pub env: BTreeMap<String, String>,
    /// Endpoint (streamable HTTP).
    pub url: Option<String>,
    /// HTTP headers (streamable HTTP).
    pub headers: BTreeMap<String, String>,
    /// Whether chats may use it.
    pub enabled: bool,
    /// Which of its tools need approval (API.md "Tool approval (human in
    /// the loop)"; default [`RequireApproval::Never`]).
    pub require_approval: RequireApproval,
}

/// Every MCP server, by slug.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// assert_eq!(mcp_servers::list(pool).await?, vec![row]);
/// # Ok(()) }
/// ```
pub async fn list(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<McpServerRow>> {
    sqlx::query_as("SELECT * FROM chat_mcp_servers ORDER BY slug")
        .fetch_all(conn)
        .await
}

/// The ids among `ids` that are MCP servers.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// let unknown = uuid::Uuid::new_v4();
/// assert_eq!(mcp_servers::existing_ids(pool, &[unknown, def.id]).await?, vec![def.id]);
/// # Ok(()) }
/// ```
pub async fn existing_ids(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT id FROM chat_mcp_servers WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}

/// The enabled MCP servers among `ids` (a chat's `mcp_server_ids`), in the
/// order of `ids`.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// let web = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "web".into(),
///     transport: McpTransport::StreamableHttp,
///     command: None,
///     url: Some("http://127.0.0.1:9000/mcp".into()),
///     ..def.clone()
/// };
/// mcp_servers::insert(pool, &web).await?;
/// let rows = mcp_servers::enabled_in_order(pool, &[web.id, def.id]).await?;
/// assert_eq!(rows.iter().map(|r| r.def.slug.as_str()).collect::<Vec<_>>(), ["web", "files"]);
/// # Ok(()) }
/// ```
pub async fn enabled_in_order(
    conn: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> sqlx::Result<Vec<McpServerRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = "SELECT s.* FROM unnest($1::uuid[]) WITH ORDINALITY AS wanted(id, n)
         JOIN chat_mcp_servers s ON s.id = wanted.id
         WHERE s.enabled
         ORDER BY wanted.n";
    sqlx::query_as(sql).bind(ids).fetch_all(conn).await
}

/// One MCP server, locked `FOR UPDATE` until `conn`'s transaction ends.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// let mut tx = pool.begin().await?;
/// let locked = mcp_servers::select_for_update(&mut tx, def.id).await?;
/// assert_eq!(locked.map(|s| s.def.args), Some(vec!["--root".to_owned(), "/srv".to_owned()]));
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub async fn select_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<McpServerRow>> {
    let sql = "SELECT * FROM chat_mcp_servers WHERE id = $1 FOR UPDATE";
    super::keyed::optional(conn, sql, id).await
}

/// Inserts MCP server `def` (a taken slug is `23505`).
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// assert_eq!(row.def, def);
/// // The slug is taken now.
/// let again = McpServerDef { id: uuid::Uuid::new_v4(), ..def.clone() };
/// let err = mcp_servers::insert(pool, &again).await.unwrap_err();
/// let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
/// assert_eq!(code.as_deref(), Some("23505"));
/// # Ok(()) }
/// ```
pub async fn insert(conn: impl PgExecutor<'_>, def: &McpServerDef) -> sqlx::Result<McpServerRow> {
    write(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled, require_approval)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *",
        conn,
        def,
    )
    .await
}

/// Inserts MCP server `def`, or overwrites the one with the same slug (its
/// id is kept); the config file's write.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// // Same slug, another id: the existing row is overwritten and keeps its id.
/// let from_file = McpServerDef { id: uuid::Uuid::new_v4(), args: vec![], ..def.clone() };
/// let written = mcp_servers::upsert_by_slug(pool, &from_file).await?;
/// assert_eq!((written.def.id, written.def.args.len()), (def.id, 0));
/// # Ok(()) }
/// ```
pub async fn upsert_by_slug(
    conn: impl PgExecutor<'_>,
    def: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    write(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled, require_approval)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (slug) DO UPDATE SET display_name = EXCLUDED.display_name,
             transport = EXCLUDED.transport, command = EXCLUDED.command, args = EXCLUDED.args,
             env = EXCLUDED.env, url = EXCLUDED.url, headers = EXCLUDED.headers,
             enabled = EXCLUDED.enabled, require_approval = EXCLUDED.require_approval,
             updated_at = now()
         RETURNING *",
        conn,
        def,
    )
    .await
}

/// Overwrites MCP server `def.id` (a taken slug is `23505`).
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// let disabled = McpServerDef { enabled: false, ..def.clone() };
/// assert!(!mcp_servers::update(pool, &disabled).await?.def.enabled);
/// # Ok(()) }
/// ```
pub async fn update(conn: impl PgExecutor<'_>, def: &McpServerDef) -> sqlx::Result<McpServerRow> {
    write(
        "UPDATE chat_mcp_servers SET slug = $2, display_name = $3, transport = $4, command = $5,
             args = $6, env = $7, url = $8, headers = $9, enabled = $10, require_approval = $11,
             updated_at = now()
         WHERE id = $1 RETURNING *",
        conn,
        def,
    )
    .await
}

async fn write(
    sql: &'static str,
    conn: impl PgExecutor<'_>,
    def: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    sqlx::query_as(sql)
        .bind(def.id)
        .bind(&def.slug)
        .bind(&def.display_name)
        .bind(def.transport.as_str())
        .bind(&def.command)
        .bind(Json(&def.args))
        .bind(Json(&def.env))
        .bind(&def.url)
        .bind(Json(&def.headers))
        .bind(def.enabled)
        .bind(Json(&def.require_approval))
        .fetch_one(conn)
        .await
}

/// Deletes MCP server `id`; false when unknown.
///
/// # Example
///
/// ```
/// use std::collections::BTreeMap;
/// use chatd_core::{McpTransport, RequireApproval};
/// use chatd_store::queries::mcp_servers::{self, McpServerDef};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let def = McpServerDef {
///     id: uuid::Uuid::new_v4(),
///     slug: "files".into(),
///     display_name: "Files".into(),
///     transport: McpTransport::Stdio,
///     command: Some("mcp-files".into()),
///     args: vec!["--root".into(), "/srv".into()],
///     env: BTreeMap::from([("LOG".into(), "info".into())]),
///     url: None,
///     headers: BTreeMap::new(),
///     enabled: true,
///     require_approval: chatd_core::RequireApproval::Never,
/// };
/// let row = mcp_servers::insert(pool, &def).await?;
/// assert!(mcp_servers::delete(pool, def.id).await?);
/// assert!(!mcp_servers::delete(pool, def.id).await?);
/// # Ok(()) }
/// ```
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query("DELETE FROM chat_mcp_servers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_string_values_are_read_as_their_json_text() {
        assert_eq!(
            string_map(&json!({"TOKEN": "x", "N": 3})),
            BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())])
        );
        assert_eq!(
            string_list(&json!(["--root", "/tmp", 1])),
            vec!["--root", "/tmp", "1"]
        );
        assert!(string_map(&json!([])).is_empty());
    }
}
