//! `chatd chat queue list|edit|move`: a chat's queued messages (API.md
//! "Busy behaviours and the queue").

use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::input::message_text;
use crate::chat_cli::output::stdout;

/// List, edit or reorder a chat's queued messages.
#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(subcommand)]
    command: QueueCommand,
}

/// The subcommands of `chatd chat queue`.
#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// Print the queue, next first: position, id, `steer` when it steers
    /// the running turn, and the text.
    List {
        /// The chat id.
        chat: Uuid,
    },
    /// Replace a queued message's text, or mark it (not) steering; prints
    /// it as `list` does.
    Edit {
        /// The chat id.
        chat: Uuid,
        /// The queued message id (`list` shows it).
        queued: i64,
        /// Make it a steer message.
        #[arg(long, conflicts_with = "no_steer")]
        steer: bool,
        /// Make it an ordinary queued message.
        #[arg(long)]
        no_steer: bool,
        /// The new text; nothing keeps the text (`-` reads standard input).
        #[arg(value_name = "TEXT")]
        text: Vec<String>,
    },
    /// Move a queued message to POSITION (0 = next; past the end = last);
    /// prints the new queue.
    Move {
        /// The chat id.
        chat: Uuid,
        /// The queued message id (`list` shows it).
        queued: i64,
        /// The 0-based position in the queue.
        position: u32,
    },
}

impl QueueArgs {
    /// Lists, edits or moves, then prints the queued messages concerned.
    ///
    /// # Errors
    /// `edit` with nothing to change; as
    /// [`crate::chat_cli::client::Client::call`]; standard output cannot be
    /// written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let queued: Vec<Value> = match self.command {
            QueueCommand::List { chat } => {
                let page: Value = client
                    .call(
                        Method::GET,
                        &format!("/chats/{chat}/messages?limit=1"),
                        None,
                    )
                    .await?;
                page["queued_messages"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            }
            QueueCommand::Edit {
                chat,
                queued,
                steer,
                no_steer,
                text,
            } => {
                let mut body = json!({});
                if !text.is_empty() {
                    body["content"] = json!([{"type": "text", "text": message_text(&text)?}]);
                }
                if steer || no_steer {
                    body["steer"] = json!(steer);
                }
                if body.as_object().is_some_and(serde_json::Map::is_empty) {
                    bail!("nothing to change: give a TEXT, --steer or --no-steer");
                }
                let edited: Value = client
                    .call(
                        Method::PATCH,
                        &format!("/chats/{chat}/queue/{queued}"),
                        Some(&body),
                    )
                    .await?;
                vec![edited]
            }
            QueueCommand::Move {
                chat,
                queued,
                position,
            } => {
                client
                    .call(
                        Method::POST,
                        &format!("/chats/{chat}/queue/{queued}/move"),
                        Some(&json!({"position": position})),
                    )
                    .await?
            }
        };
        stdout(format_queue(&queued))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// One line per queued message: `position  id  [steer]  text`.
fn format_queue(queued: &[Value]) -> String {
    let mut out = String::new();
    for q in queued {
        let text: Vec<&str> = q["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect();
        let steer = if q["steer"].as_bool() == Some(true) {
            "steer "
        } else {
            ""
        };
        out.push_str(&format!(
            "{}\t{}\t{steer}{}\n",
            q["position"],
            q["id"],
            text.join(" ").replace('\n', " ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_prints_position_id_steer_and_one_line_of_text() {
        let queued = vec![
            json!({"id": 7, "position": 0, "steer": true, "content": [{"type": "text", "text": "use\ntabs"}]}),
            json!({"id": 5, "position": 1, "steer": false, "content": [{"type": "text", "text": "later"}]}),
        ];
        assert_eq!(format_queue(&queued), "0\t7\tsteer use tabs\n1\t5\tlater\n");
    }
}
