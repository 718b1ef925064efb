//! The `chatd` binary.
//!
//! Subcommands:
//! - `chatd migrate --postgres-url URL`: applies the embedded migrations and
//!   exits (API.md "Running a replica").

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sqlx::postgres::PgPoolOptions;

/// chatd: durable, multi-replica LLM chat agents on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "chatd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the database migrations and exit.
    Migrate {
        /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/chatd.
        #[arg(long, env = "CHATD_POSTGRES_URL")]
        postgres_url: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate { postgres_url } => {
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .connect(&postgres_url)
                .await
                .with_context(|| format!("connecting to {}", redact(&postgres_url)))?;
            chatd_store::migrate(&pool)
                .await
                .context("applying migrations")?;
            let applied: i64 =
                sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
                    .fetch_one(&pool)
                    .await?;
            println!("migrations applied: {applied}");
        }
    }
    Ok(())
}

/// Hides a password in a URL for logs.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}
