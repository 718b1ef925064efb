//! Logging set-up: `tracing` to standard error, human-readable or JSON
//! (`--log-format`, `CHATD_LOG_FORMAT`), filtered by `CHATD_LOG`, else
//! `RUST_LOG`, else `info` (`warn` for the `chatd chat` client; the `tracing_subscriber::EnvFilter` syntax, e.g.
//! `chatd=debug,sqlx=warn`).
//!
//! Standard output is kept for what a command prints as its result (the
//! token of `chatd token create`), so logs never mix with it.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The filter when neither `CHATD_LOG` nor `RUST_LOG` is set: `info`, but
/// without PostgreSQL's notices (such as "relation already exists,
/// skipping" on every start), which sqlx logs at `info`.
pub const DEFAULT_FILTER: &str = "info,sqlx::postgres::notice=warn";

/// The filter of the `chatd chat` client when neither `CHATD_LOG` nor
/// `RUST_LOG` is set: warnings only, so that replies printed on the
/// terminal are not interleaved with log lines.
pub const CLIENT_FILTER: &str = "warn";

/// Installs the global subscriber, filtered by `CHATD_LOG`, else
/// `RUST_LOG`, else `default_filter`. Call once, first thing.
///
/// # Errors
/// When the filter in `CHATD_LOG` or `RUST_LOG` does not parse.
pub fn init(format: LogFormat, default_filter: &str) -> anyhow::Result<()> {
    let directives = std::env::var("CHATD_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| default_filter.to_owned());
    let filter = EnvFilter::try_new(&directives)
        .map_err(|err| anyhow::anyhow!("invalid log filter {directives:?}: {err}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    Ok(())
}
