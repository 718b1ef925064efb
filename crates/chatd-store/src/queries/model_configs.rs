//! SQL of the `chat_model_configs` table: the models chats run on (API.md
//! "Admin routes"). The rule kept here: exactly one enabled default while
//! any config is enabled. Writers hold [`AdvisoryLock::ModelConfigs`] so
//! that concurrent changes cannot race on the unique default index.
//!
//! [`AdvisoryLock::ModelConfigs`]: super::locks::AdvisoryLock::ModelConfigs

use chatd_core::ModelOptions;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A row of `chat_model_configs`: its definition and when it was written.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ModelConfigRow {
    /// Everything [`upsert`] writes.
    #[sqlx(flatten)]
    pub def: ModelConfigDef,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A complete model config definition: what [`upsert`] writes.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ModelConfigDef {
    /// Id.
    pub id: Uuid,
    /// Provider.
    pub provider_id: Uuid,
    /// The provider's model name.
    pub model: String,
    /// Display name.
    pub display_name: String,
    /// Context window, in tokens (> 0).
    pub context_limit: i64,
    /// Compaction threshold, percent of the context window (0..=100).
    pub compression_threshold: i32,
    /// The enabled default.
    pub is_default: bool,
    /// Whether it may be used.
    pub enabled: bool,
    /// Options.
    #[sqlx(json)]
    pub options: ModelOptions,
}

/// A [`ModelConfigRow`] as sqlx's compile-checked macros read it.
struct ModelConfigRecord {
    id: Uuid,
    provider_id: Uuid,
    model: String,
    display_name: String,
    context_limit: i64,
    compression_threshold: i32,
    is_default: bool,
    enabled: bool,
    options: Json<ModelOptions>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ModelConfigRecord> for ModelConfigRow {
    fn from(r: ModelConfigRecord) -> Self {
        ModelConfigRow {
            def: ModelConfigDef {
                id: r.id,
                provider_id: r.provider_id,
                model: r.model,
                display_name: r.display_name,
                context_limit: r.context_limit,
                compression_threshold: r.compression_threshold,
                is_default: r.is_default,
                enabled: r.enabled,
                options: r.options.0,
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// `sqlx::query_as!(ModelConfigRecord, ...)` of every column of
/// `chat_model_configs` of alias `m`, then `$rest` (`FROM chat_model_configs
/// m ...`): sqlx's macros take only string literals, hence the list is
/// written out here.
macro_rules! select_model_configs {
    ($rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            ModelConfigRecord,
            r#"SELECT m.id, m.provider_id, m.model, m.display_name, m.context_limit,
                      m.compression_threshold, m.is_default, m.enabled,
                      m.options AS "options: Json<ModelOptions>", m.created_at, m.updated_at "#
                + $rest
            $(, $arg)*
        )
    };
}

/// Every model config (or only the enabled ones of enabled providers),
/// default first, then oldest first.
pub async fn list(
    conn: impl PgExecutor<'_>,
    only_enabled: bool,
) -> sqlx::Result<Vec<ModelConfigRow>> {
    let rows = select_model_configs!(
        "FROM chat_model_configs m JOIN chat_providers p ON p.id = m.provider_id
         WHERE NOT $1 OR (m.enabled AND p.enabled)
         ORDER BY m.is_default DESC, m.created_at, m.id",
        only_enabled,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(ModelConfigRow::from).collect())
}

/// One model config.
pub async fn select(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<ModelConfigRow>> {
    let row = select_model_configs!("FROM chat_model_configs m WHERE m.id = $1", id)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(ModelConfigRow::from))
}

/// Whether model config `id` exists and is enabled.
pub async fn is_enabled(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chat_model_configs WHERE id = $1 AND enabled) AS "exists!""#,
        id
    )
    .fetch_one(conn)
    .await
}

/// The id of the enabled default model config.
pub async fn default_id(conn: impl PgExecutor<'_>) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!("SELECT id FROM chat_model_configs WHERE is_default AND enabled LIMIT 1")
        .fetch_optional(conn)
        .await
}

/// The model config a chat's next generation uses: `last_model_config_id`
/// when that config is enabled, else the enabled default; `None` when
/// neither exists. Whether the provider is enabled is the caller's check.
pub async fn for_chat(
    conn: impl PgExecutor<'_>,
    last_model_config_id: Option<Uuid>,
) -> sqlx::Result<Option<ModelConfigRow>> {
    let row = select_model_configs!(
        "FROM chat_model_configs m
         WHERE m.enabled AND (m.id = $1 OR m.is_default)
         ORDER BY (m.id = $1) DESC NULLS LAST LIMIT 1",
        last_model_config_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(ModelConfigRow::from))
}

/// Inserts or overwrites model config `def`; when it is the default, the
/// previous default is unset first (same transaction). Hold
/// [`AdvisoryLock::ModelConfigs`](super::locks::AdvisoryLock::ModelConfigs).
pub async fn upsert(conn: &mut PgConnection, def: &ModelConfigDef) -> sqlx::Result<ModelConfigRow> {
    if def.is_default {
        sqlx::query!(
            "UPDATE chat_model_configs SET is_default = false, updated_at = now()
             WHERE is_default AND id <> $1",
            def.id,
        )
        .execute(&mut *conn)
        .await?;
    }
    let row = sqlx::query_as!(
        ModelConfigRecord,
        r#"INSERT INTO chat_model_configs (id, provider_id, model, display_name, context_limit,
             compression_threshold, is_default, enabled, options)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (id) DO UPDATE SET provider_id = EXCLUDED.provider_id, model = EXCLUDED.model,
             display_name = EXCLUDED.display_name, context_limit = EXCLUDED.context_limit,
             compression_threshold = EXCLUDED.compression_threshold,
             is_default = EXCLUDED.is_default, enabled = EXCLUDED.enabled,
             options = EXCLUDED.options, updated_at = now()
         RETURNING id, provider_id, model, display_name, context_limit, compression_threshold,
             is_default, enabled, options AS "options: Json<ModelOptions>", created_at, updated_at"#,
        def.id,
        def.provider_id,
        &def.model,
        &def.display_name,
        def.context_limit,
        def.compression_threshold,
        def.is_default,
        def.enabled,
        // `as _`: sqlx checks a jsonb argument against `serde_json::Value`.
        Json(&def.options) as _,
    )
    .fetch_one(conn)
    .await?;
    Ok(row.into())
}

/// Restores "exactly one enabled default while any config is enabled": a
/// disabled config is never the default, and without an enabled default the
/// oldest enabled config becomes it. Hold
/// [`AdvisoryLock::ModelConfigs`](super::locks::AdvisoryLock::ModelConfigs).
pub async fn ensure_default(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE chat_model_configs SET is_default = false, updated_at = now()
         WHERE is_default AND NOT enabled",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE chat_model_configs SET is_default = true, updated_at = now()
         WHERE id = (SELECT id FROM chat_model_configs WHERE enabled ORDER BY created_at, id LIMIT 1)
           AND NOT EXISTS (SELECT 1 FROM chat_model_configs WHERE is_default AND enabled)",
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes model config `id`; false when unknown. Follow with
/// [`ensure_default`].
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query!("DELETE FROM chat_model_configs WHERE id = $1", id)
        .execute(conn)
        .await?;
    Ok(result.rows_affected() > 0)
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    use crate::queries::locks::{self, AdvisoryLock};
    use crate::queries::model_configs::{self, ModelConfigDef, ModelConfigRow};
    use crate::queries::providers::{self, ProviderDef};
    use chatd_core::{ModelOptions, ProviderKind};

    /// The set-up every example shares: an enabled OpenAI provider and its
    /// default model config `gpt-4o`, upserted under the model-configs lock
    /// as the admin operations do.
    async fn seed_default(
        pool: &sqlx::PgPool,
    ) -> anyhow::Result<(ProviderDef, ModelConfigDef, ModelConfigRow)> {
        let provider = ProviderDef {
            id: uuid::Uuid::new_v4(),
            provider: ProviderKind::Openai,
            display_name: String::new(),
            base_url: None,
            api_key: Some("sk-test".into()),
            enabled: true,
        };
        providers::upsert(pool, &crate::secrets::Secrets::none(), &provider).await?;
        let def = ModelConfigDef {
            id: uuid::Uuid::new_v4(),
            provider_id: provider.id,
            model: "gpt-4o".into(),
            display_name: "GPT-4o".into(),
            context_limit: 128_000,
            compression_threshold: 70,
            is_default: true,
            enabled: true,
            options: ModelOptions {
                max_output_tokens: Some(4096),
                ..Default::default()
            },
        };
        let mut tx = pool.begin().await?;
        locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
        let row = model_configs::upsert(&mut tx, &def).await?;
        tx.commit().await?;
        Ok((provider, def, row))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn list_every_model_config_or_only_the_enabled_ones_of_enabled_providers()
    -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        assert_eq!(model_configs::list(pool, false).await?, vec![row.clone()]);
        // Only enabled configs of enabled providers when asked.
        providers::upsert(
            pool,
            &crate::secrets::Secrets::none(),
            &ProviderDef {
                enabled: false,
                ..provider
            },
        )
        .await?;
        assert!(model_configs::list(pool, true).await?.is_empty());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn select_one_model_config() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        let read = model_configs::select(pool, def.id).await?.expect("exists");
        assert_eq!(read.def.options.max_output_tokens, Some(4096));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn is_enabled_whether_model_config_id_exists_and_is_enabled() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        assert!(model_configs::is_enabled(pool, def.id).await?);
        assert!(!model_configs::is_enabled(pool, uuid::Uuid::new_v4()).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn default_id_the_id_of_the_enabled_default_model_config() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        assert_eq!(model_configs::default_id(pool).await?, Some(def.id));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn for_chat_the_model_config_a_chat_s_next_generation_uses() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        // A chat without a model config of its own gets the default.
        assert_eq!(
            model_configs::for_chat(pool, None).await?.map(|m| m.def.id),
            Some(def.id)
        );
        let unknown = Some(uuid::Uuid::new_v4());
        assert_eq!(
            model_configs::for_chat(pool, unknown)
                .await?
                .map(|m| m.def.id),
            Some(def.id)
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_inserts_or_overwrites_model_config_def() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        assert_eq!(row.def, def);
        // A second default takes over; the first one is unset.
        let other = ModelConfigDef {
            id: uuid::Uuid::new_v4(),
            model: "gpt-4o-mini".into(),
            ..def.clone()
        };
        let mut tx = pool.begin().await?;
        locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
        model_configs::upsert(&mut tx, &other).await?;
        tx.commit().await?;
        assert_eq!(model_configs::default_id(pool).await?, Some(other.id));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ensure_default_restores_exactly_one_enabled_default_while_any_config_is()
    -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        // Disabling the default (here by writing it disabled) leaves none...
        let mut tx = pool.begin().await?;
        locks::lock(&mut tx, AdvisoryLock::ModelConfigs).await?;
        let disabled = ModelConfigDef {
            enabled: false,
            ..def.clone()
        };
        model_configs::upsert(&mut tx, &disabled).await?;
        let second = ModelConfigDef {
            id: uuid::Uuid::new_v4(),
            is_default: false,
            ..def.clone()
        };
        model_configs::upsert(&mut tx, &second).await?;
        // ...and ensure_default makes the oldest enabled config the default.
        model_configs::ensure_default(&mut tx).await?;
        tx.commit().await?;
        assert_eq!(model_configs::default_id(pool).await?, Some(second.id));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deletes_model_config_id() -> anyhow::Result<()> {
        use crate::queries::locks::{self, AdvisoryLock};
        use crate::queries::model_configs::{self, ModelConfigDef};
        use crate::queries::providers::{self, ProviderDef};
        use chatd_core::{ModelOptions, ProviderKind};
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let (provider, def, row) = seed_default(pool).await?;
        assert!(model_configs::delete(pool, def.id).await?);
        assert!(model_configs::default_id(pool).await?.is_none());
        Ok(())
    }
}
