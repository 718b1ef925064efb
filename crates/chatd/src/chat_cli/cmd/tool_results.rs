//! `chatd chat tool-results CHAT`: the outputs of the pending client-side
//! tool calls, `POST /chats/{chat}/tool-results`, then the model's
//! continuation streamed (API.md `DynamicTool`, "Tool results").
//! [`post_tool_results`] is shared with `approve` and `deny`.

use std::io::Read as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{ArgGroup, Args};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Session;
use crate::chat_cli::follow::{Until, follow};
use crate::chat_cli::output::reply_renderer;
use crate::chat_cli::wire;

/// Answer the pending client-side tool calls of a chat in
/// requires_action, then stream the model's continuation.
///
/// Give one --result or --error per pending call (`new`, `send` and
/// `watch` list them, with the command to run). OUTPUT is sent as JSON
/// when it parses as JSON (`{"temp":21}`, `42`, `"text"`), otherwise as
/// a JSON string; an OUTPUT that starts with `{`, `[` or `"` must be
/// valid JSON (to send such text, give it as a JSON string). `@FILE`
/// reads OUTPUT from a file and `@-` from standard input (once), by the
/// same rule; `@@` stands for a literal leading `@`. Exit codes as for
/// `send`; 3 again when the model calls another client-side tool.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("outputs").required(true).multiple(true).args(["result", "error"])
))]
pub struct ToolResultsArgs {
    /// The chat id.
    chat: Uuid,
    /// A call's output: JSON or text, `@FILE`, `@-` for standard input
    /// (repeatable).
    #[arg(long, value_name = "TOOL_CALL_ID=OUTPUT", value_parser = parse_tool_output)]
    result: Vec<ToolOutput>,
    /// A failed call's output, sent with `is_error: true`; OUTPUT as for
    /// --result (repeatable).
    #[arg(long, value_name = "TOOL_CALL_ID=OUTPUT", value_parser = parse_tool_output)]
    error: Vec<ToolOutput>,
    /// Do not wait for the continuation.
    #[arg(long)]
    no_watch: bool,
}

/// One `--result`/`--error` of `chatd chat tool-results`.
#[derive(Debug, Clone, PartialEq)]
struct ToolOutput {
    /// The provider's id of the call it answers (non-empty, without
    /// surrounding whitespace).
    tool_call_id: String,
    /// The output: the JSON of the argument (or of the file it names), or
    /// its text as a JSON string.
    output: Value,
}

impl ToolResultsArgs {
    /// Posts the `--result`s then the `--error`s (order does not matter:
    /// the server stores them in the order of the calls) and, unless
    /// `--no-watch`, streams the continuation like `send`.
    ///
    /// # Errors
    /// As [`post_tool_results`].
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let sent = format!(
            "sent {} tool result(s)",
            self.result.len() + self.error.len()
        );
        post_tool_results(
            session,
            &self.chat.to_string(),
            &tool_results_body(&self.result, &self.error),
            &sent,
            self.no_watch,
        )
        .await
    }
}

/// Posts `body` to `POST /chats/{chat}/tool-results`, prints `sent` to
/// stderr and, unless `no_watch`, streams the continuation until the chat
/// is idle (`tool-results`, `approve` and `deny`).
///
/// # Errors
/// As [`crate::chat_cli::client::Client::call`] and [`follow`].
pub async fn post_tool_results(
    session: &Session,
    chat: &str,
    body: &Value,
    sent: &str,
    no_watch: bool,
) -> anyhow::Result<ExitCode> {
    let client = &session.client;
    // The continuation (the committed results, then the model's reply) is
    // what follows the newest message now: earlier messages, the tool call
    // included, are not printed again.
    let before = if no_watch {
        0
    } else {
        client.newest_message_id(chat).await?
    };
    let _: wire::Chat = client
        .call(
            Method::POST,
            &format!("/chats/{chat}/tool-results"),
            Some(body),
        )
        .await?;
    eprintln!("{sent}");
    if no_watch {
        return Ok(ExitCode::SUCCESS);
    }
    // No user message belongs to the continuation: a later one (a queued
    // message promoted after it) starts the next turn and ends the reply.
    let renderer = reply_renderer(None, chat, session.hint_url()).with_own_message(before);
    follow(client, chat, before, renderer, Until::Idle).await
}

/// The body of `POST /chats/{chat}/tool-results`: `{results: [{tool_call_id,
/// output, is_error}]}`, `results` with `is_error: false`, then `errors`
/// with `is_error: true`.
fn tool_results_body(results: &[ToolOutput], errors: &[ToolOutput]) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|r| (r, false))
        .chain(errors.iter().map(|r| (r, true)))
        .map(|(r, is_error)| {
            json!({"tool_call_id": r.tool_call_id, "output": r.output, "is_error": is_error})
        })
        .collect();
    json!({ "results": results })
}

/// Parses `TOOL_CALL_ID=OUTPUT` (split at the first `=`); see
/// [`tool_output`] for OUTPUT. `@-` reads standard input, at most once per
/// command.
///
/// # Errors
/// As [`parse_tool_output_with`]; clap reports it as a usage error (exit 2)
/// naming the option.
fn parse_tool_output(arg: &str) -> Result<ToolOutput, String> {
    static STDIN_READ: AtomicBool = AtomicBool::new(false);
    parse_tool_output_with(arg, || {
        read_stdin_once(&STDIN_READ, || {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        })
    })
}

/// [`parse_tool_output`] with `stdin` giving the text of `@-`.
///
/// # Errors
/// No `=`; an empty id, or one with leading or trailing whitespace; an
/// OUTPUT (or file) that starts like JSON but is not JSON; a file that
/// cannot be read; `stdin` failing.
fn parse_tool_output_with(
    arg: &str,
    stdin: impl FnOnce() -> Result<String, String>,
) -> Result<ToolOutput, String> {
    let Some((id, output)) = arg.split_once('=') else {
        return Err("expected TOOL_CALL_ID=OUTPUT (there is no `=`)".to_owned());
    };
    if id.trim().is_empty() {
        return Err(
            "expected TOOL_CALL_ID=OUTPUT (the tool call id before `=` is empty)".to_owned(),
        );
    }
    if id.trim() != id {
        // The server matches ids byte for byte: a padded id would be
        // refused as answering no pending call.
        return Err(format!(
            "the tool call id {id:?} has leading or trailing whitespace; \
             ids are matched exactly, so it would answer no pending call"
        ));
    }
    let output = match output.strip_prefix('@') {
        Some(literal) if literal.starts_with('@') => Value::String(literal.to_owned()),
        Some("-") => tool_output(&stdin()?, "standard input")?,
        Some("") => {
            return Err(
                "`@` must be followed by a file name, or `-` for standard input \
                 (write `@@` for a literal leading `@`)"
                    .to_owned(),
            );
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read {path}: {err}"))?;
            tool_output(&text, path)?
        }
        None => tool_output(output, "OUTPUT")?,
    };
    Ok(ToolOutput {
        tool_call_id: id.to_owned(),
        output,
    })
}

/// A tool output's value: `text` as JSON when it parses, otherwise as a
/// JSON string (`""` when empty). Text that starts like JSON (`{`, `[` or
/// `"`, after leading whitespace) must parse: it is a mistyped object,
/// array or string far more often than text meant verbatim.
///
/// # Errors
/// `text` starts like JSON but is not JSON; the message names `source`
/// (`OUTPUT`, the file, `standard input`) and the JSON error.
fn tool_output(text: &str, source: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(err) => match text.trim_start().chars().next() {
            Some(first @ ('{' | '[' | '"')) => Err(format!(
                "{source} starts with `{first}` but is not valid JSON ({err}); \
                 to send it as text, give it as a JSON string"
            )),
            _ => Ok(Value::String(text.to_owned())),
        },
    }
}

/// Reads standard input with `read` the first time `taken` is unset;
/// afterwards an error, since standard input is consumed by the first read.
///
/// # Errors
/// `@-` a second time, or `read` fails.
fn read_stdin_once(
    taken: &AtomicBool,
    read: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, String> {
    if taken.swap(true, Ordering::SeqCst) {
        return Err("`@-` reads standard input, which can be read only once".to_owned());
    }
    read().map_err(|err| format!("cannot read standard input: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_output_is_json_when_it_parses_and_a_string_otherwise() {
        let parsed = |arg: &str| parse_tool_output(arg).unwrap();
        assert_eq!(
            parsed(r#"call_1={"temp":21}"#),
            ToolOutput {
                tool_call_id: "call_1".into(),
                output: json!({"temp": 21}),
            }
        );
        assert_eq!(parsed("c=42").output, json!(42));
        assert_eq!(parsed(r#"c="quoted""#).output, json!("quoted"));
        assert_eq!(
            parsed("c=sunny, 21 degrees").output,
            json!("sunny, 21 degrees")
        );
        assert_eq!(parsed("c=").output, json!(""));
        // Split at the first `=`: the output may contain more.
        assert_eq!(
            parsed("c=a=b"),
            ToolOutput {
                tool_call_id: "c".into(),
                output: json!("a=b"),
            }
        );
    }

    #[test]
    fn a_tool_output_without_an_equals_sign_or_an_id_is_rejected() {
        let err = parse_tool_output("call_1").unwrap_err();
        assert!(err.contains("TOOL_CALL_ID=OUTPUT"), "{err}");
        assert!(err.contains("there is no `=`"), "{err}");
        let err = parse_tool_output("={}").unwrap_err();
        assert!(
            err.contains("the tool call id before `=` is empty"),
            "{err}"
        );
        assert!(parse_tool_output("  =x").is_err());
    }

    #[test]
    fn a_tool_call_id_with_surrounding_whitespace_is_rejected() {
        for arg in [" call_1=x", "call_1 =x", "\tcall_1=x"] {
            let err = parse_tool_output(arg).unwrap_err();
            assert!(
                err.contains("has leading or trailing whitespace"),
                "{arg}: {err}"
            );
            assert!(err.contains("would answer no pending call"), "{err}");
        }
        // Inside the id it is the server's business.
        assert_eq!(parse_tool_output("a b=1").unwrap().tool_call_id, "a b");
    }

    #[test]
    fn an_output_that_starts_like_json_must_be_json() {
        for (arg, first) in [
            (r#"c={"temp":21"#, '{'),
            ("c=[1,", '['),
            (r#"c="unterminated"#, '"'),
            ("c= {oops}", '{'),
        ] {
            let err = parse_tool_output(arg).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "OUTPUT starts with `{first}` but is not valid JSON ("
                )),
                "{arg}: {err}"
            );
            // serde_json's message, with its position.
            assert!(err.contains(" at line 1 column "), "{arg}: {err}");
            assert!(err.ends_with("give it as a JSON string"), "{err}");
        }
        // As a JSON string, the same text is fine.
        assert_eq!(
            parse_tool_output(r#"c="{oops}""#).unwrap().output,
            json!("{oops}")
        );
        // Anything else that is not JSON is text.
        assert_eq!(
            parse_tool_output("c=21 degrees").unwrap().output,
            json!("21 degrees")
        );
        assert_eq!(
            parse_tool_output("c=trueish").unwrap().output,
            json!("trueish")
        );
    }

    #[test]
    fn an_output_at_file_is_read_from_the_file_by_the_same_rules() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let json_file = file("out.json", "{\"temp\": 21}\n");
        assert_eq!(
            parse_tool_output(&format!("c=@{json_file}")).unwrap(),
            ToolOutput {
                tool_call_id: "c".into(),
                output: json!({"temp": 21}),
            }
        );
        // Text is sent unchanged, its final newline included.
        let text_file = file("out.txt", "line 1\nline 2\n");
        assert_eq!(
            parse_tool_output(&format!("c=@{text_file}"))
                .unwrap()
                .output,
            json!("line 1\nline 2\n")
        );
        let bad_file = file("bad.json", "[1, 2");
        let err = parse_tool_output(&format!("c=@{bad_file}")).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "{bad_file} starts with `[` but is not valid JSON ("
            )),
            "{err}"
        );
        let missing = dir.path().join("missing.json").display().to_string();
        let err = parse_tool_output(&format!("c=@{missing}")).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot read {missing}: ")),
            "{err}"
        );
        let err = parse_tool_output("c=@").unwrap_err();
        assert!(err.contains("followed by a file name"), "{err}");
    }

    #[test]
    fn a_double_at_sign_is_a_literal_at_sign() {
        assert_eq!(
            parse_tool_output("c=@@handle").unwrap().output,
            json!("@handle")
        );
        assert_eq!(parse_tool_output("c=@@").unwrap().output, json!("@"));
        assert_eq!(parse_tool_output("c=@@{").unwrap().output, json!("@{"));
        // Only at the start: elsewhere `@` is plain text.
        assert_eq!(parse_tool_output("c=a@b").unwrap().output, json!("a@b"));
    }

    #[test]
    fn an_output_at_dash_is_read_from_standard_input_once() {
        let stdin = |text: &'static str| move || Ok(text.to_owned());
        assert_eq!(
            parse_tool_output_with("c=@-", stdin("[1, 2]"))
                .unwrap()
                .output,
            json!([1, 2])
        );
        assert_eq!(
            parse_tool_output_with("c=@-", stdin("plain text\n"))
                .unwrap()
                .output,
            json!("plain text\n")
        );
        let err = parse_tool_output_with("c=@-", stdin("{nope")).unwrap_err();
        assert!(
            err.starts_with("standard input starts with `{` but is not valid JSON ("),
            "{err}"
        );
        // Only `@-` reads it.
        let unused = || -> Result<String, String> { panic!("standard input was read") };
        assert_eq!(
            parse_tool_output_with("c=-", unused).unwrap().output,
            json!("-")
        );

        let taken = AtomicBool::new(false);
        assert_eq!(
            read_stdin_once(&taken, || Ok("first".to_owned())).unwrap(),
            "first"
        );
        let err = read_stdin_once(&taken, || Ok("second".to_owned())).unwrap_err();
        assert!(err.contains("can be read only once"), "{err}");
        let fresh = AtomicBool::new(false);
        let err =
            read_stdin_once(&fresh, || Err(std::io::ErrorKind::InvalidData.into())).unwrap_err();
        assert!(err.starts_with("cannot read standard input: "), "{err}");
    }

    #[test]
    fn the_tool_results_body_marks_errors() {
        let ok = parse_tool_output("a=1").unwrap();
        let failed = parse_tool_output("b=no network").unwrap();
        assert_eq!(
            tool_results_body(&[ok], &[failed]),
            json!({"results": [
                {"tool_call_id": "a", "output": 1, "is_error": false},
                {"tool_call_id": "b", "output": "no network", "is_error": true},
            ]})
        );
    }
}
