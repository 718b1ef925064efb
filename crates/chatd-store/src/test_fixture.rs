//! The unit tests' copy of `chatd_testkit::store::StoreFixture`: a [`Store`]
//! on a fresh database with a recording publisher and one member user. The
//! testkit's own fixture holds the `chatd_store` that other crates link,
//! which is not this crate under `cfg(test)`, so the examples of the
//! `pub(crate)` queries use this one.

use std::sync::Arc;

use chatd_core::MessagePart;
use chatd_pubsub::RecordingPublisher;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{CreateChatInput, CreateChatResult, MIGRATOR, NewMessage, Store, StoreConfig};

/// A [`Store`] on its own database, the publisher it records into, and the
/// member `alice` (`owner`) who owns the chats it creates.
pub(crate) struct StoreFixture {
    /// The database; dropped with the fixture.
    pub db: chatd_testkit::TestDatabase,
    /// The store under test.
    pub store: Store,
    /// Every publication of `store`.
    #[allow(dead_code)]
    pub published: Arc<RecordingPublisher>,
    /// The user `alice`, a member.
    pub owner: Uuid,
}

impl StoreFixture {
    /// A fixture with the default [`StoreConfig`].
    pub async fn new() -> anyhow::Result<Self> {
        let db = chatd_testkit::TestDatabase::new(&MIGRATOR).await?;
        let published = Arc::new(RecordingPublisher::new());
        let store =
            Store::with_config(db.pool().clone(), published.clone(), StoreConfig::default());
        let owner = crate::queries::users::insert(db.pool(), "alice", chatd_core::Role::Member)
            .await?
            .id;
        Ok(Self {
            db,
            store,
            published,
            owner,
        })
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// Creates a running chat (`R0`) owned by `owner` whose history is one
    /// user message `text`.
    pub async fn create_chat(&self, text: &str) -> anyhow::Result<CreateChatResult> {
        let input = CreateChatInput {
            owner_id: self.owner,
            initial_messages: vec![NewMessage::user(vec![MessagePart::text(text)])],
            ..CreateChatInput::default()
        };
        Ok(self.store.create_chat(input).await?)
    }
}
