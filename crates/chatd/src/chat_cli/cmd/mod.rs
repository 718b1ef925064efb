//! The client's subcommands, one file each: the subcommand's flags (a clap
//! `Args` type whose doc comment is its help), how it builds its request
//! and how it prints the answer (its `run`).
//!
//! `chatd chat` dispatches its [`ChatCommand`] here; `chatd usage` and
//! `chatd token list|revoke` ([`usage`], [`token_list`], [`token_revoke`])
//! are top-level commands of the binary that `main` runs directly.

pub mod approve;
pub mod archive;
pub mod branches;
pub mod children;
pub mod clear_context;
pub mod compact;
pub mod delete;
pub mod deny;
pub mod export;
pub mod fork;
pub mod import;
pub mod interrupt;
pub mod list;
pub mod new;
pub mod queue;
pub mod regenerate;
pub mod rename;
pub mod search;
pub mod send;
pub mod share;
pub mod switch;
pub mod token_list;
pub mod token_revoke;
pub mod tool_results;
pub mod usage;
pub mod watch;
pub mod workspace;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ServerArgs;
use super::client::Client;
use super::output::{report, stdout};

/// What every `chatd chat` subcommand runs with.
#[derive(Debug)]
pub struct Session {
    /// The client of the server, with the token.
    pub client: Client,
    /// The `--url` the printed `tool-results`/`approve` hints need, when
    /// the environment would not reach the server without it.
    pub hint_url: Option<String>,
}

impl Session {
    /// [`Session::hint_url`] as a `&str`.
    pub fn hint_url(&self) -> Option<&str> {
        self.hint_url.as_deref()
    }
}

/// The subcommands of `chatd chat`, in the order `--help` lists them.
#[derive(Debug, Subcommand)]
pub enum ChatCommand {
    List(list::ListArgs),
    Children(children::ChildrenArgs),
    New(new::NewArgs),
    Send(send::SendArgs),
    Queue(queue::QueueArgs),
    Watch(watch::WatchArgs),
    Interrupt(interrupt::InterruptArgs),
    Compact(compact::CompactArgs),
    ClearContext(clear_context::ClearContextArgs),
    Regenerate(regenerate::RegenerateArgs),
    Branches(branches::BranchesArgs),
    Switch(switch::SwitchArgs),
    Fork(fork::ForkArgs),
    ToolResults(tool_results::ToolResultsArgs),
    Approve(approve::ApproveArgs),
    Deny(deny::DenyArgs),
    Rename(rename::RenameArgs),
    Archive(archive::ArchiveArgs),
    Unarchive(archive::UnarchiveArgs),
    Delete(delete::DeleteArgs),
    Export(export::ExportArgs),
    Import(import::ImportArgs),
    Search(search::SearchArgs),
    Share(share::ShareArgs),
    Unshare(share::UnshareArgs),
    Shares(share::SharesArgs),
    Files(workspace::FilesArgs),
    Cat(workspace::CatArgs),
    Download(workspace::DownloadArgs),
}

impl ChatCommand {
    /// Runs the subcommand; returns the process exit code.
    ///
    /// # Errors
    /// The subcommand's errors (printed by the caller, exit 1).
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        match self {
            ChatCommand::List(args) => args.run(session).await,
            ChatCommand::Children(args) => args.run(session).await,
            ChatCommand::New(args) => args.run(session).await,
            ChatCommand::Send(args) => args.run(session).await,
            ChatCommand::Queue(args) => args.run(session).await,
            ChatCommand::Watch(args) => args.run(session).await,
            ChatCommand::Interrupt(args) => args.run(session).await,
            ChatCommand::Compact(args) => args.run(session).await,
            ChatCommand::ClearContext(args) => args.run(session).await,
            ChatCommand::Regenerate(args) => args.run(session).await,
            ChatCommand::Branches(args) => args.run(session).await,
            ChatCommand::Switch(args) => args.run(session).await,
            ChatCommand::Fork(args) => args.run(session).await,
            ChatCommand::ToolResults(args) => args.run(session).await,
            ChatCommand::Approve(args) => args.run(session).await,
            ChatCommand::Deny(args) => args.run(session).await,
            ChatCommand::Rename(args) => args.run(session).await,
            ChatCommand::Archive(args) => args.run(session).await,
            ChatCommand::Unarchive(args) => args.run(session).await,
            ChatCommand::Delete(args) => args.run(session).await,
            ChatCommand::Export(args) => args.run(session).await,
            ChatCommand::Import(args) => args.run(session).await,
            ChatCommand::Search(args) => args.run(session).await,
            ChatCommand::Share(args) => args.run(session).await,
            ChatCommand::Unshare(args) => args.run(session).await,
            ChatCommand::Shares(args) => args.run(session).await,
            ChatCommand::Files(args) => args.run(session).await,
            ChatCommand::Cat(args) => args.run(session).await,
            ChatCommand::Download(args) => args.run(session).await,
        }
    }
}

/// What `chatd usage` and `chatd token list` run: `GET
/// /users/{user}/{resource}` (`user` is `me`, a user id or a username, as
/// [`Client::user_path`] resolves it), printed as the API's JSON when
/// `json`, else decoded into `T` (an error says "decoding {what}") and
/// printed as `format` writes it. Exit 0, or the error printed as `chatd
/// chat` does and exit 1 ([`report`]).
pub async fn show_user_resource<T: DeserializeOwned>(
    server: &ServerArgs,
    user: &str,
    resource: &str,
    json: bool,
    what: &str,
    format: impl FnOnce(&T) -> String,
) -> ExitCode {
    report(async {
        let client = server.client()?;
        let user = client.user_path(user).await?;
        let answer: Value = client
            .call(Method::GET, &format!("/users/{user}/{resource}"), None)
            .await?;
        if json {
            return stdout(format!("{answer}\n"));
        }
        let answer: T =
            serde_json::from_value(answer).with_context(|| format!("decoding {what}"))?;
        stdout(format(&answer))
    })
    .await
}
