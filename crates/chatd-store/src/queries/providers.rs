//! SQL of the `chat_providers` table: the LLM providers admins configure
//! (API.md "Admin routes"). Deleting a provider deletes its model configs
//! (`ON DELETE CASCADE`).
//!
//! `api_key` is sealed on write and opened on read with the [`Secrets`]
//! every function takes ([`crate::secrets`]): callers see plaintext, the
//! column holds `enc:v1:...` when a key is configured.

use chatd_core::ProviderKind;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::secrets::cipher::{self as secrets, Secrets};

/// A row of `chat_providers`: its definition and when it was written.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProviderRow {
    /// Everything [`upsert`] writes.
    #[sqlx(flatten)]
    pub def: ProviderDef,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A complete provider definition: what [`upsert`] writes.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProviderDef {
    /// Id.
    pub id: Uuid,
    /// The wire protocol it speaks.
    #[sqlx(try_from = "String")]
    pub provider: ProviderKind,
    /// Display name (may be empty; used in errors).
    pub display_name: String,
    /// Base URL including the version prefix (`https://api.openai.com/v1`);
    /// `None` for the kind's default.
    pub base_url: Option<String>,
    /// API key (never sent to clients).
    pub api_key: Option<String>,
    /// Whether its model configs may be used.
    pub enabled: bool,
}

/// Prints `api_key` as `Some("<redacted>")`: a key never reaches a log.
impl std::fmt::Debug for ProviderDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderDef")
            .field("id", &self.id)
            .field("provider", &self.provider)
            .field("display_name", &self.display_name)
            .field("base_url", &self.base_url.as_deref().map(redact_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// `url` without user info (`user:password@`), query or fragment, where
/// keys often live; a text that does not parse as a URL is cut at the first
/// `?` or `#`, and cut after its last `@` when it has one. What members see
/// of a provider's `base_url` (API.md "Limits, budgets and the token
/// lifecycle"), and what `Debug` prints.
pub fn redact_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..cut];
    // `scheme://[userinfo@]host...`: user info ends at the last `@` before
    // the path.
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}{host}{path}")
}

/// A [`ProviderRow`] as sqlx's compile-checked macros read it (`provider`
/// as its text); [`opened`] makes the row.
struct ProviderRecord {
    id: Uuid,
    provider: String,
    display_name: String,
    base_url: Option<String>,
    api_key: Option<String>,
    enabled: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl ProviderRecord {
    /// The row, its `api_key` still sealed; an unknown `provider` is the
    /// `ColumnDecode` error that `FromRow` gave.
    fn into_row(self) -> sqlx::Result<ProviderRow> {
        Ok(ProviderRow {
            def: ProviderDef {
                id: self.id,
                provider: ProviderKind::try_from(self.provider).map_err(|e| {
                    sqlx::Error::ColumnDecode {
                        index: "provider".into(),
                        source: Box::new(e),
                    }
                })?,
                display_name: self.display_name,
                base_url: self.base_url,
                api_key: self.api_key,
                enabled: self.enabled,
            },
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// `sqlx::query_as!(ProviderRecord, ...)` of every column of
/// `chat_providers`, then `$rest` (`FROM`, `WHERE`, ...): sqlx's macros
/// take only string literals, hence the list is written out here.
macro_rules! select_providers {
    ($rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            ProviderRecord,
            "SELECT id, provider, display_name, base_url, api_key, enabled, created_at, updated_at "
                + $rest
            $(, $arg)*
        )
    };
}

/// [`opened`] of a record just read.
fn opened_record(record: ProviderRecord, secrets: &Secrets) -> sqlx::Result<ProviderRow> {
    opened(record.into_row()?, secrets)
}

/// Opens the sealed `api_key` of a row just read.
fn opened(mut row: ProviderRow, secrets: &Secrets) -> sqlx::Result<ProviderRow> {
    if let Some(stored) = row.def.api_key.take() {
        let place = secrets::place("chat_providers", "api_key", row.def.id);
        row.def.api_key = Some(
            secrets
                .open(&stored, &place)
                .map_err(|e| secrets::decode_error("api_key", e))?,
        );
    }
    Ok(row)
}

/// Every provider, oldest first.
pub async fn list(conn: impl PgExecutor<'_>, secrets: &Secrets) -> sqlx::Result<Vec<ProviderRow>> {
    let rows = select_providers!("FROM chat_providers ORDER BY created_at, id")
        .fetch_all(conn)
        .await?;
    rows.into_iter()
        .map(|row| opened_record(row, secrets))
        .collect()
}

/// One provider.
pub async fn select(
    conn: impl PgExecutor<'_>,
    secrets: &Secrets,
    id: Uuid,
) -> sqlx::Result<Option<ProviderRow>> {
    let row = select_providers!("FROM chat_providers WHERE id = $1", id)
        .fetch_optional(conn)
        .await?;
    row.map(|row| opened_record(row, secrets)).transpose()
}

/// One provider, locked `FOR UPDATE` until `conn`'s transaction ends.
pub async fn select_for_update(
    conn: &mut PgConnection,
    secrets: &Secrets,
    id: Uuid,
) -> sqlx::Result<Option<ProviderRow>> {
    let row = select_providers!("FROM chat_providers WHERE id = $1 FOR UPDATE", id)
        .fetch_optional(conn)
        .await?;
    row.map(|row| opened_record(row, secrets)).transpose()
}

/// Whether provider `id` exists.
pub async fn exists(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chat_providers WHERE id = $1) AS "exists!""#,
        id
    )
    .fetch_one(conn)
    .await
}

/// Inserts provider `def`, or (same id) overwrites it; returns the row.
pub async fn upsert(
    conn: impl PgExecutor<'_>,
    secrets: &Secrets,
    def: &ProviderDef,
) -> sqlx::Result<ProviderRow> {
    let place = secrets::place("chat_providers", "api_key", def.id);
    let api_key = def.api_key.as_deref().map(|k| secrets.seal(k, &place));
    let row = sqlx::query_as!(
        ProviderRecord,
        "INSERT INTO chat_providers (id, provider, display_name, base_url, api_key, enabled)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider,
             display_name = EXCLUDED.display_name, base_url = EXCLUDED.base_url,
             api_key = EXCLUDED.api_key, enabled = EXCLUDED.enabled, updated_at = now()
         RETURNING id, provider, display_name, base_url, api_key, enabled, created_at, updated_at",
        def.id,
        def.provider.as_str(),
        &def.display_name,
        def.base_url.as_deref(),
        api_key,
        def.enabled,
    )
    .fetch_one(conn)
    .await?;
    opened_record(row, secrets)
}

/// Deletes provider `id` (its model configs cascade); false when unknown.
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query!("DELETE FROM chat_providers WHERE id = $1", id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

/// Startup migration ([`crate::secrets::prepare`]): locks every provider
/// holding an API key (`FOR UPDATE`, until `conn`'s transaction ends),
/// checks that each sealed key opens, and with a key seals each plain one in
/// place (`updated_at` is left alone). Returns how many were sealed.
pub(crate) async fn seal_plain_api_keys(
    conn: &mut PgConnection,
    secrets: &Secrets,
) -> Result<usize, secrets::PrepareError> {
    let rows = sqlx::query!(
        r#"SELECT id, api_key AS "api_key!" FROM chat_providers
           WHERE api_key IS NOT NULL ORDER BY id FOR UPDATE"#,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut sealed = 0;
    for (id, stored) in rows.into_iter().map(|r| (r.id, r.api_key)) {
        let place = secrets::place("chat_providers", "api_key", id);
        if secrets::is_sealed(&stored) {
            secrets.open(&stored, &place)?;
        } else if secrets.is_enabled() {
            sqlx::query!(
                "UPDATE chat_providers SET api_key = $2 WHERE id = $1",
                id,
                secrets.seal(&stored, &place),
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

    #[test]
    fn debug_prints_no_key_and_no_url_credentials() {
        let def = ProviderDef {
            id: Uuid::nil(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("https://user:url-pass@llm.example/v1?key=url-key".into()),
            api_key: Some("sk-debug-secret".into()),
            enabled: true,
        };
        let row = ProviderRow {
            def: def.clone(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        for text in [format!("{def:?}"), format!("{row:#?}")] {
            for secret in ["sk-debug-secret", "url-pass", "url-key", "user"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert!(text.contains("https://llm.example/v1"), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        // No key prints as none.
        let keyless = ProviderDef {
            api_key: None,
            ..def
        };
        assert!(format!("{keyless:?}").contains("api_key: None"));
    }

    #[test]
    fn redacted_urls_keep_scheme_host_port_and_path_only() {
        for (url, shown) in [
            (
                "https://user:pass@llm.example/v1?key=sk#f",
                "https://llm.example/v1",
            ),
            (
                "https://tok@llm.example:8443/v1/",
                "https://llm.example:8443/v1/",
            ),
            ("http://127.0.0.1:8081/v1", "http://127.0.0.1:8081/v1"),
            ("http://[::1]:80/v1?x=1", "http://[::1]:80/v1"),
            ("https://a@b@host/p@q", "https://host/p@q"),
            ("https://host?key=1", "https://host"),
            ("not a url?key=1", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[test]
    fn redact_url_url_without_user_info_user_password_query_or_fragment_where() {
        use crate::queries::providers::redact_url;
        assert_eq!(
            redact_url("https://user:pass@llm.example/v1?key=sk-1#frag"),
            "https://llm.example/v1"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:8081/v1"),
            "http://127.0.0.1:8081/v1"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_every_provider_oldest_first() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        assert_eq!(providers::list(pool, &Secrets::none()).await?, vec![row]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_one_provider() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        assert_eq!(
            providers::select(pool, &Secrets::none(), def.id).await?,
            Some(row)
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_for_update_one_provider_locked_for_update_until_conn_s() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        let mut tx = pool.begin().await?;
        let locked = providers::select_for_update(&mut tx, &Secrets::none(), def.id).await?;
        assert_eq!(
            locked.map(|p| p.def.provider),
            Some(ProviderKind::OpenaiCompat)
        );
        tx.commit().await?;
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn exists_whether_provider_id_exists() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        assert!(providers::exists(pool, def.id).await?);
        assert!(!providers::exists(pool, uuid::Uuid::new_v4()).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_inserts_provider_def_or_same_id_overwrites_it() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        assert_eq!(row.def, def);
        // The same id again overwrites.
        let llama = ProviderDef {
            display_name: "llama".into(),
            ..def.clone()
        };
        let renamed = providers::upsert(pool, &Secrets::none(), &llama).await?;
        assert_eq!(
            (renamed.def.id, renamed.def.display_name.as_str()),
            (def.id, "llama")
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deletes_provider_id_its_model_configs_cascade() -> anyhow::Result<()> {
        use crate::queries::providers::{self, ProviderDef};
        use crate::secrets::Secrets;
        use chatd_core::ProviderKind;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let def = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::OpenaiCompat,
            display_name: "Local".into(),
            base_url: Some("http://127.0.0.1:8081/v1".into()),
            api_key: None,
            enabled: true,
        };
        let row = providers::upsert(pool, &Secrets::none(), &def).await?;
        assert!(providers::delete(pool, def.id).await?);
        assert!(!providers::delete(pool, def.id).await?);
        Ok(())
    }
}
