//! `chatd chat share|unshare CHAT USER` and `chatd chat shares CHAT`: the
//! chat's read-only shares, `POST|GET /chats/{chat}/shares` and `DELETE
//! /chats/{chat}/shares/{user}` (API.md "Sign-in, search, sharing and
//! export"). Owner only.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::client::Client;
use crate::chat_cli::output::stdout;

/// Share a chat, read-only, with another user: they see it live (in their
/// `list --shared`, in search) and cannot send or change anything.
#[derive(Debug, Args)]
pub struct ShareArgs {
    /// The chat id.
    chat: Uuid,
    /// Who to share it with: a username (or a user id).
    user: String,
}

/// Stop sharing a chat with a user: it answers them 404 from then on and
/// their open streams of it close.
#[derive(Debug, Args)]
pub struct UnshareArgs {
    /// The chat id.
    chat: Uuid,
    /// Who to stop sharing it with: a username (or a user id).
    user: String,
}

/// List who a chat is shared with: user id, username, since when.
#[derive(Debug, Args)]
pub struct SharesArgs {
    /// The chat id.
    chat: Uuid,
    /// Print the API's JSON array instead.
    #[arg(long)]
    json: bool,
}

/// One share of `GET /chats/{chat}/shares`.
#[derive(Debug, Deserialize)]
struct Share {
    user_id: String,
    /// The user's name (when the server sends it).
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    created_at: String,
}

impl ShareArgs {
    /// Shares the chat and prints `shared CHAT with USER`.
    ///
    /// # Errors
    /// A blank user (nothing is sent); as
    /// [`crate::chat_cli::client::Client::call`] (no such user is the
    /// server's `400` naming the field; someone else's chat its `404`);
    /// standard output cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let user = self.user.trim();
        anyhow::ensure!(!user.is_empty(), "the user is empty");
        let body = match user.parse::<Uuid>() {
            Ok(id) => json!({ "user_id": id }),
            Err(_) => json!({ "username": user }),
        };
        let share: Value = session
            .client
            .call(
                Method::POST,
                &format!("/chats/{}/shares", self.chat),
                Some(&body),
            )
            .await?;
        let share: Share = serde_json::from_value(share).context("decoding the share")?;
        stdout(format!(
            "shared {} with {}\n",
            self.chat,
            describe_user(&share, user)
        ))?;
        Ok(ExitCode::SUCCESS)
    }
}

impl UnshareArgs {
    /// Revokes the share and prints `unshared CHAT with USER`.
    ///
    /// # Errors
    /// The chat is not shared with that user; as
    /// [`crate::chat_cli::client::Client::call`]; standard output cannot
    /// be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let user = self.user.trim();
        anyhow::ensure!(!user.is_empty(), "the user is empty");
        let user_id = match user.parse::<Uuid>() {
            Ok(id) => id.to_string(),
            Err(_) => shared_user_id(client, self.chat, user).await?,
        };
        client
            .call_no_content(
                Method::DELETE,
                &format!("/chats/{}/shares/{user_id}", self.chat),
            )
            .await?;
        stdout(format!("unshared {} with {user}\n", self.chat))?;
        Ok(ExitCode::SUCCESS)
    }
}

impl SharesArgs {
    /// Prints one line per share: `USER_ID  USERNAME  CREATED_AT`; `not
    /// shared with anyone` on standard error when there are none.
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let shares: Value = session
            .client
            .call(Method::GET, &format!("/chats/{}/shares", self.chat), None)
            .await?;
        if self.json {
            stdout(format!("{shares}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let shares: Vec<Share> = serde_json::from_value(shares).context("decoding the shares")?;
        if shares.is_empty() {
            eprintln!("chat {} is not shared with anyone", self.chat);
            return Ok(ExitCode::SUCCESS);
        }
        stdout(format_shares(&shares))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The id of the user named `username` among the chat's shares (the
/// shares list names them); else as [`Client::user_path`] finds it (a
/// lookup only admins may make).
///
/// # Errors
/// The chat is not shared with `username`, or a lookup fails.
async fn shared_user_id(client: &Client, chat: Uuid, username: &str) -> anyhow::Result<String> {
    let shares: Vec<Share> = client
        .call(Method::GET, &format!("/chats/{chat}/shares"), None)
        .await?;
    if let Some(share) = shares
        .iter()
        .find(|s| s.username.as_deref() == Some(username))
    {
        return Ok(share.user_id.clone());
    }
    if shares.iter().all(|s| s.username.is_some()) {
        anyhow::bail!("chat {chat} is not shared with {username:?}");
    }
    client.user_path(username).await
}

/// `USERNAME (user ID)`, or the user as given when the server sent no name.
fn describe_user(share: &Share, given: &str) -> String {
    let name = share.username.as_deref().unwrap_or(given);
    if name == share.user_id {
        name.to_owned()
    } else {
        format!("{name} (user {})", share.user_id)
    }
}

/// One line per share: user id, username (padded to the longest; `-`
/// when unknown), `created_at` to the second.
fn format_shares(shares: &[Share]) -> String {
    let width = shares
        .iter()
        .map(|s| s.username.as_deref().unwrap_or("-").chars().count())
        .max()
        .unwrap_or(0);
    shares
        .iter()
        .map(|s| {
            let created = match s.created_at.split_once('.') {
                Some((seconds, _)) => format!("{seconds}Z"),
                None => s.created_at.clone(),
            };
            format!(
                "{}  {:<width$}  {created}\n",
                s.user_id,
                s.username.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_print_one_aligned_line_each() {
        let shares: Vec<Share> = serde_json::from_value(json!([
            {"user_id": "u1", "username": "bob", "created_at": "2026-01-02T03:04:05.123Z"},
            {"user_id": "u2", "username": "carolyn", "created_at": "2026-01-02T03:04:06Z"},
            {"user_id": "u3", "created_at": "2026-01-02T03:04:07Z"},
        ]))
        .unwrap();
        assert_eq!(
            format_shares(&shares),
            "u1  bob      2026-01-02T03:04:05Z\n\
             u2  carolyn  2026-01-02T03:04:06Z\n\
             u3  -        2026-01-02T03:04:07Z\n"
        );
        assert_eq!(describe_user(&shares[0], "bob"), "bob (user u1)");
        assert_eq!(describe_user(&shares[2], "dave"), "dave (user u3)");
    }
}
