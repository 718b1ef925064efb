//! `chatd chat send CHAT`: `POST /chats/{chat}/messages` with a busy
//! behaviour, then the reply to this message streamed (API.md "Busy
//! behaviours and the queue").

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use reqwest::Method;
use serde_json::json;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::input::message_content;
use crate::chat_cli::output::reply_renderer;
use crate::chat_cli::wire::{IdOnly, QueuedPosition, SendResponse};

/// Send a message to a chat and stream the reply.
///
/// A busy chat queues the message (or, with --interrupt, interrupts the
/// running turn; with --steer, the running turn reads it at its next
/// step; with --reject, a busy chat refuses it); the reply streamed is
/// the one to this message.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The chat id.
    chat: Uuid,
    /// Interrupt the running turn instead of queueing behind it.
    #[arg(long, conflicts_with_all = ["steer", "reject"])]
    interrupt: bool,
    /// Steer the running turn: the model reads the message at its next
    /// step, without the turn being interrupted.
    #[arg(long, conflicts_with = "reject")]
    steer: bool,
    /// Refuse to send to a busy chat (exit 1 naming its status).
    #[arg(long)]
    reject: bool,
    /// Do not wait for the reply.
    #[arg(long)]
    no_watch: bool,
    /// Attach a file (at most 10 MiB; repeatable): uploaded first, then
    /// sent with the message, which may then be empty.
    #[arg(long = "file", value_name = "PATH")]
    files: Vec<std::path::PathBuf>,
    /// The message; `-` or nothing reads it from standard input.
    #[arg(value_name = "TEXT")]
    text: Vec<String>,
}

impl SendArgs {
    /// The `busy_behavior` of the request.
    fn busy_behavior(&self) -> &'static str {
        match (self.interrupt, self.steer, self.reject) {
            (true, _, _) => "interrupt",
            (_, true, _) => "steer",
            (_, _, true) => "reject",
            _ => "queue",
        }
    }

    /// Sends the message, says whether it was sent or queued on standard
    /// error and, unless `--no-watch`, streams the reply to it.
    ///
    /// # Errors
    /// As [`message_content`], [`crate::chat_cli::client::Client::call`]
    /// and [`follow`]; an answer with neither a message nor a queued
    /// message.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let chat = self.chat.to_string();
        let busy_behavior = self.busy_behavior();
        let content = message_content(client, &self.text, &self.files).await?;
        // The chat's visible message count before the send: a message sent
        // at once follows them (a busy chat queues it instead).
        let count_before = client.chat(&chat).await?.message_count;
        // A queued message's reply comes after the current turn's messages:
        // follow from here, and print only what follows its promotion.
        let before = if self.no_watch {
            0
        } else {
            client.newest_message_id(&chat).await?
        };
        let body = json!({
            "content": content,
            "busy_behavior": busy_behavior,
        });
        let sent: SendResponse = client
            .call(
                Method::POST,
                &format!("/chats/{chat}/messages"),
                Some(&body),
            )
            .await?;
        let (awaiting_queued, after_id, own) =
            match (sent.queued, sent.queued_message, sent.message) {
                (true, Some(queued), _) => {
                    let place = queued_place(&chat, queued);
                    if busy_behavior == "interrupt" {
                        eprintln!("{place}; interrupting the running turn");
                    } else if busy_behavior == "steer" {
                        eprintln!("{place}; the running turn reads it at its next step");
                    } else {
                        eprintln!("{place}, behind the running turn");
                    }
                    (Some(queued.id), before, None)
                }
                (_, _, Some(message)) => {
                    eprintln!(
                        "{}",
                        sent_place(&chat, message.id, count_before, &sent.messages)
                    );
                    (None, message.id, Some(message.id))
                }
                _ => bail!("the server's answer has neither a message nor a queued message"),
            };
        if self.no_watch {
            return Ok(ExitCode::SUCCESS);
        }
        let mut renderer = reply_renderer(awaiting_queued, &chat, session.hint_url());
        if let Some(id) = own {
            renderer = renderer.with_own_message(id);
        }
        follow(client, &chat, after_id, renderer, Until::Idle).await
    }
}

/// What `send` says about a message sent at once: `sent to chat C:
/// message N of the chat (message id I)`, N being its 1-based place among
/// the chat's visible messages: `count_before` (the count before the send)
/// plus its place among `inserted` (the rows the send inserted, synthetic
/// tool results first). Without a count (an older server): `sent to chat
/// C: message id I`.
fn sent_place(chat: &str, id: i64, count_before: Option<i64>, inserted: &[IdOnly]) -> String {
    let index = inserted.iter().position(|m| m.id == id);
    match (count_before, index) {
        (Some(count), Some(index)) => {
            let n = count + i64::try_from(index).unwrap_or(0) + 1;
            format!("sent to chat {chat}: message {n} of the chat (message id {id})")
        }
        (Some(count), None) => {
            format!(
                "sent to chat {chat}: message {} of the chat (message id {id})",
                count + 1
            )
        }
        (None, _) => format!("sent to chat {chat}: message id {id}"),
    }
}

/// What `send` says about a queued message: `queued in chat C at position
/// P of the queue (queued message id I)`, P 1-based (1 = next).
fn queued_place(chat: &str, queued: QueuedPosition) -> String {
    match queued.position {
        Some(position) => format!(
            "queued in chat {chat} at position {} of the queue (queued message id {})",
            position + 1,
            queued.id
        ),
        None => format!("queued in chat {chat} (queued message id {})", queued.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[i64]) -> Vec<IdOnly> {
        ids.iter().map(|&id| IdOnly { id }).collect()
    }

    #[test]
    fn a_sent_message_is_placed_after_the_chats_messages_and_the_rows_inserted_before_it() {
        assert_eq!(
            sent_place("c", 41, Some(6), &ids(&[41])),
            "sent to chat c: message 7 of the chat (message id 41)"
        );
        // Two synthetic tool results were committed first.
        assert_eq!(
            sent_place("c", 90, Some(4), &ids(&[88, 89, 90])),
            "sent to chat c: message 7 of the chat (message id 90)"
        );
        assert_eq!(
            sent_place("c", 5, None, &ids(&[5])),
            "sent to chat c: message id 5"
        );
    }

    #[test]
    fn a_queued_message_names_its_one_based_place_in_the_queue() {
        let queued = QueuedPosition {
            id: 12,
            position: Some(1),
        };
        assert_eq!(
            queued_place("c", queued),
            "queued in chat c at position 2 of the queue (queued message id 12)"
        );
        let queued = QueuedPosition {
            id: 12,
            position: None,
        };
        assert_eq!(
            queued_place("c", queued),
            "queued in chat c (queued message id 12)"
        );
    }
}
