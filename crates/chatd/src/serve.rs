//! `chatd serve`: one replica of the service (API.md, "Running a replica").
//!
//! Startup, in order: install the signal handlers; open the database (the
//! embedded cluster when no `--postgres-url`); apply migrations (sqlx's
//! migrator holds an advisory lock, so replicas starting together are
//! safe); bootstrap the admin token from `CHATD_BOOTSTRAP_ADMIN_TOKEN`;
//! apply the `--config` file; settle the relay secret; connect the
//! LISTEN/NOTIFY pubsub; bind the listener; register this replica (its id is
//! the worker id and the stream's replica id); build the API with live
//! streaming over the part buffer the worker writes; log
//! `listening on http://ADDR` exactly once; serve.
//!
//! Shutdown on SIGTERM or SIGINT (or a failure after startup): close the
//! live streams (clients reconnect elsewhere), stop accepting, let in-flight requests finish within `--shutdown-grace`, stop
//! the heartbeat, delete this replica's row, close the pubsub and the pool,
//! stop the embedded PostgreSQL. The process then exits with status 0. A
//! signal during startup unwinds the steps taken so far the same way.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use chatd_pubsub::PgPubsub;
use chatd_store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::{self, Replica, ReplicaHeartbeat};
use crate::config::ServeArgs;
use crate::database::{Database, Role};
use crate::http_server;
use crate::shutdown::Signals;

/// The environment variable holding the bootstrap admin token.
pub const BOOTSTRAP_ADMIN_TOKEN_ENV: &str = "CHATD_BOOTSTRAP_ADMIN_TOKEN";

/// Runs a replica until SIGTERM or SIGINT, then shuts it down gracefully.
///
/// # Errors
/// When startup fails (database unreachable, migrations, config file,
/// listener address in use, ...) or the embedded PostgreSQL does not stop.
/// Everything started before the failure is stopped first.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let signals = Signals::install()?;

    // Startup steps are not cancelled mid-way (dropping one half-way could
    // orphan a PostgreSQL server or a replicas row); each is bounded, and a
    // signal that arrived meanwhile is acted on right after it.
    let database = Database::open(&args.database, Role::Server, args.max_db_connections).await?;
    tracing::info!("database: {}", database.location);
    let served = serve(&args, &database, &signals).await;
    let closed = database.close().await;
    match (served, closed) {
        (Err(err), closed) => {
            if let Err(close_err) = closed {
                tracing::error!("{close_err:#}");
            }
            Err(err)
        }
        (Ok(()), closed) => {
            closed?;
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// Everything between an open database and its closing.
async fn serve(args: &ServeArgs, database: &Database, signals: &Signals) -> anyhow::Result<()> {
    if signals.shutdown.is_cancelled() {
        return Ok(());
    }
    let Some(started) = start_patiently(args, database, signals).await? else {
        return Ok(());
    };
    if signals.shutdown.is_cancelled() {
        started.streams_shutdown.cancel();
        started.replica.deregister(&database.pool).await.ok();
        started.pubsub.close().await;
        return Ok(());
    }
    let Started {
        listener,
        router,
        pubsub,
        replica,
        store,
        parts,
        streams_shutdown,
    } = started;
    let pool = &database.pool;
    let settings = args.worker_config(replica.id);
    if settings.heartbeat_interval >= settings.lease_stale_after {
        tracing::warn!(
            heartbeat_interval = ?settings.heartbeat_interval,
            lease_stale_after = ?settings.lease_stale_after,
            "--heartbeat-interval is not shorter than --lease-stale-after: other replicas will take chats over while this one still runs them"
        );
    }
    // The replica id is the worker id it writes on the chats it owns.
    let mut worker = (!args.no_worker).then(|| {
        chatd_worker::Worker::start(chatd_worker::WorkerDeps {
            store: store.clone(),
            pubsub: Arc::new(pubsub.clone()),
            parts: parts.clone(),
            providers: Arc::new(chatd_worker::DefaultProviderFactory),
            config: settings,
        })
    });
    if worker.is_none() {
        tracing::info!("--no-worker: this replica acquires no chats");
    }

    let tasks = TaskTracker::new();
    let stop_tasks = CancellationToken::new();
    tasks.spawn(
        ReplicaHeartbeat {
            pool: pool.clone(),
            replica: replica.clone(),
            interval: args.heartbeat_interval,
            prune_after: args.prune_replicas_after.0,
        }
        .run(stop_tasks.clone()),
    );
    tasks.close();

    let addr = listener.local_addr()?;
    // TCP_NODELAY, the header-read deadline, graceful shutdown: see
    // `http_server`.
    let mut server = tokio::spawn(http_server::serve(
        listener,
        router,
        http_server::HttpDeadlines {
            header_read: args.header_read_timeout,
        },
        signals.shutdown.clone(),
    ));
    tracing::info!(replica_id = %replica.id, "listening on http://{addr}");

    // Biased: once the shutdown token is cancelled the server task ends too,
    // and that end must read as the graceful one, not as a failure.
    let served = tokio::select! {
        biased;
        () = signals.shutdown.cancelled() => {
            // Streams end at once: their clients reconnect to another replica.
            streams_shutdown.cancel();
            // Hand the chats over first: abandoning publishes chat:ownership so
            // another replica resumes them at once, while requests drain.
            if let Some(worker) = worker.take() {
                worker.shutdown().await;
            }
            // Drain: the server stops accepting and waits for open connections.
            tokio::select! {
                result = &mut server => flatten(result),
                () = tokio::time::sleep(args.shutdown_grace) => {
                    tracing::warn!("in-flight requests still running after {:?}: closing them", args.shutdown_grace);
                    server.abort();
                    Ok(())
                }
                () = signals.force.cancelled() => {
                    server.abort();
                    Ok(())
                }
            }
        }
        result = &mut server => {
            if signals.shutdown.is_cancelled() {
                flatten(result)
            } else {
                // The server ended on its own: an error worth exiting for.
                signals.shutdown.cancel();
                flatten(result).and_then(|()| Err(anyhow::anyhow!("the HTTP server stopped unexpectedly")))
            }
        }
    };

    streams_shutdown.cancel();
    if let Some(worker) = worker.take() {
        worker.shutdown().await;
    }
    stop_tasks.cancel();
    tasks.wait().await;
    if let Err(err) = replica.deregister(pool).await {
        tracing::warn!("{err:#}");
    }
    pubsub.close().await;
    served
}

/// What [`start`] sets up.
struct Started {
    listener: TcpListener,
    router: axum::Router,
    pubsub: PgPubsub,
    replica: Replica,
    store: Store,
    parts: chatd_worker::PartBuffer,
    /// Cancelled at shutdown: closes every live stream and stops the sync
    /// poller.
    streams_shutdown: CancellationToken,
}

/// How long startup keeps trying while the database fails transiently.
const STARTUP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// [`start`], again while it fails with a transient database error (a
/// failover or restart of the database while this replica starts; issue
/// 36), with a doubling delay from 200 ms to 2 s, for at most
/// [`STARTUP_PATIENCE`]. Every step of [`start`] is idempotent (migrations,
/// the config file, the relay secret, the replica's registration), and an
/// attempt that fails releases what it took (its listening socket, its
/// pubsub). Any other error, and the last transient one, is returned at
/// once. `None` when shutdown was asked for meanwhile.
async fn start_patiently(
    args: &ServeArgs,
    database: &Database,
    signals: &Signals,
) -> anyhow::Result<Option<Started>> {
    let deadline = tokio::time::Instant::now() + STARTUP_PATIENCE;
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match start(args, database).await {
            Ok(started) => return Ok(Some(started)),
            Err(err) if transient(&err) && tokio::time::Instant::now() + delay < deadline => {
                tracing::warn!(
                    "starting failed on a transient database error (a failover?): {err:#}; \
                     retrying in {delay:?}"
                );
                tokio::select! {
                    () = signals.shutdown.cancelled() => return Ok(None),
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
            }
            Err(err) => return Err(err),
        }
    }
}

/// Whether an error of [`start`] comes from a transient database failure
/// ([`chatd_store::is_transient`]) anywhere in its chain. The wrappers on
/// the way (`StoreError::Database`, `MigrateError::Execute`,
/// `PubsubError::Database`) name the `sqlx::Error` as their source, so the
/// chain reaches it.
fn transient(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .is_some_and(chatd_store::is_transient)
    })
}

async fn start(args: &ServeArgs, database: &Database) -> anyhow::Result<Started> {
    let pool = &database.pool;
    // A malformed key stops startup before anything is written.
    let secrets = args.secrets()?;
    chatd_store::migrate(pool)
        .await
        .context("applying migrations")?;
    tracing::info!("migrations applied");

    // Members' tokens always expire, those created before that rule too.
    let capped = chatd_store::tokens::cap_member_lifetimes(
        pool,
        args.limits.max_member_token_lifetime.as_secs() as i64,
    )
    .await
    .context("capping members' token lifetimes")?;
    if capped > 0 {
        tracing::info!(
            tokens = capped,
            "members' tokens without an expiry now expire after --max-member-token-lifetime"
        );
    }

    // Before anything reads or writes a provider key or MCP secret: a wrong
    // key stops startup here rather than failing every model call later.
    chatd_store::secrets::prepare(pool, &secrets)
        .await
        .context("preparing the encrypted secrets")?;

    match std::env::var(BOOTSTRAP_ADMIN_TOKEN_ENV) {
        Ok(token) if !token.is_empty() => {
            chatd_api::bootstrap_admin(pool, &token)
                .await
                .context("bootstrapping the admin token")?;
            tracing::info!("admin token from {BOOTSTRAP_ADMIN_TOKEN_ENV} is active");
        }
        _ => {}
    }

    if let Some(path) = &args.config {
        let file = chatd_api::config_file::ConfigFile::load(path)?;
        chatd_api::config_file::apply(pool, &secrets, &file)
            .await
            .with_context(|| format!("applying the config file {}", path.display()))?;
        tracing::info!(
            file = %path.display(),
            providers = file.providers.len(),
            model_configs = file.model_configs.len(),
            mcp_servers = file.mcp_servers.len(),
            "config file applied"
        );
    }

    let explicit = args.relay_secret.as_ref().map(|s| s.expose().to_owned());
    let relay_secret = cluster::relay_secret(pool, explicit).await?;

    let pubsub = PgPubsub::connect(pool.clone())
        .await
        .context("connecting the LISTEN/NOTIFY pubsub")?;
    let store = Store::with_config(
        pool.clone(),
        Arc::new(pubsub.clone()),
        StoreConfig {
            requires_action_timeout: args.requires_action_timeout,
            heartbeat_stale_after: args.lease_stale_after,
            max_queued_messages: args.max_queued_messages,
            secrets: secrets.clone(),
        },
    );
    let parts = chatd_worker::PartBuffer::new(CancellationToken::new());

    let listener = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            pubsub.close().await;
            return Err(err).with_context(|| format!("listening on {}", args.listen));
        }
    };
    let addr = listener.local_addr()?;
    let advertise_url = advertise_url(args, addr);
    let replica = match Replica::register(pool, advertise_url).await {
        Ok(replica) => replica,
        Err(err) => {
            pubsub.close().await;
            return Err(err);
        }
    };
    tracing::info!(replica_id = %replica.id, advertise_url = %replica.advertise_url, "replica registered");

    let streams_shutdown = CancellationToken::new();
    if args.no_listen_notify {
        tracing::info!("--no-listen-notify: live streams converge through the sync poller only");
    }
    let state = chatd_api::AppState::new(
        store.clone(),
        chatd_api::ApiOptions {
            max_queued_messages: args.max_queued_messages,
            relay_secret: Some(relay_secret),
            limits: args.limits.defaults(),
            request_body_timeout: args.request_body_timeout,
            ..chatd_api::ApiOptions::default()
        },
    )
    .with_stream(chatd_api::StreamDeps {
        // The same buffer the worker writes, read through LiveParts (the
        // API does not depend on the worker): chats this replica owns are
        // relayed from memory.
        parts: Arc::new(parts.clone()),
        replica_id: replica.id,
        pubsub: (!args.no_listen_notify)
            .then(|| Arc::new(pubsub.clone()) as Arc<dyn chatd_pubsub::Pubsub>),
        config: chatd_api::StreamConfig {
            sync_poll_interval: args.sync_poll_interval,
            ..chatd_api::StreamConfig::default()
        },
        shutdown: streams_shutdown.clone(),
    });
    let router = chatd_api::router(state);
    Ok(Started {
        listener,
        router,
        pubsub,
        replica,
        store,
        parts,
        streams_shutdown,
    })
}

/// `--advertise-url`, else `http://<bound address>`.
fn advertise_url(args: &ServeArgs, bound: SocketAddr) -> String {
    if let Some(url) = &args.advertise_url {
        return url.as_str().trim_end_matches('/').to_owned();
    }
    if bound.ip().is_unspecified() {
        tracing::warn!(
            "listening on {bound}, an address other replicas cannot connect to; set \
             --advertise-url to this replica's reachable address"
        );
    }
    format!("http://{bound}")
}

fn flatten(result: Result<std::io::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(err).context("serving HTTP"),
        Err(err) if err.is_cancelled() => Ok(()),
        Err(err) => Err(err).context("the HTTP server task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Startup tries again on what a failover answers (issue 36: a replica
    /// started during a switchover exited on "terminating connection due to
    /// administrator command"), never on a mistake of its own.
    #[test]
    fn startup_retries_transient_database_errors_only() {
        let io = || sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(transient(
            &anyhow::Error::new(io()).context("applying the config file x.toml")
        ));
        assert!(transient(
            &anyhow::Error::new(chatd_store::StoreError::Database(io()))
                .context("capping members' token lifetimes")
        ));
        assert!(transient(
            &anyhow::Error::new(sqlx::migrate::MigrateError::Execute(
                sqlx::Error::PoolTimedOut
            ))
            .context("applying migrations")
        ));
        assert!(!transient(
            &anyhow::Error::new(sqlx::Error::RowNotFound).context("registering this replica")
        ));
        assert!(!transient(&anyhow::anyhow!(
            "config file x.toml: unknown field `modle`"
        )));
    }
}
