//! Writing to the terminal: [`write`] and [`stdout`] (a closed pipe is an
//! error, never a panic), the renderer [`style`] for this terminal, the
//! [`reply_renderer`] of `new`, `send`, `tool-results`, `approve` and
//! `deny`, [`report`] (how `usage` and `token list|revoke` end), and
//! [`rfc3339`] and [`utc_minute`], the time formats of `usage` and `token
//! list`.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};

use super::EXIT_ERROR;
use super::render::{Mode, Output, Renderer, Style};

/// Writes `outputs` in order, flushing each so that deltas show at once.
///
/// # Errors
/// When a stream cannot be written (for example a closed pipe).
pub fn write(outputs: Vec<Output>) -> anyhow::Result<()> {
    for output in outputs {
        match output {
            Output::Stdout(text) => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Output::Stderr(text) => {
                let mut err = std::io::stderr().lock();
                err.write_all(text.as_bytes())?;
                err.flush()?;
            }
        }
    }
    Ok(())
}

/// Writes `text` to standard output; a closed pipe (`| head`) is an error
/// (reported once by the caller), never a panic as with `println!`.
///
/// # Errors
/// As [`write`].
pub fn stdout(text: String) -> anyhow::Result<()> {
    write(vec![Output::Stdout(text)])
}

/// The renderer's style for this terminal: reasoning dimmed when standard
/// error is a terminal (and `NO_COLOR` is unset); lines tidied across the
/// two streams in watch mode or when standard output is a terminal.
pub fn style(watch: bool) -> Style {
    Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        tidy_lines: watch || std::io::stdout().is_terminal(),
    }
}

/// The renderer of `new`, `send` and `tool-results`: the reply (to queued
/// message `awaiting_queued`, when it was queued) on standard output.
pub fn reply_renderer(
    awaiting_queued: Option<i64>,
    chat: &str,
    hint_url: Option<&str>,
) -> Renderer {
    Renderer::new(
        Mode::Reply { awaiting_queued },
        style(false),
        chat,
        hint_url,
    )
}

/// Exit 0, or print the error as `chatd chat` does and exit 1.
pub async fn report(run: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("chatd: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// `time` in RFC 3339, UTC, as the server writes it
/// (`2027-01-01T00:00:00Z`, fractional seconds only when there are any).
pub fn rfc3339(time: &DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// An RFC 3339 UTC time to the minute: `2027-01-01T00:00:00Z` →
/// `2027-01-01 00:00 UTC` (anything else as given).
pub fn utc_minute(time: &str) -> String {
    match (time.get(..10), time.get(10..11), time.get(11..16)) {
        (Some(day), Some("T"), Some(minute)) if time.ends_with('Z') => {
            format!("{day} {minute} UTC")
        }
        _ => time.to_owned(),
    }
}
