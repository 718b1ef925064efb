//! `chatd chat export CHAT [--format markdown|json] [-o FILE]`: `GET
//! /chats/{chat}/export?format=` (API.md "Sign-in, search, sharing and
//! export").

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use uuid::Uuid;

use super::Session;

/// The formats of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// A readable Markdown transcript.
    Markdown,
    /// chatd's JSON export, which `chatd chat import` reads back.
    Json,
}

impl ExportFormat {
    /// The `format` query value.
    fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Markdown => "markdown",
            ExportFormat::Json => "json",
        }
    }
}

/// Export a chat's visible history (its active branch) as Markdown or as
/// chatd's JSON export (which `import` reads back), to standard output or
/// to a file.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The chat id.
    chat: Uuid,
    /// The format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Markdown)]
    format: ExportFormat,
    /// Write the export to FILE (replacing it) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

impl ExportArgs {
    /// Fetches the export and writes it unchanged to standard output, or
    /// to `--output` (then `wrote FILE (N bytes)` on standard error).
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::get_bytes`]; the file or
    /// standard output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let bytes = session
            .client
            .get_bytes(&format!(
                "/chats/{}/export?format={}",
                self.chat,
                self.format.as_str()
            ))
            .await?;
        match &self.output {
            Some(path) => {
                tokio::fs::write(path, &bytes)
                    .await
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            }
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
