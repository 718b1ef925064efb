//! The workspace invariant of a chaos run (issue 37): a chat's committed
//! files are the replay of its committed steps.
//!
//! The clients of a chat with a workspace make the fake model call the
//! workspace tools with a send's token as content ([`workspace_text`]):
//! `write_file` of one of [`WORKSPACE_FILES`], `shell` writing one of them
//! (`printf %s TOKEN > PATH`) or appending a line to [`WORKSPACE_LOG`]
//! (`printf '%s\n' TOKEN >> log.txt`), half the time after `sleep 0.5` so
//! that kills and stops hit steps in flight, and `read_file`.
//!
//! A step's tool results and its workspace changes commit in one
//! transaction, and a chat's steps commit one after another, so walking
//! every stored tool result of the chat in message id order (every
//! branch: the workspace is not versioned by branch, edits and
//! regenerations leave it as it is) and applying each successful call
//! gives the committed files exactly:
//! - a `write_file` result that is not `is_error`: the file has the call's
//!   content from then on;
//! - a `shell` result with `exit_code` 0 and no `limit`: the command's
//!   write (or appended line) happened; one that ran but did not exit 0
//!   makes its file unknown until the next write;
//! - any `is_error` result: nothing changed;
//! - a `read_file` result must show the replayed content at that point
//!   (the step's checkout gave it the committed files), and a "does not
//!   exist" error must be for a file the replay does not have.
//!
//! Then [`check`] compares the replay with `chat_workspace_files` (the
//! files' paths and contents; directories only as parents of replayed
//! files; each row's `bytes` and `sha256` its content's; no absolute path,
//! no `.`, `..` or empty component), `chats.workspace_bytes` and
//! `workspace_files` with the rows' sum and count, `GET
//! /chats/{chat}/workspace` with the rows, and checks that chats without
//! a workspace have no rows and no workspace tool results.
//!
//! [`workspace_text`]: crate::client::workspace_text

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rand::rngs::StdRng;
use reqwest::Method;
use serde_json::Value;
use sqlx::PgConnection;

use crate::client::{Shared, request};
#[cfg(doc)]
use crate::client::{WORKSPACE_FILES, WORKSPACE_LOG};

/// The workspace tools.
const TOOLS: [&str; 4] = ["shell", "read_file", "write_file", "list_files"];

/// What the workspace check counted, for the report.
#[derive(Debug, Default)]
pub struct Figures {
    /// Stored workspace tool results by `"<tool> ok"`, `"<tool> error"`
    /// and, for `shell` results that ran but did not exit 0, `"shell
    /// exit≠0"`.
    pub results: BTreeMap<String, u64>,
    /// `read_file` results compared with the replay.
    pub reads_checked: u64,
    /// Committed files (rows of kind `file`) and their bytes, over the
    /// chats with a workspace.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: i64,
    /// Lines of the replayed append logs.
    pub log_lines: u64,
}

/// A replayed file: its content, or `None` when a call that did not end
/// cleanly may have changed it.
type Files = BTreeMap<String, Option<String>>;

/// The replay of one chat's stored messages.
#[derive(Debug, Default)]
struct Replay {
    files: Files,
    /// The message id of each file's last write.
    written_by: HashMap<String, (i64, String)>,
    /// The message id of the result that wrote each token.
    origin: HashMap<String, i64>,
    violations: Vec<String>,
}

/// What a harness `shell` command does to the files.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    Put(String, String),
    Append(String, String),
}

/// The effect of a command of [`workspace_text`], by its last `&&`
/// segment; `None` for any other command.
///
/// [`workspace_text`]: crate::client::workspace_text
fn shell_effect(command: &str) -> Option<Effect> {
    let last = command.rsplit(" && ").next()?;
    if let Some(rest) = last.strip_prefix("printf '%s\\n' ") {
        let (token, path) = rest.split_once(" >> ")?;
        return Some(Effect::Append(path.to_owned(), token.to_owned()));
    }
    let rest = last.strip_prefix("printf %s ")?;
    let (token, path) = rest.split_once(" > ")?;
    Some(Effect::Put(path.to_owned(), token.to_owned()))
}

/// A tool call's arguments: a JSON string (as stored) or an object.
fn args_of(part: &Value) -> Value {
    match &part["args"] {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        other => other.clone(),
    }
}

/// Short form of a file's content for messages.
fn shown(content: Option<&Option<String>>) -> String {
    match content {
        None => "no file".to_owned(),
        Some(None) => "unknown".to_owned(),
        Some(Some(c)) if c.len() > 80 => format!("{:?}… ({} bytes)", &c[..80], c.len()),
        Some(Some(c)) => format!("{c:?}"),
    }
}

/// Replays `rows` (a chat's `(id, content)` in id order, every branch):
/// module docs. Counts the results into `figures`.
fn replay(rows: &[(i64, Value)], figures: &mut Figures) -> Replay {
    let mut out = Replay::default();
    let mut calls: HashMap<&str, (&str, Value)> = HashMap::new();
    for (_, content) in rows {
        for part in content.as_array().into_iter().flatten() {
            if part["type"] == "tool-call"
                && let (Some(id), Some(name)) =
                    (part["tool_call_id"].as_str(), part["tool_name"].as_str())
            {
                calls.insert(id, (name, args_of(part)));
            }
        }
    }
    for (message, content) in rows {
        for part in content.as_array().into_iter().flatten() {
            if part["type"] != "tool-result" {
                continue;
            }
            let Some(tool) = part["tool_name"].as_str().filter(|t| TOOLS.contains(t)) else {
                continue;
            };
            let id = part["tool_call_id"].as_str().unwrap_or_default();
            let ok = part["is_error"] != true;
            *figures
                .results
                .entry(format!("{tool} {}", if ok { "ok" } else { "error" }))
                .or_default() += 1;
            if !ok {
                // Why, in a few words (the message's start), so a run's
                // figures say what the errors were.
                let why = part["result"]["error"]
                    .as_str()
                    .or_else(|| part["result"]["message"].as_str())
                    .unwrap_or("(no message)");
                let why: String = why.chars().take(48).collect();
                *figures
                    .results
                    .entry(format!("{tool} error: {why}"))
                    .or_default() += 1;
            }
            let Some((_, args)) = calls.get(id) else {
                out.violations.push(format!(
                    "message {message}: a {tool} result for call {id}, which no stored message made"
                ));
                continue;
            };
            let result = &part["result"];
            let path = args["path"].as_str().unwrap_or_default().to_owned();
            match tool {
                "write_file" if ok => {
                    let content = args["content"].as_str().unwrap_or_default().to_owned();
                    out.origin.insert(content.clone(), *message);
                    out.written_by
                        .insert(path.clone(), (*message, id.to_owned()));
                    out.files.insert(path, Some(content));
                }
                "shell" if ok => {
                    let command = args["command"].as_str().unwrap_or_default();
                    let Some(effect) = shell_effect(command) else {
                        out.violations.push(format!(
                            "message {message}: cannot replay shell command {command:?}"
                        ));
                        continue;
                    };
                    let clean = result["exit_code"] == 0 && result["limit"].is_null();
                    if !clean {
                        *figures
                            .results
                            .entry("shell exit≠0".to_owned())
                            .or_default() += 1;
                    }
                    let (Effect::Put(path, token) | Effect::Append(path, token)) = &effect;
                    out.origin.insert(token.clone(), *message);
                    let path = path.clone();
                    out.written_by
                        .insert(path.clone(), (*message, id.to_owned()));
                    let file = out.files.entry(path).or_insert(Some(String::new()));
                    match (clean, effect, file.as_mut()) {
                        (false, _, _) => *file = None,
                        (true, Effect::Put(_, token), _) => *file = Some(token),
                        (true, Effect::Append(_, token), Some(log)) => {
                            log.push_str(&token);
                            log.push('\n');
                        }
                        (true, Effect::Append(..), None) => {}
                    }
                }
                "read_file" => {
                    figures.reads_checked += 1;
                    let known = out.files.get(&path);
                    if ok {
                        let read = result["content"].as_str().unwrap_or_default();
                        match known {
                            Some(Some(c)) if c == read => {}
                            Some(None) => {
                                out.files.insert(path, Some(read.to_owned()));
                            }
                            _ => {
                                out.violations.push(format!(
                                    "message {message}: read_file {path} (call {id}) read {read:?}, \
                                     but the committed steps before it leave {}{}",
                                    shown(known),
                                    out.difference(known, read, &path)
                                ));
                                // Reported once: later reads and the end
                                // compare with what it read.
                                out.files.insert(path, Some(read.to_owned()));
                            }
                        }
                    } else {
                        let error = result["error"].as_str().unwrap_or_default();
                        if error.contains("does not exist") && matches!(known, Some(Some(_))) {
                            out.violations.push(format!(
                                "message {message}: read_file {path} (call {id}) says it does not exist, \
                                 but the committed steps before it leave {} (last written by {:?})",
                                shown(known),
                                out.written_by.get(&path)
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out
}

impl Replay {
    /// How `actual` differs from the replayed `expected` file at `path`:
    /// for the log, the lines only in one of them, each with the message
    /// of the result that wrote it; else the last write's message and call.
    fn difference(&self, expected: Option<&Option<String>>, actual: &str, path: &str) -> String {
        match expected {
            Some(Some(expected)) if path == crate::client::WORKSPACE_LOG => {
                let only = |a: &str, b: &str| -> Vec<String> {
                    let b: Vec<&str> = b.lines().collect();
                    a.lines()
                        .filter(|l| !b.contains(l))
                        .map(|l| match self.origin.get(l) {
                            Some(m) => format!("{l} (result message {m})"),
                            None => l.to_owned(),
                        })
                        .collect()
                };
                format!(
                    "; lines only in the replay {:?}, only in the file {:?}",
                    only(expected, actual),
                    only(actual, expected)
                )
            }
            _ => format!(
                " (last written by result message and call {:?})",
                self.written_by.get(path)
            ),
        }
    }
}

/// Whether `path` is a relative path of normal components.
fn clean_path(path: &str) -> bool {
    !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// A `chat_workspace_files` row as the check reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
struct FileRow {
    path: String,
    kind: String,
    content: Vec<u8>,
    bytes: i64,
    /// `sha256` is the content's.
    sha_ok: bool,
}

/// The violations of one chat's rows against its replay (module docs).
fn compare(replay: &Replay, rows: &[FileRow]) -> Vec<String> {
    let mut violations = Vec::new();
    let parents: HashSet<&str> = replay
        .files
        .keys()
        .flat_map(|p| {
            p.char_indices()
                .filter(|(_, c)| *c == '/')
                .map(move |(i, _)| &p[..i])
        })
        .collect();
    let mut seen = BTreeSet::new();
    for row in rows {
        if !clean_path(&row.path) {
            violations.push(format!(
                "workspace entry {:?} is not a clean relative path",
                row.path
            ));
        }
        if row.bytes != row.content.len() as i64 || !row.sha_ok {
            violations.push(format!(
                "workspace entry {}: bytes {} and sha256 {} for {} bytes of content",
                row.path,
                row.bytes,
                if row.sha_ok { "right" } else { "wrong" },
                row.content.len()
            ));
        }
        match row.kind.as_str() {
            "dir" if parents.contains(row.path.as_str()) => {}
            "file" => {
                seen.insert(row.path.as_str());
                let content = String::from_utf8_lossy(&row.content);
                match replay.files.get(&row.path) {
                    Some(Some(expected)) if *expected == content => {}
                    Some(None) => {}
                    expected => violations.push(format!(
                        "workspace file {} holds {}, the replay of the committed steps {}{}",
                        row.path,
                        shown(Some(&Some(content.to_string()))),
                        shown(expected),
                        replay.difference(expected, &content, &row.path)
                    )),
                }
            }
            kind => violations.push(format!(
                "workspace entry {} of kind {kind}, which no committed step made",
                row.path
            )),
        }
    }
    for (path, content) in &replay.files {
        if content.is_some() && !seen.contains(path.as_str()) {
            violations.push(format!(
                "workspace file {path} is missing; the replay of the committed steps has {} (last written by result message and call {:?})",
                shown(Some(content)),
                replay.written_by.get(path)
            ));
        }
    }
    violations
}

/// The workspace invariants of every chat of the run (module docs);
/// `workspaces` are the chats created with a workspace. Returns the
/// violations and the figures.
///
/// # Errors
/// Database errors.
pub async fn check(
    conn: &mut PgConnection,
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    chats: &[String],
    workspaces: &HashSet<String>,
) -> anyhow::Result<(Vec<String>, Figures)> {
    let mut violations = Vec::new();
    let mut figures = Figures::default();
    for chat in chats {
        let id: uuid::Uuid = chat.parse()?;
        let has: bool = workspaces.contains(chat);
        let messages: Vec<(i64, Value)> =
            sqlx::query_as("SELECT id, content FROM chat_messages WHERE chat_id = $1 ORDER BY id")
                .bind(id)
                .fetch_all(&mut *conn)
                .await?;
        let rows: Vec<FileRow> = sqlx::query_as(
            "SELECT path, kind, content, bytes, sha256 = sha256(content) AS sha_ok
             FROM chat_workspace_files WHERE chat_id = $1 ORDER BY path",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        let (workspace, bytes, files): (bool, Option<i64>, Option<i32>) = sqlx::query_as(
            "SELECT workspace, workspace_bytes, workspace_files FROM chats WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
        let mut chat_figures = Figures::default();
        let replayed = replay(&messages, &mut chat_figures);
        if !has {
            if workspace || !rows.is_empty() || !chat_figures.results.is_empty() {
                violations.push(format!(
                    "chat {chat} (no workspace): workspace {workspace}, {} entries, {} workspace tool results",
                    rows.len(),
                    chat_figures.results.values().sum::<u64>()
                ));
            }
            continue;
        }
        for (k, n) in chat_figures.results {
            *figures.results.entry(k).or_default() += n;
        }
        figures.reads_checked += chat_figures.reads_checked;
        if !workspace {
            violations.push(format!(
                "chat {chat}: created with a workspace, but chats.workspace is false"
            ));
        }
        let mut chat_violations = replayed.violations.clone();
        chat_violations.extend(compare(&replayed, &rows));
        let sum: i64 = rows.iter().map(|r| r.bytes).sum();
        let count = rows.iter().filter(|r| r.kind != "dir").count() as i64;
        let summary_ok = match (bytes, files) {
            (None, None) => rows.is_empty(),
            (Some(b), Some(f)) => b == sum && i64::from(f) == count,
            _ => false,
        };
        if !summary_ok {
            chat_violations.push(format!(
                "chats.workspace_bytes {bytes:?} and workspace_files {files:?}, the rows hold {sum} bytes in {count} files"
            ));
        }
        figures.files += rows.iter().filter(|r| r.kind == "file").count() as u64;
        figures.bytes += sum;
        figures.log_lines += replayed
            .files
            .get(crate::client::WORKSPACE_LOG)
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.lines().count() as u64);
        // What the API lists.
        let path = format!("/chats/{chat}/workspace");
        let answer = request(shared, http, rng, "check", Method::GET, &path, None).await;
        if answer.status != 200 {
            chat_violations.push(format!("GET {path}: {}", answer.status));
        } else {
            let listed: Vec<(String, String, i64)> = answer
                .body
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["path"].as_str().unwrap_or_default().to_owned(),
                        e["kind"].as_str().unwrap_or_default().to_owned(),
                        e["bytes"].as_i64().unwrap_or(-1),
                    )
                })
                .collect();
            let stored: Vec<(String, String, i64)> = rows
                .iter()
                .map(|r| (r.path.clone(), r.kind.clone(), r.bytes))
                .collect();
            if listed != stored {
                chat_violations.push(format!(
                    "GET {path} lists {listed:?}, the database holds {stored:?}"
                ));
            }
        }
        violations.extend(
            chat_violations
                .into_iter()
                .map(|v| format!("chat {chat}: {v}")),
        );
    }
    Ok((violations, figures))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str, name: &str, args: Value) -> Value {
        json!({"type": "tool-call", "tool_call_id": id, "tool_name": name, "args": args.to_string()})
    }

    fn result(id: &str, name: &str, result: Value, is_error: bool) -> Value {
        json!({"type": "tool-result", "tool_call_id": id, "tool_name": name, "result": result, "is_error": is_error})
    }

    fn file(path: &str, content: &str) -> FileRow {
        FileRow {
            path: path.to_owned(),
            kind: "file".to_owned(),
            content: content.as_bytes().to_vec(),
            bytes: content.len() as i64,
            sha_ok: true,
        }
    }

    #[test]
    fn the_harness_commands_are_replayed() {
        assert_eq!(
            shell_effect("sleep 0.5 && mkdir -p d && printf %s tok-1-2 > d/c.txt"),
            Some(Effect::Put("d/c.txt".into(), "tok-1-2".into()))
        );
        assert_eq!(
            shell_effect("printf '%s\\n' tok-1-3 >> log.txt"),
            Some(Effect::Append("log.txt".into(), "tok-1-3".into()))
        );
        assert_eq!(shell_effect("rm -rf ."), None);
        let mut rng = <StdRng as rand::SeedableRng>::seed_from_u64(1);
        for _ in 0..50 {
            let (op, text) = crate::client::workspace_text(&mut rng, "tok-0-1");
            // Every text carries its token (the lost-message check finds
            // the message by it).
            assert!(
                text.contains("\"tok-0-1\"") || text.contains(" tok-0-1 "),
                "{text}"
            );
            let (name, args) = text["call ".len()..].split_once(' ').unwrap();
            let args: Value = serde_json::from_str(args).unwrap();
            if name == "shell" {
                let effect = shell_effect(args["command"].as_str().unwrap()).unwrap();
                match (op, effect) {
                    (crate::client::WorkspaceOp::ShellWrite, Effect::Put(_, t))
                    | (crate::client::WorkspaceOp::ShellAppend, Effect::Append(_, t)) => {
                        assert_eq!(t, "tok-0-1")
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn the_files_must_equal_the_replay_of_the_committed_steps() {
        let rows = vec![
            (
                1,
                json!([call(
                    "c1",
                    "write_file",
                    json!({"path": "a.txt", "content": "tok-0-1"})
                )]),
            ),
            (
                2,
                json!([result(
                    "c1",
                    "write_file",
                    json!({"path": "a.txt", "bytes": 7}),
                    false
                )]),
            ),
            (
                3,
                json!([call(
                    "c2",
                    "shell",
                    json!({"command": "sleep 0.5 && printf '%s\\n' tok-0-2 >> log.txt"})
                )]),
            ),
            (
                4,
                json!([result("c2", "shell", json!({"exit_code": 0}), false)]),
            ),
            // Interrupted: nothing changed.
            (
                5,
                json!([call(
                    "c3",
                    "write_file",
                    json!({"path": "a.txt", "content": "tok-0-3"})
                )]),
            ),
            (
                6,
                json!([result(
                    "c3",
                    "write_file",
                    json!({"error": "interrupted"}),
                    true
                )]),
            ),
            (
                7,
                json!([call("c4", "read_file", json!({"path": "a.txt"}))]),
            ),
            (
                8,
                json!([result(
                    "c4",
                    "read_file",
                    json!({"content": "tok-0-1"}),
                    false
                )]),
            ),
            (
                9,
                json!([call("c5", "read_file", json!({"path": "b.txt"}))]),
            ),
            (
                10,
                json!([result(
                    "c5",
                    "read_file",
                    json!({"error": "b.txt does not exist"}),
                    true
                )]),
            ),
        ];
        let mut figures = Figures::default();
        let r = replay(&rows, &mut figures);
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!(figures.reads_checked, 2);
        assert_eq!(figures.results["write_file ok"], 1);
        let good = vec![file("a.txt", "tok-0-1"), file("log.txt", "tok-0-2\n")];
        assert_eq!(compare(&r, &good), Vec::<String>::new());
        // A lost write, an extra file, a bad path.
        let bad = vec![
            file("../x", ""),
            file("a.txt", "tok-0-3"),
            file("log.txt", "tok-0-2\n"),
        ];
        let v = compare(&r, &bad);
        assert_eq!(v.len(), 3, "{v:?}");
        let v = compare(&r, &[file("a.txt", "tok-0-1")]);
        assert!(v[0].contains("log.txt is missing"), "{v:?}");

        // A read that does not see the committed write.
        let mut stale = rows.clone();
        stale[7] = (
            8,
            json!([result("c4", "read_file", json!({"content": "old"}), false)]),
        );
        let r = replay(&stale, &mut Figures::default());
        assert!(
            r.violations[0].contains("read \"old\""),
            "{:?}",
            r.violations
        );
        // Reported once: the end compares with what was read.
        assert_eq!(r.violations.len(), 1);
        let v = compare(&r, &[file("a.txt", "old"), file("log.txt", "tok-0-2\n")]);
        assert_eq!(v, Vec::<String>::new());
        // A lost line of the log is named with the result that wrote it.
        let v = compare(&r, &[file("a.txt", "old"), file("log.txt", "")]);
        assert!(v[0].contains("tok-0-2 (result message 4)"), "{v:?}");
    }

    #[test]
    fn paths_must_be_clean_and_relative() {
        assert!(clean_path("d/c.txt"));
        for bad in ["/etc/passwd", "../x", "a/./b", "a//b", "a/", ""] {
            assert!(!clean_path(bad), "{bad}");
        }
    }
}
