//! `chatd chat ...`, `chatd usage` and `chatd token list|revoke`: a
//! command-line client of a chatd server's API (API.md "Chat routes",
//! "Stream (WebSocket)" and "Limits, budgets and the token lifecycle").
//!
//! The server comes from `--url` / `CHATD_URL` (default
//! `http://127.0.0.1:3000`), the API token from `--token` / `CHATD_TOKEN`
//! (required). Each subcommand is one file of [`cmd`]: its flags, how it
//! builds its request and how it prints the answer (`list`, `children`,
//! `new`, `send`, `queue list|edit|move`, `watch`, `interrupt`, `compact`,
//! `clear-context`, `regenerate`, `branches`, `switch`, `fork`,
//! `tool-results`, `approve`, `deny`, `rename`, `archive`, `unarchive`,
//! `delete`, `export`, `import`, `search`, `share`, `unshare`, `shares`,
//! `files`, `cat`, `download`; and `usage`, `token list`, `token revoke`).
//!
//! `new`, `send` and `regenerate` stream the assistant's reply to standard
//! output as it is generated and exit when the chat is idle again; `watch` prints the
//! whole conversation and follows it live. Client-side ("dynamic") tools
//! (API.md `DynamicTool`) are offered with `new --tools`; when the model
//! calls one the chat stops in `requires_action`, the pending calls and the
//! command that answers them are printed on standard error, and
//! `tool-results` posts the outputs and streams the model's continuation as
//! `send` streams a reply. MCP tool calls that need approval (API.md "Tool
//! approval (human in the loop)") stop the chat the same way, listed as
//! `[needs approval]`; `approve` and `deny` answer them.
//!
//! Notices (the chat id, whether a message was queued, status changes,
//! errors, retries, pending tool calls, reasoning) go to standard error, so
//! standard output can be captured. The shared modules: [`client`] (the
//! HTTP calls and their error messages), [`follow`](mod@follow) (the stream
//! loop), [`render`] (what is printed, and how live parts and committed
//! messages are de-duplicated), [`wire`] (how the client decodes the
//! server's stream events and objects), [`input`] and [`output`].
//!
//! Exit codes: 0 done; 1 an error (the server's message on standard
//! error), including a chat that ends in `error`; 2 bad usage (and a
//! `delete` not confirmed);
//! [`EXIT_REQUIRES_ACTION`] (3) when the chat waits for client-side tool
//! results; [`EXIT_INTERRUPTED`] (130) when Ctrl-C stops a wait for a reply
//! (the chat goes on).

mod client;
mod cmd;
mod follow;
mod input;
mod output;
mod render;
mod wire;

pub use self::cmd::token_list::{TokenListArgs, run as token_list};
pub use self::cmd::token_revoke::{TokenRevokeArgs, run as token_revoke};
pub use self::cmd::usage::{UsageArgs, run as usage};

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use self::client::Client;
use self::cmd::{ChatCommand, Session};

/// Exit code of a failure (and of a chat that ends in `error`).
pub const EXIT_ERROR: u8 = 1;
/// Exit code when the chat ends in `requires_action`.
pub const EXIT_REQUIRES_ACTION: u8 = 3;
/// Exit code when Ctrl-C stops a wait for a reply.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The server URL when neither `--url` nor `CHATD_URL` gives one.
const DEFAULT_URL: &str = "http://127.0.0.1:3000";
/// The environment variable that gives the server URL.
const URL_ENV: &str = "CHATD_URL";

/// `chatd chat`: the server, the token and the subcommand. `Debug` prints
/// no token.
#[derive(Args)]
pub struct ChatArgs {
    /// Base URL of the chatd server.
    #[arg(long, global = true, env = URL_ENV, default_value = DEFAULT_URL)]
    url: String,

    /// API token (required; `chatd token create --user NAME` prints one).
    #[arg(long, global = true, env = "CHATD_TOKEN", hide_env_values = true)]
    token: Option<String>,

    #[command(subcommand)]
    command: ChatCommand,
}

impl std::fmt::Debug for ChatArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatArgs")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("command", &self.command)
            .finish()
    }
}

/// The server and the API token of `chatd usage` and `chatd token
/// list|revoke`. `Debug` prints no token.
#[derive(Clone, Args)]
pub struct ServerArgs {
    /// Base URL of the chatd server.
    #[arg(long, env = URL_ENV, default_value = DEFAULT_URL)]
    url: String,

    /// API token (required; `chatd token create --user NAME` prints one).
    #[arg(long, env = "CHATD_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl std::fmt::Debug for ServerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerArgs")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ServerArgs {
    /// A client of the server with the token.
    ///
    /// # Errors
    /// No token, or as [`Client::new`].
    fn client(&self) -> anyhow::Result<Client> {
        client(&self.url, self.token.clone())
    }
}

/// Runs `chatd chat ...`; errors are printed on standard error.
pub async fn run(args: ChatArgs) -> ExitCode {
    match run_command(args).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("chatd: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn run_command(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let client = client(&args.url, args.token)?;
    let hint_url = hint_url(&args.url, std::env::var(URL_ENV).ok().as_deref());
    let session = Session { client, hint_url };
    args.command.run(&session).await
}

/// A client of the server at `url` with `token`.
///
/// # Errors
/// No token (or a blank one), or as [`Client::new`].
fn client(url: &str, token: Option<String>) -> anyhow::Result<Client> {
    let token = token.filter(|t| !t.trim().is_empty()).context(
        "no API token: pass --token or set CHATD_TOKEN \
         (an admin can create one with `chatd token create --user NAME`)",
    )?;
    Client::new(url, token)
}

/// The `--url` the `tool-results` hint needs to reach the server at `url`
/// when run in the same environment (`env_url`: the value of `CHATD_URL`):
/// `None` when it would reach `url` without one, that is when `url` is
/// what `CHATD_URL` says or, with no `CHATD_URL`, the default.
fn hint_url(url: &str, env_url: Option<&str>) -> Option<String> {
    let without_flag = env_url.filter(|u| !u.is_empty()).unwrap_or(DEFAULT_URL);
    (url.trim_end_matches('/') != without_flag.trim_end_matches('/')).then(|| url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_names_the_url_only_when_the_environment_would_not_reach_it() {
        // The default, with no CHATD_URL: the hint reaches it as is.
        assert_eq!(hint_url(DEFAULT_URL, None), None);
        assert_eq!(hint_url("http://127.0.0.1:3000/", Some("")), None);
        // CHATD_URL's server (given by the variable or also by --url).
        assert_eq!(hint_url("https://h:8443", Some("https://h:8443/")), None);
        // --url elsewhere than CHATD_URL or the default.
        assert_eq!(
            hint_url("https://h:8443", None).as_deref(),
            Some("https://h:8443")
        );
        assert_eq!(
            hint_url("https://h:8443", Some("http://other:1")).as_deref(),
            Some("https://h:8443")
        );
        // --url naming the default while CHATD_URL names another server.
        assert_eq!(
            hint_url(DEFAULT_URL, Some("http://other:1")).as_deref(),
            Some(DEFAULT_URL)
        );
    }

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        Chat(ChatArgs),
        Usage(UsageArgs),
    }

    #[test]
    fn client_flags_and_the_client_print_no_token() {
        use clap::Parser as _;
        let chat =
            Cli::try_parse_from(["chatd", "chat", "--token", "chatd_tok_debug1", "list"]).unwrap();
        let usage = Cli::try_parse_from(["chatd", "usage", "--token", "chatd_tok_debug2"]).unwrap();
        let client = client::Client::new("http://127.0.0.1:1", "chatd_tok_debug3".into()).unwrap();
        let text = format!("{chat:?} {usage:#?} {client:?}");
        for token in ["chatd_tok_debug1", "chatd_tok_debug2", "chatd_tok_debug3"] {
            assert!(!text.contains(token), "{token} in {text}");
        }
        assert!(
            text.contains("<redacted>") && text.contains("127.0.0.1:1"),
            "{text}"
        );
    }
}
