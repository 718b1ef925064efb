//! `chatd chat watch CHAT`: the whole conversation, then the chat live
//! (API.md "Stream (WebSocket)").

use std::process::ExitCode;

use clap::Args;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::output::style;
use crate::chat_cli::render::{Mode, Renderer};

/// Print a chat's messages and follow it live until Ctrl-C.
///
/// Messages are role-prefixed on standard output (`user> `,
/// `assistant> `, `tool> `); status changes, errors, retries and
/// pending tool calls go to standard error. Reconnects by itself.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The chat id.
    chat: Uuid,
    /// Only messages with a larger id.
    #[arg(long, value_name = "N")]
    after_id: Option<i64>,
    /// Stop once the chat is idle (exit code as for `new`).
    #[arg(long)]
    once: bool,
}

impl WatchArgs {
    /// Follows the chat until Ctrl-C (exit 0) or, with `--once`, until it
    /// is idle (exit codes as for `new`).
    ///
    /// # Errors
    /// The chat cannot be read (`401`, `404`, unreachable server), or as
    /// [`follow`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let chat = self.chat.to_string();
        // A clear 401/404 before the stream, whose upgrade errors are
        // terser.
        session.client.chat(&chat).await?;
        let renderer = Renderer::new(Mode::Watch, style(true), &chat, session.hint_url());
        let until = if self.once { Until::Idle } else { Until::CtrlC };
        follow(
            &session.client,
            &chat,
            self.after_id.unwrap_or(0),
            renderer,
            until,
        )
        .await
    }
}
