//! `chatd user passwd USERNAME [--admin] [--password-stdin]`: sets or
//! resets a user's sign-in password (API.md "Sign-in, search, sharing and
//! export"), creating the user when missing, on the database of a chatd
//! server, as `chatd token create` does ([`crate::token`]): the database
//! of `--postgres-url`, or the embedded cluster of the data directory,
//! never a new one ([`crate::database::Role::Tool`]). The user's existing
//! browser sessions end.
//!
//! The password is read without echo from the terminal, twice, or from
//! standard input with `--password-stdin` (one trailing line break
//! dropped); never from the command line, where `ps` would show it.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

use crate::config::DatabaseArgs;
use crate::database::{Database, Role};

/// `chatd user ...`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Set or reset a user's sign-in password (10 to 1,024 characters),
    /// creating the user when missing; ends the user's browser sessions.
    /// Works on the database of the chatd server (--data-dir or
    /// CHATD_DATA_DIR, else ~/.local/share/chatd; or --postgres-url), as
    /// `chatd token create` does.
    Passwd(PasswdArgs),
}

/// Flags of `chatd user passwd`.
#[derive(Debug, Args)]
pub struct PasswdArgs {
    /// The user's name (1 to 64 characters).
    #[arg(value_name = "USERNAME")]
    pub username: String,
    /// Make the user an admin (creating it as one, or promoting an
    /// existing member; never demotes).
    #[arg(long)]
    pub admin: bool,
    /// Read the password from standard input (all of it, less one
    /// trailing line break) instead of asking on the terminal.
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// Runs a `chatd user` command.
///
/// # Errors
/// No password could be read (standard input is not a terminal and
/// `--password-stdin` was not given; the two entries differ; an empty
/// password), the database cannot be opened (no chatd database in the
/// data directory: [`Database::open`]), or the password is refused (its
/// length) or cannot be stored.
pub async fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Passwd(args) => passwd(args).await,
    }
}

async fn passwd(args: PasswdArgs) -> anyhow::Result<()> {
    let username = args.username.trim().to_owned();
    anyhow::ensure!(!username.is_empty(), "the username is empty");
    let password = if args.password_stdin {
        read_password_stdin()?
    } else {
        ask_password(&username).await?
    };
    let database = Database::open(&args.database, Role::Tool, 2).await?;
    let set = async {
        chatd_store::migrate(&database.pool)
            .await
            .context("applying migrations")?;
        chatd_api::auth::set_password(&database.pool, &username, &password, args.admin)
            .await
            .with_context(|| format!("setting the password of {username:?}"))
    }
    .await;
    let closed = database.close().await;
    set?;
    println!("password set for {username}");
    if let Err(err) = closed {
        // The password is stored; only the cleanup failed.
        tracing::warn!("{err:#}");
    }
    Ok(())
}

/// The password on standard input: all of it, less one trailing `\n` or
/// `\r\n`.
///
/// # Errors
/// Standard input cannot be read, or the password is empty.
fn read_password_stdin() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the password from standard input")?;
    let password = strip_line_break(&text).to_owned();
    anyhow::ensure!(
        !password.is_empty(),
        "no password on standard input (--password-stdin)"
    );
    Ok(password)
}

/// `text` without one trailing `\n` or `\r\n`.
fn strip_line_break(text: &str) -> &str {
    text.strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(text)
}

/// Asks for the password twice on the terminal, without echo.
///
/// # Errors
/// Standard input is not a terminal (the message names
/// `--password-stdin`), the entries differ, or the password is empty.
async fn ask_password(username: &str) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "standard input is not a terminal: pass --password-stdin to read the password \
             from it (for example `printf '%s\\n' \"$PASSWORD\" | chatd user passwd {username} \
             --password-stdin`)"
        );
    }
    let prompt = format!("New password for {username}: ");
    let first = read_hidden(prompt).await?;
    anyhow::ensure!(
        !first.is_empty(),
        "the password is empty; nothing was changed"
    );
    let second = read_hidden("Repeat it: ".to_owned()).await?;
    if first != second {
        bail!("the two passwords differ; nothing was changed");
    }
    Ok(first)
}

/// Prints `prompt` on standard error and reads a line from the terminal on
/// standard input with echo off (restored afterwards, also when Ctrl-C
/// ends the command: exit 130).
///
/// # Errors
/// The terminal's settings cannot be read or changed, or the line cannot
/// be read.
async fn read_hidden(prompt: String) -> anyhow::Result<String> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let saved = tcgetattr(std::io::stdin()).context("reading the terminal's settings")?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    {
        let mut err = std::io::stderr().lock();
        err.write_all(prompt.as_bytes())?;
        err.flush()?;
    }
    tcsetattr(std::io::stdin(), SetArg::TCSAFLUSH, &quiet)
        .context("turning the terminal's echo off")?;
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    });
    let line = tokio::select! {
        line = read => line,
        _ = tokio::signal::ctrl_c() => {
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSAFLUSH, &saved);
            eprintln!();
            std::process::exit(130);
        }
    };
    let restored = tcsetattr(std::io::stdin(), SetArg::TCSAFLUSH, &saved);
    let line = line
        .context("reading the password")?
        .context("reading the password")?;
    restored.context("restoring the terminal's echo")?;
    Ok(strip_line_break(&line).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_line_break_is_dropped() {
        assert_eq!(strip_line_break("secret pass\n"), "secret pass");
        assert_eq!(strip_line_break("secret pass\r\n"), "secret pass");
        assert_eq!(strip_line_break("secret pass\n\n"), "secret pass\n");
        assert_eq!(strip_line_break(" spaces kept "), " spaces kept ");
    }
}
