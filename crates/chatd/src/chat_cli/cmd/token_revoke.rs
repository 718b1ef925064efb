//! `chatd token revoke ID [--user USER]`: `DELETE
//! /users/{user}/tokens/{id}` (API.md "Limits, budgets and the token
//! lifecycle"). `USER` as for `chatd usage`; another user's token needs an
//! admin's token.

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use uuid::Uuid;

use crate::chat_cli::ServerArgs;
use crate::chat_cli::output::{report, stdout};

/// Flags of `chatd token revoke`.
#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The token's id (`chatd token list` shows it).
    id: Uuid,
    /// Whose token: `me`, a user id, or a username (another user's needs an
    /// admin's token).
    #[arg(long, value_name = "USER", default_value = "me")]
    user: String,
}

/// Runs `chatd token revoke`.
pub async fn run(args: TokenRevokeArgs) -> ExitCode {
    report(async {
        let client = args.server.client()?;
        let user = client.user_path(&args.user).await?;
        client
            .call_no_content(Method::DELETE, &format!("/users/{user}/tokens/{}", args.id))
            .await?;
        stdout(format!("revoked token {}\n", args.id))
    })
    .await
}
