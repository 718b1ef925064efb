//! `chatd chat new`: `POST /chats`, then the reply streamed as it is
//! generated (API.md "Chat routes", "Stream (WebSocket)").

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::input::message_content;
use crate::chat_cli::output::{reply_renderer, stdout};

/// Start a chat and stream the assistant's reply to standard output.
///
/// The chat id is printed on standard error as `chat <id>`. Exits 0
/// when the reply is done, 1 when the chat ends in error, 3 when it
/// waits for client-side tool results.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// Model config id (default: the server's default model).
    #[arg(long = "model", value_name = "MODEL_CONFIG_ID")]
    model: Option<Uuid>,
    /// System prompt.
    #[arg(long = "system", value_name = "PROMPT")]
    system: Option<String>,
    /// Title (default: one the model writes).
    #[arg(long)]
    title: Option<String>,
    /// Client-side tools the model may call: a JSON array of
    /// `{"name", "description", "input_schema"}` objects, inline or
    /// `@FILE`. A call stops the chat in requires_action (exit 3) until
    /// `chatd chat tool-results` answers it.
    #[arg(long, value_name = "TOOLS", value_parser = parse_tools)]
    tools: Option<Value>,
    /// Do not wait for the reply.
    #[arg(long)]
    no_watch: bool,
    /// Also print the created chat as JSON on standard output (first
    /// line; the reply, if watched, follows).
    #[arg(long)]
    json: bool,
    /// Offer the model the built-in agent tools (spawn_agent,
    /// wait_agent, message_agent, close_agent): it may start child
    /// chats; list them with `chatd chat children`.
    #[arg(long)]
    subagents: bool,
    /// Give the chat a workspace: a directory of its own that the model
    /// works in with the built-in shell, read_file, write_file and
    /// list_files tools (commands run in the server's sandbox, and may
    /// wait for approval); see it with `chatd chat files|cat|download`.
    #[arg(long)]
    workspace: bool,
    /// Attach a file (at most 10 MiB; repeatable): uploaded first, then
    /// sent with the message.
    #[arg(long = "file", value_name = "PATH")]
    files: Vec<std::path::PathBuf>,
    /// The message; `-` or nothing reads it from standard input.
    #[arg(value_name = "TEXT")]
    text: Vec<String>,
}

impl NewArgs {
    /// Creates the chat, prints `chat <id>` on standard error and, unless
    /// `--no-watch`, streams the reply.
    ///
    /// # Errors
    /// As [`message_content`], [`crate::chat_cli::client::Client::call`]
    /// and [`follow`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let client = &session.client;
        let content = message_content(client, &self.text, &self.files).await?;
        let mut body = json!({ "content": content });
        if let Some(model) = self.model {
            body["model_config_id"] = json!(model);
        }
        if let Some(system) = self.system {
            body["system_prompt"] = json!(system);
        }
        if let Some(title) = self.title {
            body["title"] = json!(title);
        }
        if let Some(tools) = self.tools {
            body["dynamic_tools"] = tools;
        }
        if self.subagents {
            body["subagents"] = json!(true);
        }
        if self.workspace {
            body["workspace"] = json!(true);
        }
        let chat: Value = client.call(Method::POST, "/chats", Some(&body)).await?;
        let id = chat["id"]
            .as_str()
            .context("the created chat has no id")?
            .to_owned();
        eprintln!("chat {id}");
        if self.json {
            stdout(format!("{chat}\n"))?;
        }
        if self.no_watch {
            return Ok(ExitCode::SUCCESS);
        }
        let renderer = reply_renderer(None, &id, session.hint_url());
        follow(client, &id, 0, renderer, Until::Idle).await
    }
}

/// Parses `--tools`: a JSON array given inline, or read from the file
/// after `@`. Each tool's fields are checked by the server (`400` naming
/// `dynamic_tools[i]...`).
///
/// # Errors
/// The file cannot be read, the text is not JSON, or not an array; clap
/// reports it as a usage error (exit 2) naming `--tools`.
fn parse_tools(arg: &str) -> Result<Value, String> {
    let (text, from) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|err| format!("cannot read {path}: {err}"))?,
            format!(" in {path}"),
        ),
        None => (arg.to_owned(), String::new()),
    };
    let tools: Value =
        serde_json::from_str(&text).map_err(|err| format!("invalid JSON{from}: {err}"))?;
    if !tools.is_array() {
        return Err(format!(
            "expected a JSON array{from}, like [{{\"name\":\"get_weather\",\
             \"description\":\"...\",\"input_schema\":{{\"type\":\"object\"}}}}]"
        ));
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_a_json_array_inline_or_from_a_file() {
        let tools = r#"[{"name":"t","description":"d","input_schema":{"type":"object"}}]"#;
        assert_eq!(
            parse_tools(tools).unwrap(),
            serde_json::from_str::<Value>(tools).unwrap()
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tools.json");
        std::fs::write(&path, tools).unwrap();
        assert_eq!(
            parse_tools(&format!("@{}", path.display())).unwrap(),
            parse_tools(tools).unwrap()
        );

        let err = parse_tools("[{").unwrap_err();
        assert!(err.starts_with("invalid JSON: "), "{err}");
        let err = parse_tools(r#"{"name":"t"}"#).unwrap_err();
        assert!(err.starts_with("expected a JSON array, like ["), "{err}");
        std::fs::write(&path, "{}").unwrap();
        let err = parse_tools(&format!("@{}", path.display())).unwrap_err();
        assert!(
            err.starts_with(&format!("expected a JSON array in {}", path.display())),
            "{err}"
        );
        let missing = dir.path().join("missing.json");
        let err = parse_tools(&format!("@{}", missing.display())).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot read {}", missing.display())),
            "{err}"
        );
    }
}
