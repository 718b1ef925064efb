//! `chatd token create --user NAME [--admin] [--lifetime D]`: prints a new
//! API token for a user, creating the user if missing (API.md,
//! "Authentication"). A member's token always expires (API.md "Limits,
//! budgets and the token lifecycle"): after `--lifetime`, else after 30
//! days (the default `--max-member-token-lifetime`); an admin's lasts
//! `--lifetime`, else forever.
//!
//! It works on the database of `--postgres-url`, or on the embedded cluster
//! of the data directory (`--data-dir`, `CHATD_DATA_DIR`, else
//! `~/.local/share/chatd`, the default of `chatd serve` and
//! `scripts/run.sh`): the cluster of a running `chatd serve` when there is
//! one, otherwise it starts the existing cluster and stops it again. A
//! data directory without a cluster is refused with a message naming it;
//! no second database is ever created, whose tokens the running server
//! would reject ([`crate::database::Role::Tool`]).

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::config::DatabaseArgs;
use crate::database::{Database, Role};

/// `chatd token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token for a user (creating the user if missing) and
    /// print it on standard output. The token is shown only this once.
    Create(CreateArgs),
    /// List a user's API tokens over HTTP (--url/CHATD_URL,
    /// --token/CHATD_TOKEN): id, created, expires, last used, name.
    List(crate::chat_cli::TokenListArgs),
    /// Revoke an API token over HTTP (--url/CHATD_URL,
    /// --token/CHATD_TOKEN): it answers 401 from then on and its open
    /// streams close.
    Revoke(crate::chat_cli::TokenRevokeArgs),
}

/// Flags of `chatd token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// User name (1 to 64 characters).
    #[arg(long, value_name = "NAME")]
    pub user: String,
    /// Make the user an admin (creating it as one, or promoting an existing
    /// member; never demotes).
    #[arg(long)]
    pub admin: bool,
    /// How long the token lives (`90m`, `12h`, `30d`). Default: 30 days
    /// for a member's token, no expiry for an admin's.
    #[arg(long, value_name = "DURATION", value_parser = crate::config::parse_positive_duration)]
    pub lifetime: Option<std::time::Duration>,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// Runs a `chatd token` command.
///
/// # Errors
/// When the database cannot be opened or migrated, or the token cannot be
/// created.
pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        // Clients of a running server (main.rs runs them directly, for
        // their exit code and error format).
        TokenCommand::List(args) => exit_status(crate::chat_cli::token_list(args).await),
        TokenCommand::Revoke(args) => exit_status(crate::chat_cli::token_revoke(args).await),
        TokenCommand::Create(args) => {
            let database = Database::open(&args.database, Role::Tool, 2).await?;
            let created = async {
                chatd_store::migrate(&database.pool)
                    .await
                    .context("applying migrations")?;
                chatd_api::auth::create_token_with_lifetime(
                    &database.pool,
                    &args.user,
                    args.admin,
                    args.lifetime,
                )
                .await
                .with_context(|| format!("creating a token for {:?}", args.user))
            }
            .await;
            let closed = database.close().await;
            let token = created?;
            println!("{token}");
            if let Err(err) = closed {
                // The token exists and was printed; only the cleanup failed.
                tracing::warn!("{err:#}");
            }
            Ok(())
        }
    }
}

/// `Ok` for a successful client command (which printed its own error).
fn exit_status(code: std::process::ExitCode) -> anyhow::Result<()> {
    if code == std::process::ExitCode::SUCCESS {
        Ok(())
    } else {
        anyhow::bail!("the command failed")
    }
}
