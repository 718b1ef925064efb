//! The `chatd` binary.
//!
//! Subcommands:
//! - `chatd serve`: run a replica: the HTTP API on `--listen`, against
//!   `--postgres-url` or an embedded PostgreSQL in `--data-dir` (API.md,
//!   "Running a replica"; [`serve`], [`embedded_pg`]).
//! - `chatd token create --user NAME [--admin]`: print a new API token
//!   ([`token`]); `chatd token list|revoke`: a user's tokens, over HTTP
//!   like `chatd chat` ([`chat_cli`]).
//! - `chatd user passwd USERNAME [--admin] [--password-stdin]`: set or
//!   reset a user's sign-in password ([`user`]).
//! - `chatd usage [--user USER]`: the month's usage against the user's
//!   limits, over HTTP like `chatd chat` ([`chat_cli`]).
//! - `chatd migrate --postgres-url URL`: apply the embedded migrations and
//!   exit.
//! - `chatd chat list|new|send|watch|interrupt|rename|archive|delete|
//!   export|import|search|share|...`: a command-line client of a running
//!   server (`--url`/`CHATD_URL`, `--token`/`CHATD_TOKEN`): start chats,
//!   stream replies to the terminal and manage chats ([`chat_cli`]).
//!
//! The local commands (`token create`, `user passwd`) work on the running
//! server's database: `--postgres-url`, or the embedded cluster of
//! `--data-dir`/`CHATD_DATA_DIR` (default `~/.local/share/chatd`, as
//! `scripts/run.sh` uses); a data directory without a cluster is refused,
//! never created ([`database::Role::Tool`]).
//!
//! Every flag has a `CHATD_*` environment fallback ([`config`]); logs go to
//! standard error ([`logging`]), at `warn` by default for `chatd chat`.

mod chat_cli;
mod cluster;
mod config;
mod database;
mod embedded_pg;
mod http_server;
mod logging;
mod serve;
mod shutdown;
mod token;
mod user;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sqlx::postgres::PgPoolOptions;

use crate::config::{LogFormat, ServeArgs};
use crate::token::TokenCommand;
use crate::user::UserCommand;

/// chatd: durable, multi-replica LLM chat agents on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "chatd", version, about)]
struct Cli {
    /// Log format on standard error. The filter comes from CHATD_LOG, else
    /// RUST_LOG, else `info` (`warn` for `chatd chat`).
    #[arg(
        long,
        global = true,
        env = "CHATD_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Human
    )]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a replica: the HTTP API, with an embedded PostgreSQL unless
    /// --postgres-url is given. Stops gracefully on SIGTERM or SIGINT.
    Serve(Box<ServeArgs>),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage users' sign-in passwords.
    #[command(subcommand)]
    User(UserCommand),
    /// Apply the database migrations and exit.
    Migrate {
        /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/chatd.
        #[arg(long, env = "CHATD_POSTGRES_URL", hide_env_values = true)]
        postgres_url: config::PostgresUrl,
    },
    /// Talk to a running server: list chats, start one or send a message
    /// and stream the reply, watch a chat live, interrupt it.
    Chat(chat_cli::ChatArgs),
    /// Print a user's usage this month against their limits (spend and
    /// tokens against the monthly budgets, running chats, stored files),
    /// from a running server (--url/CHATD_URL, --token/CHATD_TOKEN).
    Usage(chat_cli::UsageArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The client prints replies on the terminal: no INFO noise there.
    let default_filter = match cli.command {
        Command::Chat(_)
        | Command::Usage(_)
        | Command::Token(TokenCommand::List(_) | TokenCommand::Revoke(_)) => logging::CLIENT_FILTER,
        _ => logging::DEFAULT_FILTER,
    };
    if let Err(err) = logging::init(cli.log_format, default_filter) {
        eprintln!("chatd: {err:#}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Token(TokenCommand::List(args)) => return chat_cli::token_list(args).await,
        Command::Token(TokenCommand::Revoke(args)) => return chat_cli::token_revoke(args).await,
        Command::Token(command) => token::run(command).await,
        Command::User(command) => user::run(command).await,
        Command::Migrate { postgres_url } => migrate(&postgres_url).await,
        Command::Chat(args) => return chat_cli::run(args).await,
        Command::Usage(args) => return chat_cli::usage(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn migrate(postgres_url: &str) -> anyhow::Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(postgres_url)
        .await
        .with_context(|| format!("connecting to {}", database::redact(postgres_url)))?;
    chatd_store::migrate(&pool)
        .await
        .context("applying migrations")?;
    let applied = chatd_store::migrations::applied_count(&pool).await?;
    println!("migrations applied: {applied}");
    Ok(())
}
