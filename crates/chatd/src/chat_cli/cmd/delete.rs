//! `chatd chat delete CHAT [--yes]`: `DELETE /chats/{chat}` (API.md "Chat
//! routes"), after a confirmation on a terminal.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;

/// Exit code of a deletion refused for want of a confirmation (bad usage).
const EXIT_NOT_CONFIRMED: u8 = 2;

/// Delete a chat for good, with all its messages (a root chat with its
/// sub-agent chats). Only an idle or archived chat can be deleted. Asks
/// for confirmation on a terminal; elsewhere (a script, a pipe) --yes is
/// required.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The chat id.
    chat: Uuid,
    /// Delete without asking.
    #[arg(long, short = 'y')]
    yes: bool,
}

impl DeleteArgs {
    /// Deletes the chat and prints `deleted CHAT: TITLE`.
    ///
    /// Without `--yes`: when standard input is a terminal, asks `Delete
    /// chat "TITLE" (CHAT) ...? [y/N]` on standard error and deletes only on
    /// `y` or `yes`; otherwise prints why on standard error and exits 2,
    /// deleting nothing.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`] (an unknown chat is
    /// `404` before anything is asked; a busy one the server's `409`); the
    /// answer cannot be read; standard output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let chat = client.chat(&self.chat.to_string()).await?;
        if !self.yes {
            if !std::io::stdin().is_terminal() {
                eprintln!(
                    "chatd: not deleting chat {} without a confirmation: standard input is \
                     not a terminal; pass --yes to delete it",
                    chat.id
                );
                return Ok(ExitCode::from(EXIT_NOT_CONFIRMED));
            }
            let question = format!(
                "Delete chat {:?} ({}) and all its messages for good? [y/N] ",
                chat.title, chat.id
            );
            if !confirm(&question)? {
                eprintln!("not deleted");
                return Ok(ExitCode::from(EXIT_NOT_CONFIRMED));
            }
        }
        client
            .call_no_content(Method::DELETE, &format!("/chats/{}", chat.id))
            .await?;
        stdout(format!("deleted {}: {}\n", chat.id, chat.title))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Asks `question` on standard error and reads a line of standard input:
/// whether it is `y` or `yes` (any case, surrounding blanks ignored).
///
/// # Errors
/// Standard error cannot be written or standard input read.
fn confirm(question: &str) -> anyhow::Result<bool> {
    let mut err = std::io::stderr().lock();
    err.write_all(question.as_bytes())?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(is_yes(&answer))
}

/// Whether `answer` means yes: `y` or `yes`, any case, blanks ignored.
fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_y_or_yes_confirms() {
        for yes in ["y\n", "Y", " yes \n", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yep", "y es"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
