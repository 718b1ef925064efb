//! `chatd token list [--user USER] [--json]`: `GET /users/{user}/tokens`,
//! a user's API tokens (id, created, expires, last used, name; never the
//! token), API.md "Limits, budgets and the token lifecycle". `USER` as for
//! `chatd usage`; another user's tokens need an admin's token.

use std::process::ExitCode;

use chatd_api::users::Token;
use clap::Args;

use crate::chat_cli::ServerArgs;
use crate::chat_cli::cmd::show_user_resource;
use crate::chat_cli::output::{rfc3339, utc_minute};

/// Flags of `chatd token list`.
#[derive(Debug, Args)]
pub struct TokenListArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Whose tokens: `me`, a user id, or a username (another user's need an
    /// admin's token).
    #[arg(long, value_name = "USER", default_value = "me")]
    user: String,
    /// Print the API's JSON array instead.
    #[arg(long)]
    json: bool,
}

/// Runs `chatd token list`.
pub async fn run(args: TokenListArgs) -> ExitCode {
    let format = |tokens: &Vec<Token>| format_tokens(tokens);
    show_user_resource(
        &args.server,
        &args.user,
        "tokens",
        args.json,
        "the token list",
        format,
    )
    .await
}

/// The token list: a header, then one line per token (id, created,
/// expires, last used, name).
fn format_tokens(tokens: &[Token]) -> String {
    if tokens.is_empty() {
        return "no tokens\n".to_owned();
    }
    let mut out = format!(
        "{:<36}  {:<20}  {:<20}  {:<20}  NAME\n",
        "ID", "CREATED", "EXPIRES", "LAST USED"
    );
    for t in tokens {
        let or_never = |v: &Option<_>| {
            v.as_ref()
                .map_or("never".to_owned(), |t| utc_minute(&rfc3339(t)))
        };
        out.push_str(&format!(
            "{:<36}  {:<20}  {:<20}  {:<20}  {}\n",
            t.id,
            utc_minute(&rfc3339(&t.created_at)),
            or_never(&t.expires_at),
            or_never(&t.last_used_at),
            t.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn the_token_list_aligns_its_columns_and_says_never() {
        let id = Uuid::nil();
        let text = format_tokens(&[Token {
            id,
            name: "laptop CLI".into(),
            created_at: "2026-12-06T14:03:59Z".parse().unwrap(),
            expires_at: Some("2027-01-05T14:03:59Z".parse().unwrap()),
            last_used_at: None,
        }]);
        assert_eq!(
            text,
            format!(
                "ID                                    CREATED               EXPIRES               LAST USED             NAME\n\
                 {id}  2026-12-06 14:03 UTC  2027-01-05 14:03 UTC  never                 laptop CLI\n"
            )
        );
        assert_eq!(format_tokens(&[]), "no tokens\n");
    }
}
