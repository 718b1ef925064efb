//! The client's subcommands, one file each: the subcommand's flags (a clap
//! `Args` type whose doc comment is its help), how it builds its request
//! and how it prints the answer (its `run`).
//!
//! `chatd chat` dispatches its [`ChatCommand`] here; `chatd usage` and
//! `chatd token list|revoke` ([`usage`], [`token_list`], [`token_revoke`])
//! are top-level commands of the binary that `main` runs directly.

pub mod approve;
pub mod children;
pub mod clear_context;
pub mod compact;
pub mod deny;
pub mod interrupt;
pub mod list;
pub mod new;
pub mod queue;
pub mod send;
pub mod token_list;
pub mod token_revoke;
pub mod tool_results;
pub mod usage;
pub mod watch;

use std::process::ExitCode;

use clap::Subcommand;

use super::client::Client;

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
    ToolResults(tool_results::ToolResultsArgs),
    Approve(approve::ApproveArgs),
    Deny(deny::DenyArgs),
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
            ChatCommand::ToolResults(args) => args.run(session).await,
            ChatCommand::Approve(args) => args.run(session).await,
            ChatCommand::Deny(args) => args.run(session).await,
        }
    }
}
