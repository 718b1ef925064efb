//! `chatd chat import FILE`: `POST /chats/import` with a chatd JSON export
//! (API.md "Sign-in, search, sharing and export").

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// Import a chat from chatd's JSON export (`export --format json`) as a
/// new idle chat of yours, with the same visible history (new ids). Its
/// id is printed.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSON export; `-` reads it from standard input.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print the new chat as the API's JSON instead of its id.
    #[arg(long)]
    json: bool,
}

impl ImportArgs {
    /// Posts the export and prints the new chat's id (its title on
    /// standard error), or its JSON with `--json`.
    ///
    /// # Errors
    /// The file cannot be read or is not JSON (nothing is sent); as
    /// [`crate::chat_cli::client::Client::call`] (an export the server
    /// does not take is its `400` naming the field); standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let (text, shown) = if self.file.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the export from standard input")?;
            (text, "standard input".to_owned())
        } else {
            let text = tokio::fs::read_to_string(&self.file)
                .await
                .with_context(|| format!("reading {}", self.file.display()))?;
            (text, self.file.display().to_string())
        };
        let export: Value = serde_json::from_str(&text).with_context(|| {
            format!("{shown} is not JSON (import takes `chatd chat export --format json`)")
        })?;
        let chat: Value = session
            .client
            .call(Method::POST, "/chats/import", Some(&export))
            .await?;
        if self.json {
            stdout(format!("{chat}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let chat: wire::Chat = serde_json::from_value(chat).context("decoding the new chat")?;
        eprintln!("imported: {}", chat.title);
        stdout(format!("{}\n", chat.id))?;
        Ok(ExitCode::SUCCESS)
    }
}
