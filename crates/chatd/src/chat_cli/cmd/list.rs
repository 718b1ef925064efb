//! `chatd chat list`: the caller's chats, newest first (`GET /chats`;
//! `?archived=true`, or `?shared=true` for the chats shared with them).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire;

/// List chats, newest first: id, status, updated_at, title.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// List archived chats instead.
    #[arg(long, conflicts_with = "shared")]
    archived: bool,
    /// List the chats other users share with you (read-only) instead.
    #[arg(long)]
    shared: bool,
    /// Print the API's JSON array instead.
    #[arg(long)]
    json: bool,
    /// How many chats (1..=100).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: u32,
}

impl ListArgs {
    /// Prints the list (or the API's JSON with `--json`).
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let mut path = format!("/chats?limit={}", self.limit);
        if self.archived {
            path.push_str("&archived=true");
        }
        if self.shared {
            path.push_str("&shared=true");
        }
        let chats: Value = session.client.call(Method::GET, &path, None).await?;
        if self.json {
            stdout(format!("{chats}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let chats: Vec<wire::Chat> =
            serde_json::from_value(chats).context("decoding the chat list")?;
        stdout(format_chat_list(&chats))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// One line per chat: id, status (padded to the longest), `updated_at`
/// to the second, title (`list` and `children`).
pub fn format_chat_list(chats: &[wire::Chat]) -> String {
    let width = chats
        .iter()
        .map(|c| c.status.as_str().len())
        .max()
        .unwrap_or(0);
    chats
        .iter()
        .map(|c| {
            // `2025-01-02T03:04:05.123456Z` → `2025-01-02T03:04:05Z`.
            let updated = match c.updated_at.split_once('.') {
                Some((seconds, _)) => format!("{seconds}Z"),
                None => c.updated_at.clone(),
            };
            format!(
                "{}  {:<width$}  {updated}  {}\n",
                c.id,
                c.status.as_str(),
                c.title
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_chat_list_aligns_status_and_trims_fractional_seconds() {
        let chats: Vec<wire::Chat> = serde_json::from_value(json!([
            {"id": "a", "title": "First", "status": "requires_action",
             "updated_at": "2025-01-02T03:04:05.123456Z"},
            {"id": "b", "title": "Second", "status": "waiting",
             "updated_at": "2025-01-02T03:04:06Z"},
        ]))
        .unwrap();
        assert_eq!(
            format_chat_list(&chats),
            "a  requires_action  2025-01-02T03:04:05Z  First\n\
             b  waiting          2025-01-02T03:04:06Z  Second\n"
        );
    }
}
