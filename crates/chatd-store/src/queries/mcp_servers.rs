//! SQL of the `chat_mcp_servers` table: the MCP servers chats may use
//! (API.md "Admin routes"). Slugs are unique; a taken slug is PostgreSQL's
//! unique violation (`23505`).
//!
//! `args`, `env` and `headers` are JSON columns of strings. The admin routes
//! and the config file only ever write strings; a row written by hand with
//! other JSON values is read with each value as its JSON text (`3` becomes
//! `"3"`) rather than failing, since a server process takes strings anyway.
//!
//! `env` and `headers` usually hold credentials: with a key configured each
//! non-empty map is stored sealed, as a JSON string `"enc:v1:..."` whose
//! plaintext is the map's JSON ([`crate::secrets`]). Every function takes
//! the [`Secrets`] that seal on write and open on read, so callers only
//! ever see maps.

use std::collections::BTreeMap;

use chatd_core::{McpTransport, RequireApproval};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::secrets::cipher::{self as secrets, PrepareError, Secrets};

/// A row of `chat_mcp_servers`: its definition and when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerRow {
    /// Everything [`insert`] writes.
    pub def: McpServerDef,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A row as stored: `env` and `headers` possibly sealed.
struct StoredRow {
    row: McpServerRow,
    env: Value,
    headers: Value,
}

impl StoredRow {
    /// The row with `env` and `headers` opened.
    fn open(self, secrets: &Secrets) -> sqlx::Result<McpServerRow> {
        let StoredRow {
            mut row,
            env,
            headers,
        } = self;
        let id = row.def.id;
        row.def.env = open_map(secrets, env, id, "env")?;
        row.def.headers = open_map(secrets, headers, id, "headers")?;
        Ok(row)
    }
}

/// A stored map column: a sealed JSON string opened and parsed, anything
/// else read as [`string_map`] reads it.
fn open_map(
    secrets: &Secrets,
    stored: Value,
    id: Uuid,
    column: &str,
) -> sqlx::Result<BTreeMap<String, String>> {
    try_open_map(secrets, stored, id, column).map_err(|e| secrets::decode_error(column, e))
}

/// [`open_map`] with the secret error as it is.
fn try_open_map(
    secrets: &Secrets,
    stored: Value,
    id: Uuid,
    column: &str,
) -> Result<BTreeMap<String, String>, secrets::SecretError> {
    match stored {
        Value::String(text) if secrets::is_sealed(&text) => {
            let place = secrets::place("chat_mcp_servers", column, id);
            let plain = secrets.open(&text, &place)?;
            // The value was authenticated, so it is the JSON written here.
            let value: Value =
                serde_json::from_str(&plain).map_err(|_| secrets::SecretError::WrongKey(place))?;
            Ok(string_map(&value))
        }
        other => Ok(string_map(&other)),
    }
}

/// A map as stored: `{}` when empty, sealed when a key is configured, the
/// JSON object otherwise.
fn seal_map(secrets: &Secrets, map: &BTreeMap<String, String>, id: Uuid, column: &str) -> Value {
    if map.is_empty() || !secrets.is_enabled() {
        return serde_json::to_value(map).unwrap_or_default();
    }
    let json = serde_json::to_string(map).unwrap_or_default();
    Value::String(secrets.seal(&json, &secrets::place("chat_mcp_servers", column, id)))
}

/// A row of `chat_mcp_servers` as sqlx's compile-checked macros read it;
/// [`McpRecord::stored`] makes the [`StoredRow`].
struct McpRecord {
    id: Uuid,
    slug: String,
    display_name: String,
    transport: String,
    command: Option<String>,
    args: Value,
    env: Value,
    url: Option<String>,
    headers: Value,
    enabled: bool,
    require_approval: Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl McpRecord {
    /// The stored row; an unknown `transport` is a `ColumnDecode` error.
    fn stored(self) -> sqlx::Result<StoredRow> {
        let def = McpServerDef {
            id: self.id,
            slug: self.slug,
            display_name: self.display_name,
            transport: self
                .transport
                .parse()
                .map_err(|e| sqlx::Error::ColumnDecode {
                    index: "transport".into(),
                    source: Box::new(e),
                })?,
            command: self.command,
            args: string_list(&self.args),
            env: BTreeMap::new(),
            url: self.url,
            headers: BTreeMap::new(),
            enabled: self.enabled,
            require_approval: require_approval(Json(self.require_approval)),
        };
        Ok(StoredRow {
            row: McpServerRow {
                def,
                created_at: self.created_at,
                updated_at: self.updated_at,
            },
            env: self.env,
            headers: self.headers,
        })
    }
}

/// `sqlx::query_as!(McpRecord, ...)` of every column of `chat_mcp_servers`
/// of alias `s`, then `$rest` (`FROM ... s ...`): sqlx's macros take only
/// string literals, hence the list is written out here.
macro_rules! select_mcp_servers {
    ($rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            McpRecord,
            "SELECT s.id, s.slug, s.display_name, s.transport, s.command, s.args, s.env, s.url,
                    s.headers, s.enabled, s.require_approval, s.created_at, s.updated_at "
                + $rest
            $(, $arg)*
        )
    };
}

/// Runs `$head` (an `INSERT` or `UPDATE` ending in `RETURNING `) with
/// `$def`'s columns as `$1`..`$11` (`env` and `headers` sealed) and
/// evaluates to the [`StoredRow`] it returns (`?` on errors): one
/// compile-checked statement per caller.
macro_rules! write_stored {
    ($head:tt, $conn:expr, $secrets:expr, $def:expr) => {{
        let def: &McpServerDef = $def;
        let secrets: &Secrets = $secrets;
        sqlx::query_as!(
            McpRecord,
            $head
                + "id, slug, display_name, transport, command, args, env, url, headers, enabled,
                   require_approval, created_at, updated_at",
            def.id,
            &def.slug,
            &def.display_name,
            def.transport.as_str(),
            def.command.as_deref(),
            // `as _`: sqlx checks a jsonb argument against `serde_json::Value`.
            Json(&def.args) as _,
            Json(seal_map(secrets, &def.env, def.id, "env")) as _,
            def.url.as_deref(),
            Json(seal_map(secrets, &def.headers, def.id, "headers")) as _,
            def.enabled,
            Json(&def.require_approval) as _,
        )
        .fetch_one($conn)
        .await?
        .stored()?
    }};
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
pub fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().map(string_of).collect())
        .unwrap_or_default()
}

/// The entries of a JSON object with their values as strings (see the
/// module docs); empty for anything but an object.
pub fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), string_of(v))).collect())
        .unwrap_or_default()
}

/// A complete MCP server definition: what [`insert`] writes.
///
/// Example: [`insert`]. `Debug` prints the names of `env` and `headers`
/// entries, never their values.
#[derive(Clone, PartialEq, Eq)]
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

impl std::fmt::Debug for McpServerDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerDef")
            .field("id", &self.id)
            .field("slug", &self.slug)
            .field("display_name", &self.display_name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &redacted_map(&self.env))
            .field(
                "url",
                &self.url.as_deref().map(super::providers::redact_url),
            )
            .field("headers", &redacted_map(&self.headers))
            .field("enabled", &self.enabled)
            .field("require_approval", &self.require_approval)
            .finish()
    }
}

/// `map` with every value replaced by `<redacted>`, for `Debug`.
fn redacted_map(map: &BTreeMap<String, String>) -> BTreeMap<&str, &'static str> {
    map.keys().map(|k| (k.as_str(), "<redacted>")).collect()
}

/// Every MCP server, by slug.
pub async fn list(conn: impl PgExecutor<'_>, secrets: &Secrets) -> sqlx::Result<Vec<McpServerRow>> {
    let rows = select_mcp_servers!("FROM chat_mcp_servers s ORDER BY s.slug")
        .fetch_all(conn)
        .await?;
    rows.into_iter()
        .map(|r| r.stored()?.open(secrets))
        .collect()
}

/// The ids among `ids` that are MCP servers.
pub async fn existing_ids(conn: impl PgExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar!("SELECT id FROM chat_mcp_servers WHERE id = ANY($1)", ids)
        .fetch_all(conn)
        .await
}

/// The enabled MCP servers among `ids` (a chat's `mcp_server_ids`), in the
/// order of `ids`.
pub async fn enabled_in_order(
    conn: impl PgExecutor<'_>,
    secrets: &Secrets,
    ids: &[Uuid],
) -> sqlx::Result<Vec<McpServerRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = select_mcp_servers!(
        "FROM unnest($1::uuid[]) WITH ORDINALITY AS wanted(id, n)
         JOIN chat_mcp_servers s ON s.id = wanted.id
         WHERE s.enabled
         ORDER BY wanted.n",
        ids,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| r.stored()?.open(secrets))
        .collect()
}

/// One MCP server, locked `FOR UPDATE` until `conn`'s transaction ends.
pub async fn select_for_update(
    conn: &mut PgConnection,
    secrets: &Secrets,
    id: Uuid,
) -> sqlx::Result<Option<McpServerRow>> {
    let row = select_mcp_servers!("FROM chat_mcp_servers s WHERE s.id = $1 FOR UPDATE", id)
        .fetch_optional(conn)
        .await?;
    row.map(|r| r.stored()?.open(secrets)).transpose()
}

/// Inserts MCP server `def` (a taken slug is `23505`).
pub async fn insert(
    conn: impl PgExecutor<'_>,
    secrets: &Secrets,
    def: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    write_stored!(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled, require_approval)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING ",
        conn,
        secrets,
        def
    )
    .open(secrets)
}

/// Inserts MCP server `def`, or overwrites the one with the same slug (its
/// id is kept); the config file's write. The secrets are sealed for the id
/// the row ends up with: the existing row's, read (and locked) first.
pub async fn upsert_by_slug(
    conn: &mut PgConnection,
    secrets: &Secrets,
    def: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    let existing: Option<Uuid> = sqlx::query_scalar!(
        "SELECT id FROM chat_mcp_servers WHERE slug = $1 FOR UPDATE",
        &def.slug,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let def = McpServerDef {
        id: existing.unwrap_or(def.id),
        ..def.clone()
    };
    let stored = write_stored!(
        "INSERT INTO chat_mcp_servers (id, slug, display_name, transport, command, args, env, url, headers, enabled, require_approval)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (slug) DO UPDATE SET display_name = EXCLUDED.display_name,
             transport = EXCLUDED.transport, command = EXCLUDED.command, args = EXCLUDED.args,
             env = EXCLUDED.env, url = EXCLUDED.url, headers = EXCLUDED.headers,
             enabled = EXCLUDED.enabled, require_approval = EXCLUDED.require_approval,
             updated_at = now()
         RETURNING ",
        &mut *conn,
        secrets,
        &def
    );
    let id = stored.row.def.id;
    if id != def.id {
        // Another writer inserted the slug after the read above: the row
        // kept its id, so the secrets are sealed again for it.
        sqlx::query!(
            "UPDATE chat_mcp_servers SET env = $2, headers = $3 WHERE id = $1",
            id,
            seal_map(secrets, &def.env, id, "env"),
            seal_map(secrets, &def.headers, id, "headers"),
        )
        .execute(&mut *conn)
        .await?;
        let mut row = stored.row;
        row.def.env = def.env.clone();
        row.def.headers = def.headers.clone();
        return Ok(row);
    }
    stored.open(secrets)
}

/// Overwrites MCP server `def.id` (a taken slug is `23505`).
pub async fn update(
    conn: impl PgExecutor<'_>,
    secrets: &Secrets,
    def: &McpServerDef,
) -> sqlx::Result<McpServerRow> {
    write_stored!(
        "UPDATE chat_mcp_servers SET slug = $2, display_name = $3, transport = $4, command = $5,
             args = $6, env = $7, url = $8, headers = $9, enabled = $10, require_approval = $11,
             updated_at = now()
         WHERE id = $1 RETURNING ",
        conn,
        secrets,
        def
    )
    .open(secrets)
}

/// Deletes MCP server `id`; false when unknown.
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query!("DELETE FROM chat_mcp_servers WHERE id = $1", id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

/// Startup migration ([`crate::secrets::prepare`]): locks every MCP server
/// (`FOR UPDATE`, until `conn`'s transaction ends), checks that each sealed
/// `env` and `headers` opens, and with a key seals each plain, non-empty one
/// in place (`updated_at` is left alone). Returns how many rows changed.
pub(crate) async fn seal_plain_secrets(
    conn: &mut PgConnection,
    secrets: &Secrets,
) -> Result<usize, PrepareError> {
    let rows = sqlx::query!("SELECT id, env, headers FROM chat_mcp_servers ORDER BY id FOR UPDATE")
        .fetch_all(&mut *conn)
        .await?;
    let mut sealed = 0;
    for (id, env, headers) in rows.into_iter().map(|r| (r.id, r.env, r.headers)) {
        let plain = |v: &Value| !matches!(v, Value::String(s) if secrets::is_sealed(s));
        let needs_seal = secrets.is_enabled()
            && [&env, &headers]
                .iter()
                .any(|v| plain(v) && !string_map(v).is_empty());
        let env = try_open_map(secrets, env, id, "env")?;
        let headers = try_open_map(secrets, headers, id, "headers")?;
        if needs_seal {
            sqlx::query!(
                "UPDATE chat_mcp_servers SET env = $2, headers = $3 WHERE id = $1",
                id,
                seal_map(secrets, &env, id, "env"),
                seal_map(secrets, &headers, id, "headers"),
            )
            .execute(&mut *conn)
            .await?;
            sealed += 1;
        }
    }
    Ok(sealed)
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

    #[test]
    fn debug_prints_entry_names_but_no_secret_values() {
        let def = McpServerDef {
            id: Uuid::nil(),
            slug: "web".into(),
            display_name: String::new(),
            transport: McpTransport::StreamableHttp,
            command: None,
            args: Vec::new(),
            env: BTreeMap::from([("API_TOKEN".into(), "env-secret-1".into())]),
            url: Some("https://u:url-pass@mcp.example/mcp?key=url-key".into()),
            headers: BTreeMap::from([("Authorization".into(), "Bearer header-secret".into())]),
            enabled: true,
            require_approval: RequireApproval::Never,
        };
        let row = McpServerRow {
            def: def.clone(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        for text in [format!("{def:?}"), format!("{row:#?}")] {
            for secret in ["env-secret-1", "header-secret", "url-pass", "url-key"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert!(
                text.contains("API_TOKEN") && text.contains("Authorization"),
                "{text}"
            );
            assert!(text.contains("https://mcp.example/mcp"), "{text}");
        }
    }
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    use crate::queries::mcp_servers::McpServerDef;
    use chatd_core::McpTransport;
    use std::collections::BTreeMap;

    /// The server every example starts from: `files`, over stdio, enabled,
    /// with one argument pair and one environment variable.
    fn files_server() -> McpServerDef {
        McpServerDef {
            id: uuid::Uuid::new_v4(),
            slug: "files".into(),
            display_name: "Files".into(),
            transport: McpTransport::Stdio,
            command: Some("mcp-files".into()),
            args: vec!["--root".into(), "/srv".into()],
            env: BTreeMap::from([("LOG".into(), "info".into())]),
            url: None,
            headers: BTreeMap::new(),
            enabled: true,
            require_approval: chatd_core::RequireApproval::Never,
        }
    }

    #[test]
    fn string_list_the_items_of_a_json_array_as_strings_see_the_module_docs() {
        use crate::queries::mcp_servers::string_list;
        use serde_json::json;
        assert_eq!(
            string_list(&json!(["--root", "/tmp", 1])),
            vec!["--root", "/tmp", "1"]
        );
        assert!(string_list(&json!({"not": "an array"})).is_empty());
    }

    #[test]
    fn string_map_the_entries_of_a_json_object_with_their_values_as_strings_see() {
        use crate::queries::mcp_servers::string_map;
        use serde_json::json;
        use std::collections::BTreeMap;
        let env = string_map(&json!({"TOKEN": "x", "N": 3}));
        assert_eq!(
            env,
            BTreeMap::from([("N".into(), "3".into()), ("TOKEN".into(), "x".into())])
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_every_mcp_server_by_slug() -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        assert_eq!(mcp_servers::list(pool, &Secrets::none()).await?, vec![row]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn existing_ids_the_ids_among_ids_that_are_mcp_servers() -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        let unknown = uuid::Uuid::new_v4();
        assert_eq!(
            mcp_servers::existing_ids(pool, &[unknown, def.id]).await?,
            vec![def.id]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn enabled_in_order_the_enabled_mcp_servers_among_ids_a_chat_s_mcp_server()
    -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        let web = McpServerDef {
            id: uuid::Uuid::new_v4(),
            slug: "web".into(),
            transport: McpTransport::StreamableHttp,
            command: None,
            url: Some("http://127.0.0.1:9000/mcp".into()),
            ..def.clone()
        };
        mcp_servers::insert(pool, &Secrets::none(), &web).await?;
        let rows = mcp_servers::enabled_in_order(pool, &Secrets::none(), &[web.id, def.id]).await?;
        assert_eq!(
            rows.iter().map(|r| r.def.slug.as_str()).collect::<Vec<_>>(),
            ["web", "files"]
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_for_update_one_mcp_server_locked_for_update_until_conn_s() -> anyhow::Result<()>
    {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        let mut tx = pool.begin().await?;
        let locked = mcp_servers::select_for_update(&mut tx, &Secrets::none(), def.id).await?;
        assert_eq!(
            locked.map(|s| s.def.args),
            Some(vec!["--root".to_owned(), "/srv".to_owned()])
        );
        tx.commit().await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn inserts_mcp_server_def_a_taken_slug_is_23505() -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        assert_eq!(row.def, def);
        // The slug is taken now.
        let again = McpServerDef {
            id: uuid::Uuid::new_v4(),
            ..def.clone()
        };
        let err = mcp_servers::insert(pool, &Secrets::none(), &again)
            .await
            .unwrap_err();
        let code = err
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("23505"));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_by_slug_inserts_mcp_server_def_or_overwrites_the_one_with_the()
    -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        // Same slug, another id: the existing row is overwritten and keeps its id.
        let from_file = McpServerDef {
            id: uuid::Uuid::new_v4(),
            args: vec![],
            ..def.clone()
        };
        let written =
            mcp_servers::upsert_by_slug(&mut *pool.acquire().await?, &Secrets::none(), &from_file)
                .await?;
        assert_eq!((written.def.id, written.def.args.len()), (def.id, 0));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn update_overwrites_mcp_server_def_id_a_taken_slug_is_23505() -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        let disabled = McpServerDef {
            enabled: false,
            ..def.clone()
        };
        assert!(
            !mcp_servers::update(pool, &Secrets::none(), &disabled)
                .await?
                .def
                .enabled
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deletes_mcp_server_id() -> anyhow::Result<()> {
        use crate::queries::mcp_servers::{self, McpServerDef};
        use crate::secrets::Secrets;
        use chatd_core::{McpTransport, RequireApproval};
        use std::collections::BTreeMap;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = files_server();
        let row = mcp_servers::insert(pool, &Secrets::none(), &def).await?;
        assert!(mcp_servers::delete(pool, def.id).await?);
        assert!(!mcp_servers::delete(pool, def.id).await?);
        Ok(())
    }
}
