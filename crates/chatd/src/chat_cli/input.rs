//! Reading what the user sends: a message's text from the arguments or
//! standard input ([`message_text`]), and a message's `content` with
//! attached files uploaded first ([`message_content`]), for `new`, `send`
//! and `queue edit`.

use std::io::{IsTerminal as _, Read as _};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::client::Client;

/// The `content` of a message: its text (as [`message_text`]; optional
/// when files are attached and no text is given), then a file part for
/// each of `files`, uploaded first in order (their ids on standard error).
///
/// # Errors
/// As [`message_text`], or an upload fails ([`Client::upload`]).
pub async fn message_content(
    client: &Client,
    text: &[String],
    files: &[std::path::PathBuf],
) -> anyhow::Result<Vec<Value>> {
    let mut content = Vec::new();
    if files.is_empty() || !text.is_empty() {
        content.push(json!({"type": "text", "text": message_text(text)?}));
    }
    for path in files {
        let id = client.upload(path).await?;
        eprintln!("uploaded {} (file {id})", path.display());
        content.push(json!({"type": "file", "file_id": id}));
    }
    Ok(content)
}

/// The message text: `args` joined by spaces, or standard input when
/// `args` is `-` or empty (and standard input is not a terminal).
///
/// # Errors
/// No text and standard input is a terminal; standard input cannot be
/// read; the text is blank.
pub fn message_text(args: &[String]) -> anyhow::Result<String> {
    let from_stdin = args.is_empty() || args == ["-"];
    let text = if from_stdin {
        if args.is_empty() && std::io::stdin().is_terminal() {
            bail!("no message: give TEXT, or `-` to read it from standard input");
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the message from standard input")?;
        text.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        args.join(" ")
    };
    if text.trim().is_empty() {
        bail!("the message is empty");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_text_joins_arguments_with_spaces() {
        let args = ["hello".to_owned(), "there".to_owned()];
        assert_eq!(message_text(&args).unwrap(), "hello there");
        assert!(message_text(&["  ".to_owned()]).is_err());
    }
}
