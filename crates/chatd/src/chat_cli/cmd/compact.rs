//! `chatd chat compact CHAT`: `POST /chats/{chat}/compact`, then the
//! outcome once the worker is done (API.md "Context management").

use std::process::ExitCode;
use std::time::{Duration, Instant};

use chatd_core::ChatStatus;
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::{EXIT_ERROR, render, wire};

/// How long `compact` waits for the worker, in seconds.
const WAIT: Duration = Duration::from_secs(3600);
/// How often `compact` reads the chat while it waits.
const POLL: Duration = Duration::from_millis(250);

/// Compact an idle chat's history now: the model summarises all but
/// the most recent messages, which the model then reads instead of
/// them (the messages themselves stay). Waits for it and prints the
/// outcome and the context's new size. Exit 1 when the chat ends in
/// error; 409 errors (busy, nothing to compact) are printed.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The chat id.
    chat: Uuid,
    /// Do not wait for the compaction.
    #[arg(long)]
    no_watch: bool,
}

impl CompactArgs {
    /// Requests the compaction, then (unless `--no-watch`) polls the chat
    /// until the worker is done and prints the newest compaction's outcome
    /// and the context's size.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let chat = self.chat;
        let requested: wire::Chat = client
            .call(Method::POST, &format!("/chats/{chat}/compact"), None)
            .await?;
        if self.no_watch {
            stdout(format!("{}\n", requested.status))?;
            return Ok(ExitCode::SUCCESS);
        }
        let deadline = Instant::now() + WAIT;
        let done = loop {
            let now: wire::Chat = client
                .call(Method::GET, &format!("/chats/{chat}"), None)
                .await?;
            if now.status != ChatStatus::Running || Instant::now() > deadline {
                break now;
            }
            tokio::time::sleep(POLL).await;
        };
        if let Some(error) = &done.last_error
            && done.status == ChatStatus::Error
        {
            eprintln!(
                "chatd: the compaction failed: {}",
                wire::describe_error(error)
            );
            return Ok(ExitCode::from(EXIT_ERROR));
        }
        let page: Value = client
            .call(
                Method::GET,
                &format!("/chats/{chat}/messages?limit=10&before_id=9223372036854775807"),
                None,
            )
            .await?;
        let outcome = page["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|p| p["type"] == "tool-result" && p["tool_name"] == render::COMPACTION_TOOL)
            .map(|p| render::describe_compaction(&p["result"], p["is_error"] == true))
            .unwrap_or_else(|| format!("[status: {}]", done.status));
        let size = done
            .context
            .as_ref()
            .map(wire::describe_context)
            .unwrap_or_default();
        stdout(format!("{outcome}\n{size}\n"))?;
        Ok(ExitCode::SUCCESS)
    }
}
