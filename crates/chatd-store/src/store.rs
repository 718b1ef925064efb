//! [`Store`], the handle to the database and the publisher, and its
//! tunables ([`StoreConfig`]). Its operations live with what they do:
//! [`Store::machine`] in `crate::machine`, [`Store::create_chat`] in
//! `crate::transitions::create`, the family archives in
//! `crate::transitions::archive`.

use std::sync::Arc;
use std::time::Duration;

use chatd_pubsub::Publisher;
use sqlx::PgPool;

use crate::error::StoreResult;

/// Tunables of the state machine. Defaults are the spec's.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use chatd_store::StoreConfig;
/// let config = StoreConfig::default();
/// assert_eq!(config.requires_action_timeout, Duration::from_secs(300));
/// assert_eq!(config.heartbeat_stale_after, Duration::from_secs(30));
/// assert_eq!(config.max_queued_messages, 20);
/// ```
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// How long a chat stays in `requires_action` before the timeout task
    /// cancels it (`EnterRequiresAction`); default 5 minutes.
    pub requires_action_timeout: Duration,
    /// A heartbeat older than this counts as stale when deciding whether to
    /// publish `chat:ownership`; default 30 s (`HeartbeatStaleSeconds`).
    pub heartbeat_stale_after: Duration,
    /// Maximum queued messages per chat; default 20.
    pub max_queued_messages: i64,
    /// How provider API keys and MCP secrets are stored ([`crate::secrets`]);
    /// default: no key, plain text.
    pub secrets: crate::secrets::Secrets,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            requires_action_timeout: Duration::from_secs(300),
            heartbeat_stale_after: Duration::from_secs(30),
            max_queued_messages: 20,
            secrets: crate::secrets::Secrets::none(),
        }
    }
}

/// Handle to the database and the publisher; cheap to clone.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use chatd_core::{ExecutionState, MessagePart, Role};
/// use chatd_pubsub::RecordingPublisher;
/// use chatd_store::{CreateChatInput, NewMessage, Store, users};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let published = Arc::new(RecordingPublisher::new());
/// let store = Store::new(pool.clone(), published.clone());
/// let owner = users::insert(store.pool(), "alice", Role::Member).await?.id;
/// let input = CreateChatInput {
///     owner_id: owner,
///     initial_messages: vec![NewMessage::user(vec![MessagePart::text("hi")])],
///     ..Default::default()
/// };
/// let chat = store.create_chat(input).await?.chat;
/// let mut locked = store.machine(chat.id).read_lock().await?;
/// assert_eq!(locked.execution_state().await?, ExecutionState::R0);
/// locked.finish().await?;
/// // chat:update and, for a runnable chat, chat:ownership, after the commit.
/// assert_eq!(published.published().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: PgPool,
    pub(crate) publisher: Arc<dyn Publisher>,
    pub(crate) config: Arc<StoreConfig>,
    /// The context entries of recently changed chats (shared by clones).
    pub(crate) context_cache: Arc<crate::context_cache::ContextCache>,
    /// The rows this replica committed last: the guesses of optimistic
    /// bundles (`crate::bundle::guess`).
    pub(crate) row_cache: Arc<crate::row_cache::RowCache>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store over `pool` publishing to `publisher`, with default tunables.
    ///
    /// Example: [`Store`].
    pub fn new(pool: PgPool, publisher: Arc<dyn Publisher>) -> Self {
        Self::with_config(pool, publisher, StoreConfig::default())
    }

    /// A store with explicit tunables.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use chatd_store::{Store, StoreConfig};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
    /// let config = StoreConfig {
    ///     max_queued_messages: 5,
    ///     ..StoreConfig::default()
    /// };
    /// let store = Store::with_config(pool.clone(), Arc::new(chatd_pubsub::RecordingPublisher::new()), config);
    /// assert_eq!(store.config().max_queued_messages, 5);
    /// assert_eq!(store.config().heartbeat_stale_after, Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn with_config(pool: PgPool, publisher: Arc<dyn Publisher>, config: StoreConfig) -> Self {
        Self {
            pool,
            publisher,
            config: Arc::new(config),
            context_cache: Arc::default(),
            row_cache: Arc::default(),
        }
    }

    /// The replica's cache of model-context entries
    /// ([`crate::context_cache`]), shared by the clones of this store.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_core::MessagePart;
    /// use chatd_store::NewMessage;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// # let created = fx.create_chat("hi").await?; let chat = created.chat.clone();
    /// // A committed history change leaves the chat's entries cached.
    /// let answer = NewMessage::assistant(vec![MessagePart::text("hello")]);
    /// let (_, committed) = store
    ///     .machine(chat.id)
    ///     .update(|tx| Box::pin(async move { tx.commit_step(vec![answer], false).await }))
    ///     .await?;
    /// assert!(store.context_cache().get(chat.id, committed.history_version).is_some());
    /// # Ok(()) }
    /// ```
    pub fn context_cache(&self) -> &crate::context_cache::ContextCache {
        &self.context_cache
    }

    /// How provider API keys and MCP secrets are sealed and opened
    /// ([`StoreConfig::secrets`]); pass it to the `providers` and
    /// `mcp_servers` queries.
    pub fn secrets(&self) -> &crate::secrets::Secrets {
        &self.config.secrets
    }

    /// The connection pool.
    ///
    /// Example: [`Store`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The publisher.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_pubsub::Publisher as _;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
    /// # let fx = chatd_testkit::store::StoreFixture::new().await?; let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
    /// // Publications of the store's transitions go here, after their commit.
    /// store.publisher().publish("example", b"{}")?;
    /// # Ok(()) }
    /// ```
    pub fn publisher(&self) -> &Arc<dyn Publisher> {
        &self.publisher
    }

    /// The tunables.
    ///
    /// Example: [`Store::with_config`].
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }
}

/// Applies pending migrations.
///
/// # Errors
/// Migration failures.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// // Idempotent: a migrated database has nothing pending.
/// chatd_store::migrate(pool).await?;
/// assert!(chatd_store::migrations::all_applied(pool).await?);
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> StoreResult<()> {
    crate::MIGRATOR.run(pool).await?;
    Ok(())
}
