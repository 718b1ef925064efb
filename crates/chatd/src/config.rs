//! Command-line flags of `chatd serve` and `chatd token`, each with its
//! `CHATD_*` environment fallback (API.md, "Running a replica"), and the
//! worker's own [`chatd_worker::WorkerConfig`] they resolve to
//! ([`ServeArgs::worker_config`]).
//!
//! Durations accept humantime syntax: `500ms`, `2s`, `5m`, `1h 30m`.
//! The worker flags configure the chat worker `chatd serve` runs; the stream
//! flags (`--sync-poll-interval`, the hidden `--no-listen-notify`) configure
//! the live-stream loops.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Where the database is: an explicit server, or the embedded cluster of a
/// data directory. `Debug` prints the URL without its password.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/chatd). Without
    /// it, chatd runs its own embedded PostgreSQL in --data-dir, using the
    /// server binaries installed on the machine.
    #[arg(
        long,
        env = "CHATD_POSTGRES_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub postgres_url: Option<PostgresUrl>,

    /// Directory of the embedded PostgreSQL cluster (`postgres/`) and its log
    /// (`postgres.log`). Unused with --postgres-url. Default:
    /// ~/.local/share/chatd.
    #[arg(long, env = "CHATD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DatabaseArgs {
    /// `--data-dir`, or `$XDG_DATA_HOME/chatd`, or `~/.local/share/chatd`.
    ///
    /// # Errors
    /// When no directory is given and `HOME` is unset.
    pub fn data_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.data_dir {
            return Ok(std::path::absolute(dir)?);
        }
        if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(xdg).join("chatd"));
        }
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| anyhow::anyhow!("HOME is not set: pass --data-dir"))?;
        Ok(PathBuf::from(home).join(".local/share/chatd"))
    }
}

/// Flags of `chatd serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on for HTTP (port 0 picks a free port; the actual
    /// address is in the `listening on` log line).
    #[arg(
        long,
        env = "CHATD_LISTEN",
        default_value = "127.0.0.1:3000",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub database: DatabaseArgs,

    /// TOML file declaring providers, model configs and MCP servers, applied
    /// at startup.
    #[arg(long, env = "CHATD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Where other replicas reach this one (its parts endpoint). Default:
    /// `http://<the bound listen address>`.
    #[arg(long, env = "CHATD_ADVERTISE_URL", value_name = "URL")]
    pub advertise_url: Option<url::Url>,

    /// Shared secret replicas authenticate to each other's parts endpoint
    /// with. Default: generated on the first start and stored in the
    /// database, so every replica of the cluster uses the same one.
    #[arg(
        long,
        env = "CHATD_RELAY_SECRET",
        value_name = "S",
        hide_env_values = true
    )]
    pub relay_secret: Option<Secret>,

    /// File holding the key that encrypts provider API keys and MCP server
    /// secrets at rest: 32 bytes written as 64 hex digits or as base64
    /// (`openssl rand -hex 32 > key`). The key can instead be given in
    /// CHATD_SECRET_KEY itself. Without either, secrets are stored in plain
    /// text (the log says so); with one, plain rows are encrypted at the
    /// first start, and a key other than the database's stops startup.
    #[arg(long, env = "CHATD_SECRET_KEY_FILE", value_name = "PATH")]
    pub secret_key_file: Option<PathBuf>,

    /// Serve the API but acquire no chats: this replica runs no worker.
    #[arg(long, env = "CHATD_NO_WORKER")]
    pub no_worker: bool,

    /// Maximum messages queued per chat; a send beyond it answers 429.
    #[arg(
        long,
        env = "CHATD_MAX_QUEUED_MESSAGES",
        default_value_t = 20,
        value_name = "N",
        value_parser = clap::value_parser!(i64).range(1..)
    )]
    pub max_queued_messages: i64,

    /// How long a chat may wait in requires_action for client tool results
    /// before they are cancelled.
    #[arg(long, env = "CHATD_REQUIRES_ACTION_TIMEOUT", default_value = "5m", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub requires_action_timeout: Duration,

    /// A chat heartbeat (and a replica's `last_seen_at`) older than this is
    /// stale: its chat may be taken over.
    #[arg(long, env = "CHATD_LEASE_STALE_AFTER", default_value = "30s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub lease_stale_after: Duration,

    /// How often heartbeats are written: the chat heartbeats of this
    /// replica's runners, and its `last_seen_at`.
    #[arg(long, env = "CHATD_HEARTBEAT_INTERVAL", default_value = "9s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub heartbeat_interval: Duration,

    /// Delete the `replicas` row of another replica that has not refreshed
    /// its `last_seen_at` for this long and owns no running chat (it
    /// crashed, or was killed); `off` keeps such rows. A graceful stop removes its own
    /// row at once.
    #[arg(long, env = "CHATD_PRUNE_REPLICAS_AFTER", default_value = "1h", value_parser = parse_optional_duration, value_name = "DURATION|off")]
    pub prune_replicas_after: OptionalDuration,

    /// Worker: how often to look for runnable chats besides `chat:ownership`
    /// wake-ups.
    #[arg(long, env = "CHATD_ACQUISITION_INTERVAL", default_value = "30s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub acquisition_interval: Duration,

    /// Stream: how often the sync poller re-reads every watched chat, so
    /// streams converge even when notifications are lost.
    #[arg(long, env = "CHATD_SYNC_POLL_INTERVAL", default_value = "10s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub sync_poll_interval: Duration,

    /// Testing aid: this replica's stream loops ignore LISTEN/NOTIFY and
    /// converge through the sync poller alone (the worker still uses
    /// notifications).
    #[arg(long, env = "CHATD_NO_LISTEN_NOTIFY", hide = true)]
    pub no_listen_notify: bool,

    /// Worker: retries of a failed provider request before the chat errors.
    #[arg(
        long,
        env = "CHATD_MAX_GENERATION_RETRIES",
        default_value_t = 25,
        value_name = "N"
    )]
    pub max_generation_retries: u32,

    /// Worker: delay before the first retry; doubles each retry.
    #[arg(long, env = "CHATD_RETRY_INITIAL_DELAY", default_value = "1s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub retry_initial_delay: Duration,

    /// Worker: cap of the retry delay.
    #[arg(long, env = "CHATD_RETRY_MAX_DELAY", default_value = "60s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub retry_max_delay: Duration,

    /// Worker: archive a root chat, unless pinned, once its whole family
    /// has been idle (waiting or error, nothing queued, no change) this
    /// long; `off` or `0` never archives. Archived chats leave the default
    /// chat list; unarchiving brings their messages and settings back.
    #[arg(long, env = "CHATD_AUTO_ARCHIVE_AFTER", default_value = "90days", value_parser = parse_optional_duration, value_name = "DURATION|off")]
    pub auto_archive_after: OptionalDuration,

    /// Worker: how often to look for chats to auto-archive (the first look
    /// is at start).
    #[arg(long, env = "CHATD_AUTO_ARCHIVE_INTERVAL", default_value = "1h", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub auto_archive_interval: Duration,

    /// Maximum connections in this replica's PostgreSQL pool.
    #[arg(
        long,
        env = "CHATD_MAX_DB_CONNECTIONS",
        default_value_t = 16,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(2..)
    )]
    pub max_db_connections: u32,

    /// How long a graceful shutdown waits for in-flight requests before
    /// closing their connections.
    #[arg(long, env = "CHATD_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Duration,

    /// How long a connection may take to send a request's headers before it
    /// is closed (slowloris; API.md "Slow or hostile clients"). Hidden: the
    /// contract fixes 30 s; tests shorten it.
    #[arg(long, env = "CHATD_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration, value_name = "DURATION", hide = true)]
    pub header_read_timeout: Duration,

    /// How long a request body may take, from the start of the request,
    /// before the request fails with `408` and the connection is closed.
    /// Hidden: the contract fixes 60 s; tests shorten it.
    #[arg(long, env = "CHATD_REQUEST_BODY_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration, value_name = "DURATION", hide = true)]
    pub request_body_timeout: Duration,

    #[command(flatten)]
    pub limits: LimitArgs,

    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Workspaces (API.md "Workspaces and provider-hosted tools"): where a
/// replica keeps its chats' directories, their limit, which calls wait for
/// approval, and the sandbox of `shell` calls (bubblewrap).
#[derive(Debug, Clone, Args)]
pub struct WorkspaceArgs {
    /// Where this replica keeps the working copies of its chats'
    /// workspaces (a directory per replica under it, removed at shutdown;
    /// the committed files are in the database).
    #[arg(long, env = "CHATD_WORKSPACE_DIR", value_name = "DIR")]
    pub workspace_dir: Option<std::path::PathBuf>,

    /// The most bytes one chat's workspace holds (file contents and symlink
    /// targets); a call that would go past it fails, saying so.
    #[arg(long, env = "CHATD_MAX_WORKSPACE_BYTES", default_value_t = 64 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(i64).range(0..))]
    pub max_workspace_bytes: i64,

    /// Which workspace calls wait for a person's approval: `never`,
    /// `shell` (every `shell` call) or `always` (`shell` and `write_file`).
    #[arg(long, env = "CHATD_WORKSPACE_APPROVAL", default_value = "shell", value_name = "POLICY",
          value_parser = ["never", "always", "shell"])]
    pub workspace_approval: String,

    /// Let `shell` commands reach the network (default: none, not even the
    /// host's loopback).
    #[arg(long, env = "CHATD_WORKSPACE_NETWORK")]
    pub workspace_network: bool,

    /// CPU time of one `shell` call, all its processes together.
    #[arg(long, env = "CHATD_WORKSPACE_CPU_SECONDS", default_value_t = 120, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub workspace_cpu_seconds: u64,

    /// Memory of one `shell` call.
    #[arg(long, env = "CHATD_WORKSPACE_MEMORY_BYTES", default_value_t = 1 << 30, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1 << 20..))]
    pub workspace_memory_bytes: u64,

    /// Processes and threads one `shell` call may have at once.
    #[arg(long, env = "CHATD_WORKSPACE_PROCESSES", default_value_t = 128, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub workspace_processes: u64,

    /// The bubblewrap binary (a path, or a name looked up in PATH).
    #[arg(
        long,
        env = "CHATD_BWRAP",
        default_value = "bwrap",
        value_name = "PATH"
    )]
    pub bwrap: std::path::PathBuf,
}

impl WorkspaceArgs {
    /// The worker's workspace settings from these flags.
    pub fn config(&self) -> chatd_worker::WorkspaceConfig {
        let defaults = chatd_worker::WorkspaceConfig::default();
        let mut sandbox = defaults.sandbox.clone();
        sandbox.network = self.workspace_network;
        sandbox.bwrap = self.bwrap.clone();
        sandbox.limits.cpu_time = Duration::from_secs(self.workspace_cpu_seconds);
        sandbox.limits.memory_bytes = self.workspace_memory_bytes;
        sandbox.limits.processes = self.workspace_processes;
        sandbox.limits.file_size_bytes =
            u64::try_from(self.max_workspace_bytes).unwrap_or(0).max(1);
        chatd_worker::WorkspaceConfig {
            dir: self.workspace_dir.clone().unwrap_or(defaults.dir),
            max_bytes: self.max_workspace_bytes,
            approval: chatd_worker::WorkspaceApproval::parse(&self.workspace_approval)
                .unwrap_or_default(),
            sandbox,
            read_max_bytes: defaults.read_max_bytes,
            max_entries: defaults.max_entries,
        }
    }
}

/// Limits, budgets and the token lifecycle (API.md, the section of that
/// name): server-wide caps and the defaults of the per-user limits, which an
/// admin overrides per user (`PATCH /api/v2/users/{user}`).
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Chats this replica runs at once; acquisition takes no more.
    #[arg(long, env = "CHATD_MAX_RUNNERS", default_value_t = 256, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_runners: u32,

    /// Default of a user's chats that run at once, across all replicas.
    #[arg(long, env = "CHATD_DEFAULT_MAX_RUNNING_CHATS", default_value_t = 8, value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..))]
    pub default_max_running_chats: i32,

    /// Default of a user's API requests per minute (per replica; stream
    /// connects count, their frames do not).
    #[arg(long, env = "CHATD_DEFAULT_REQUESTS_PER_MINUTE", default_value_t = 600, value_name = "N",
          value_parser = clap::value_parser!(i32).range(1..))]
    pub default_requests_per_minute: i32,

    /// Default of a user's spend per calendar month (UTC), in micro-dollars
    /// of the model prices; none when absent.
    #[arg(long, env = "CHATD_DEFAULT_MONTHLY_BUDGET_MICROS", value_name = "MICROS",
          value_parser = clap::value_parser!(i64).range(0..))]
    pub default_monthly_budget_micros: Option<i64>,

    /// Default of a user's input + output tokens per calendar month (UTC);
    /// none when absent.
    #[arg(long, env = "CHATD_DEFAULT_MONTHLY_TOKEN_BUDGET", value_name = "TOKENS",
          value_parser = clap::value_parser!(i64).range(0..))]
    pub default_monthly_token_budget: Option<i64>,

    /// Default of the bytes of files a user keeps.
    #[arg(long, env = "CHATD_DEFAULT_MAX_STORAGE_BYTES", default_value_t = 1 << 30, value_name = "BYTES",
          value_parser = clap::value_parser!(i64).range(0..))]
    pub default_max_storage_bytes: i64,

    /// Longest lifetime a member may give a token (a member's token always
    /// expires).
    #[arg(long, env = "CHATD_MAX_MEMBER_TOKEN_LIFETIME", default_value = "30d", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub max_member_token_lifetime: Duration,

    /// WebSocket, SSE and long-poll connections a user holds at once on
    /// this replica (429 beyond).
    #[arg(long, env = "CHATD_DEFAULT_MAX_OPEN_STREAMS", default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub default_max_open_streams: u32,

    /// Model calls in one turn; the next ends the turn with kind
    /// `usage_limit`.
    #[arg(long, env = "CHATD_MAX_STEPS_PER_TURN", default_value_t = 250, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps_per_turn: u32,

    /// Children one chat may spawn; more is an error result to the model.
    #[arg(
        long,
        env = "CHATD_MAX_SUBAGENTS_PER_CHAT",
        default_value_t = 16,
        value_name = "N"
    )]
    pub max_subagents_per_chat: u32,
}

impl LimitArgs {
    /// The defaults and caps these flags set.
    pub fn defaults(&self) -> chatd_core::limits::LimitDefaults {
        chatd_core::limits::LimitDefaults {
            max_runners: self.max_runners as usize,
            max_running_chats: self.default_max_running_chats,
            requests_per_minute: self.default_requests_per_minute,
            monthly_budget_micros: self.default_monthly_budget_micros,
            monthly_token_budget: self.default_monthly_token_budget,
            max_storage_bytes: self.default_max_storage_bytes,
            max_member_token_lifetime: self.max_member_token_lifetime,
            max_open_streams: self.default_max_open_streams,
            max_steps_per_turn: self.max_steps_per_turn,
            max_subagents_per_chat: self.max_subagents_per_chat,
        }
    }
}

impl ServeArgs {
    /// The store's secret handling from `--secret-key-file` or the
    /// `CHATD_SECRET_KEY` environment variable ([`load_secrets`]).
    ///
    /// # Errors
    /// See [`load_secrets`].
    pub fn secrets(&self) -> anyhow::Result<chatd_store::secrets::Secrets> {
        load_secrets(
            self.secret_key_file.as_deref(),
            std::env::var(SECRET_KEY_ENV).ok(),
        )
    }

    /// The worker's tunables from these flags, for the worker whose id is
    /// `worker_id` (the replica id); what no flag sets keeps
    /// [`chatd_worker::WorkerConfig::default`]. Whether a worker runs at all
    /// is `--no-worker`; the stream's `--sync-poll-interval` is not a worker
    /// setting.
    pub fn worker_config(&self, worker_id: uuid::Uuid) -> chatd_worker::WorkerConfig {
        chatd_worker::WorkerConfig {
            worker_id,
            acquisition_interval: self.acquisition_interval,
            heartbeat_interval: self.heartbeat_interval,
            lease_stale_after: self.lease_stale_after,
            max_generation_retries: self.max_generation_retries,
            retry_initial_delay: self.retry_initial_delay,
            retry_max_delay: self.retry_max_delay,
            auto_archive_after: self.auto_archive_after.0,
            auto_archive_interval: self.auto_archive_interval,
            max_steps_per_turn: self.limits.max_steps_per_turn as usize,
            limits: self.limits.defaults(),
            workspace: self.workspace.config(),
            ..chatd_worker::WorkerConfig::default()
        }
    }
}

/// The environment variable holding the secret key itself (the
/// alternative to `--secret-key-file`).
pub const SECRET_KEY_ENV: &str = "CHATD_SECRET_KEY";

/// The secret key from the file `file` (`--secret-key-file`) or the text
/// `env` (`CHATD_SECRET_KEY`; empty counts as unset), parsed by
/// [`chatd_store::secrets::SecretKey::parse`]; no key when neither is given.
///
/// # Errors
/// Both given, an unreadable file, or a key that is not 32 bytes as hex or
/// base64; the message names the flag or variable and never the key.
pub fn load_secrets(
    file: Option<&std::path::Path>,
    env: Option<String>,
) -> anyhow::Result<chatd_store::secrets::Secrets> {
    use chatd_store::secrets::{SecretKey, Secrets};
    let env = env.filter(|v| !v.trim().is_empty());
    let key = match (file, env) {
        (Some(_), Some(_)) => {
            anyhow::bail!("give --secret-key-file or {SECRET_KEY_ENV}, not both")
        }
        (Some(path), None) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("--secret-key-file {}: cannot read it: {e}", path.display())
            })?;
            Some(
                SecretKey::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--secret-key-file {}: {e}", path.display()))?,
            )
        }
        (None, Some(text)) => {
            Some(SecretKey::parse(&text).map_err(|e| anyhow::anyhow!("{SECRET_KEY_ENV}: {e}"))?)
        }
        (None, None) => None,
    };
    Ok(Secrets::new(key))
}

/// A flag value that must not reach a log (`--relay-secret`): `Debug`
/// prints `"<redacted>"`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// A PostgreSQL URL flag (`--postgres-url`): dereferences to the URL;
/// `Debug` prints it with its password (user info or a `password` query
/// parameter) replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl std::ops::Deref for PostgresUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for PostgresUrl {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(PostgresUrl(s.to_owned()))
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = match url::Url::parse(&self.0) {
            Ok(mut url) => {
                if url.password().is_some() {
                    let _ = url.set_password(Some("***"));
                }
                if url.query().is_some() {
                    let pairs: Vec<(String, String)> = url
                        .query_pairs()
                        .map(|(k, v)| {
                            let v = if k.contains("password") {
                                "***".to_owned()
                            } else {
                                v.into_owned()
                            };
                            (k.into_owned(), v)
                        })
                        .collect();
                    url.query_pairs_mut().clear().extend_pairs(pairs);
                }
                url.to_string()
            }
            // Not a URL (a libpq key=value string may hold a password):
            // nothing of it is printed.
            Err(_) => "<unparsed>".to_owned(),
        };
        write!(f, "{shown:?}")
    }
}

/// A duration, or none (`off`, `0`): a clap value type, since clap reads
/// `Option<T>` as an optional flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalDuration(pub Option<Duration>);

/// Log output format (`--log-format`, `CHATD_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Parses a duration that must be greater than zero (intervals, timeouts,
/// delays): a zero interval would spin or panic a timer.
pub(crate) fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be greater than zero (examples: 500ms, 2s, 5m)".to_owned());
    }
    Ok(duration)
}

/// Parses a duration, or `off`/`0` for none.
fn parse_optional_duration(text: &str) -> Result<OptionalDuration, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(OptionalDuration(None));
    }
    let duration = parse_duration(text).map_err(|err| format!("{err}; or `off` to turn it off"))?;
    Ok(OptionalDuration((!duration.is_zero()).then_some(duration)))
}

/// Parses `500ms`, `2s`, `5m` (humantime syntax).
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 500ms, 2s, 5m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_reject_zero() {
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0ms").is_err());
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn auto_archive_after_accepts_a_duration_or_off() {
        assert_eq!(
            parse_optional_duration("90days"),
            Ok(OptionalDuration(Some(Duration::from_secs(90 * 86_400))))
        );
        assert_eq!(parse_optional_duration("off"), Ok(OptionalDuration(None)));
        assert_eq!(parse_optional_duration("OFF"), Ok(OptionalDuration(None)));
        assert_eq!(parse_optional_duration("0s"), Ok(OptionalDuration(None)));
        let err = parse_optional_duration("soon").unwrap_err();
        assert!(err.contains("off"), "{err}");
    }

    #[test]
    fn durations_accept_the_documented_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5 parsecs").is_err());
    }
}

#[cfg(test)]
mod secret_flag_tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn debug_of_the_flags_prints_no_password_or_secret() {
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            "chatd",
            "--postgres-url",
            "postgres://chatd:pg-pass@db.example:5432/chatd?sslpassword=q-pass&sslmode=require",
            "--relay-secret",
            "relay-xyz",
            "--secret-key-file",
            "/etc/chatd/key",
        ])
        .unwrap();
        assert_eq!(
            cli.serve.relay_secret.as_ref().map(Secret::expose),
            Some("relay-xyz")
        );
        let url = cli.serve.database.postgres_url.as_deref().unwrap();
        assert!(url.contains("pg-pass"), "the value itself is intact");
        let text = format!("{:?} {:#?}", cli.serve, cli.serve);
        for secret in ["pg-pass", "q-pass", "relay-xyz"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(
            text.contains("db.example") && text.contains("sslmode=require"),
            "{text}"
        );
        assert!(text.contains("/etc/chatd/key"), "{text}");
        // A libpq key=value string is not printed at all.
        let kv: PostgresUrl = "host=db password=kv-pass".parse().unwrap();
        assert!(!format!("{kv:?}").contains("kv-pass"));
    }

    #[test]
    fn the_secret_key_comes_from_the_file_or_the_environment_never_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        assert!(load_secrets(Some(&path), None).unwrap().is_enabled());
        assert!(
            load_secrets(None, Some("ab".repeat(32)))
                .unwrap()
                .is_enabled()
        );
        assert!(!load_secrets(None, None).unwrap().is_enabled());
        assert!(!load_secrets(None, Some("  ".into())).unwrap().is_enabled());
        let both = load_secrets(Some(&path), Some("ab".repeat(32))).unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
        std::fs::write(&path, "cd".repeat(16)).unwrap();
        let short = load_secrets(Some(&path), None).unwrap_err().to_string();
        assert!(
            short.contains("--secret-key-file") && short.contains("32 bytes"),
            "{short}"
        );
        assert!(!short.contains(&"cd".repeat(16)), "{short}");
        let env = load_secrets(None, Some("nope".into()))
            .unwrap_err()
            .to_string();
        assert!(env.starts_with(SECRET_KEY_ENV), "{env}");
        let missing = load_secrets(Some(&dir.path().join("absent")), None).unwrap_err();
        assert!(missing.to_string().contains("cannot read"), "{missing}");
    }
}
