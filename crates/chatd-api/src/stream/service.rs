//! The replica-wide part of streaming ([`StreamService`]): the
//! dependencies, the sync poller's registry and task, the per-user count of
//! open streams and the token watcher's task ([`super::admission`]), and the
//! opening of one stream loop in the order the module doc of
//! [`crate::stream`] gives.

use std::sync::Arc;

use chatd_pubsub::{LiveParts, Pubsub, chat_update_channel};
use chatd_store::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::admission::{self, Admission, OpenStreams, TokenWatcher, Watch};
use super::config::{StreamConfig, StreamDeps};
use super::poller::{PollerRegistry, SyncPoller};
use super::relay::{RelayDeps, RelayHandle};
use super::session::StreamLoop;
use super::state::StreamState;
use crate::auth::{Caller, ChatAccess, Credential};
use crate::error::{ApiError, ApiResult};

/// The replica-wide part of streaming: dependencies, the poller's
/// registry and its task. Cheap to clone.
#[derive(Clone)]
pub struct StreamService {
    pub(crate) store: Store,
    pub(crate) parts: Arc<dyn LiveParts>,
    pub(crate) replica_id: Uuid,
    pub(crate) pubsub: Option<Arc<dyn Pubsub>>,
    pub(crate) config: StreamConfig,
    pub(crate) shutdown: CancellationToken,
    pub(crate) relay_secret: Option<String>,
    pub(crate) registry: PollerRegistry,
    pub(crate) tasks: TaskTracker,
    /// Open user streams per user on this replica.
    pub(crate) open_streams: OpenStreams,
    /// The tokens of the open user streams, re-checked periodically.
    pub(crate) token_watcher: TokenWatcher,
}

impl std::fmt::Debug for StreamService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamService")
            .field("replica_id", &self.replica_id)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl StreamService {
    /// Starts the sync poller and the token watcher on their own tasks
    /// (both stop on `deps.shutdown`). Must be called inside a tokio
    /// runtime.
    pub(crate) fn start(store: Store, relay_secret: Option<String>, deps: StreamDeps) -> Self {
        let registry = PollerRegistry::default();
        let tasks = TaskTracker::new();
        tasks.spawn(
            SyncPoller {
                pool: store.pool().clone(),
                registry: registry.clone(),
                interval: deps.config.sync_poll_interval,
            }
            .run(deps.shutdown.clone()),
        );
        let token_watcher = TokenWatcher::default();
        tasks.spawn(token_watcher.clone().run(
            store.pool().clone(),
            deps.config.token_check_interval,
            deps.shutdown.clone(),
        ));
        tasks.close();
        Self {
            store,
            parts: deps.parts,
            replica_id: deps.replica_id,
            pubsub: deps.pubsub,
            config: deps.config,
            shutdown: deps.shutdown,
            relay_secret,
            registry,
            tasks,
            open_streams: OpenStreams::default(),
            token_watcher,
        }
    }

    /// Admits a stream of `caller` on a chat they reach with `access`:
    /// takes a slot under `max_open_streams` and watches the caller's
    /// credential and, for a shared chat, the share ([`super::admission`]).
    /// Called before any upgrade or response.
    ///
    /// # Errors
    /// `429` naming the maximum when the caller already holds
    /// `max_open_streams` streams on this replica.
    pub(crate) fn admit(
        &self,
        caller: &Caller,
        chat: Uuid,
        access: ChatAccess,
        max_open_streams: u32,
    ) -> ApiResult<Admission> {
        let mut watches = vec![match &caller.credential {
            Credential::Token { hash } => Watch::Token(hash.clone()),
            Credential::Session { hash, .. } => Watch::Session(hash.clone()),
        }];
        if access == ChatAccess::Shared {
            watches.push(Watch::Share {
                chat,
                user: caller.id(),
            });
        }
        admission::admit(
            &self.open_streams,
            &self.token_watcher,
            caller.id(),
            watches,
            max_open_streams,
        )
    }

    /// Open user streams per user on this replica (for tests and metrics).
    pub fn open_streams(&self) -> &OpenStreams {
        &self.open_streams
    }

    /// The watcher of the open streams' tokens (for tests).
    pub fn token_watcher(&self) -> &TokenWatcher {
        &self.token_watcher
    }

    /// The poller's registrations (for tests and metrics).
    pub fn poller_registry(&self) -> &PollerRegistry {
        &self.registry
    }

    /// Waits until the sync poller and the token watcher stopped (after
    /// `shutdown`).
    pub async fn wait(&self) {
        self.tasks.wait().await;
    }

    /// Prepares the loop of a new stream: subscribe, register, start the
    /// forwarder. The bootstrap read happens when the loop runs.
    pub(crate) async fn open(
        &self,
        chat_id: Uuid,
        after_id: i64,
        admission: Admission,
    ) -> ApiResult<StreamLoop> {
        let subscription = match &self.pubsub {
            Some(pubsub) => Some(
                pubsub
                    .subscribe(&chat_update_channel(chat_id))
                    .await
                    .map_err(|e| {
                        ApiError::unavailable("Notifications are unavailable.").with_source(e)
                    })?,
            ),
            None => None,
        };
        let poller = self.registry.register(chat_id);
        let relay = RelayHandle::start(RelayDeps {
            chat_id,
            replica_id: self.replica_id,
            parts: self.parts.clone(),
            pool: self.store.pool().clone(),
            secret: self.relay_secret.clone(),
            config: self.config.relay.clone(),
        });
        Ok(StreamLoop {
            state: StreamState::new(chat_id, after_id),
            store: self.store.clone(),
            pubsub: subscription,
            poller,
            relay,
            config: self.config.clone(),
            shutdown: self.shutdown.clone(),
            admission,
        })
    }
}
