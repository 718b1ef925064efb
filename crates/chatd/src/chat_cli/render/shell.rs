//! How the renderer shows the workspace's `shell` tool (API.md
//! "Workspaces and provider-hosted tools"), compactly, as a terminal
//! would: the call as `$ COMMAND`, its result as the output's lines
//! indented by two spaces (standard error's prefixed `stderr: `), at most
//! [`MAX_LINES`] of each stream, then one bracketed line with the exit
//! code, `output truncated` and the limit the command hit with the
//! sandbox's message: `[exit 0]`, `[exit 137; limit: memory]`,
//! `[killed; limit: timeout: ...]`. A failed call (`{"error": "..."}`) is
//! `[shell failed: ...]`.

use serde_json::Value;

/// The name of the workspace's shell tool.
pub const SHELL_TOOL: &str = "shell";

/// The most lines shown of a result's stdout, and of its stderr; the rest
/// is counted (`… N more lines`).
pub const MAX_LINES: usize = 20;

/// `$ COMMAND` for a `shell` call's `args` (a JSON string `{command,
/// timeout_s?}`); a command of several lines continues indented. `None`
/// when the arguments have no `command` (shown as a plain tool call).
pub fn call_line(args: &str) -> Option<String> {
    let args: Value = serde_json::from_str(args).ok()?;
    let command = args.get("command")?.as_str()?;
    let command = command.trim_end().replace('\n', "\n  ");
    Some(match args.get("timeout_s").and_then(Value::as_u64) {
        Some(timeout) => format!("$ {command}  [timeout {timeout}s]"),
        None => format!("$ {command}"),
    })
}

/// The lines of a `shell` result (see the module docs). `None` when it is
/// neither a shell outcome nor an `{"error"}` (shown as a plain result).
pub fn result_lines(result: &Value, is_error: bool) -> Option<Vec<String>> {
    let object = result.as_object()?;
    if !object.contains_key("exit_code") {
        let error = object.get("error")?;
        let error = error
            .as_str()
            .map_or_else(|| error.to_string(), str::to_owned);
        return is_error.then(|| vec![format!("[shell failed: {error}]")]);
    }
    let mut lines = Vec::new();
    for (stream, prefix) in [("stdout", "  "), ("stderr", "  stderr: ")] {
        let text = object.get(stream).and_then(Value::as_str).unwrap_or("");
        let all: Vec<&str> = text.lines().collect();
        for line in all.iter().take(MAX_LINES) {
            lines.push(format!("{prefix}{line}"));
        }
        if all.len() > MAX_LINES {
            lines.push(format!("{prefix}… {} more lines", all.len() - MAX_LINES));
        }
    }
    let mut status = match object.get("exit_code").and_then(Value::as_i64) {
        Some(code) => format!("exit {code}"),
        None => "no exit code".to_owned(),
    };
    if object.get("truncated") == Some(&Value::Bool(true)) {
        status.push_str("; output truncated");
    }
    if let Some(limit) = object.get("limit").and_then(Value::as_str) {
        status.push_str(&format!("; limit: {limit}"));
    }
    if let Some(message) = object.get("message").and_then(Value::as_str) {
        status.push_str(&format!(": {message}"));
    }
    lines.push(format!("[{status}]"));
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_is_its_command_after_a_prompt() {
        assert_eq!(
            call_line(r#"{"command": "ls -l"}"#).as_deref(),
            Some("$ ls -l")
        );
        assert_eq!(
            call_line(r#"{"command": "cd a\nmake\n", "timeout_s": 30}"#).as_deref(),
            Some("$ cd a\n  make  [timeout 30s]")
        );
        assert_eq!(call_line(r#"{"cmd": "ls"}"#), None);
        assert_eq!(call_line("not json"), None);
    }

    #[test]
    fn a_result_is_its_output_then_the_exit_code_and_the_limit() {
        let result = json!({"exit_code": 0, "stdout": "a\nb\n", "stderr": "",
            "truncated": false, "limit": null});
        assert_eq!(
            result_lines(&result, false).unwrap(),
            ["  a", "  b", "[exit 0]"]
        );
        let result = json!({"exit_code": 1, "stdout": "", "stderr": "no such file\n",
            "truncated": true, "limit": "output"});
        assert_eq!(
            result_lines(&result, false).unwrap(),
            [
                "  stderr: no such file",
                "[exit 1; output truncated; limit: output]"
            ]
        );
        let result = json!({"exit_code": null, "stdout": "", "stderr": "",
            "truncated": false, "limit": "timeout", "message": "killed after 5 s"});
        assert_eq!(
            result_lines(&result, false).unwrap(),
            ["[no exit code; limit: timeout: killed after 5 s]"]
        );
        let many = (1..=25).map(|n| format!("{n}\n")).collect::<String>();
        let result = json!({"exit_code": 0, "stdout": many, "stderr": ""});
        let lines = result_lines(&result, false).unwrap();
        assert_eq!(lines.len(), MAX_LINES + 2);
        assert_eq!(lines[MAX_LINES], "  … 5 more lines");
    }

    #[test]
    fn an_error_is_one_line_and_other_results_are_left_alone() {
        assert_eq!(
            result_lines(&json!({"error": "sandbox unavailable"}), true).unwrap(),
            ["[shell failed: sandbox unavailable]"]
        );
        assert_eq!(result_lines(&json!("text"), false), None);
        assert_eq!(result_lines(&json!({"other": 1}), false), None);
    }
}
