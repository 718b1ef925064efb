//! Helpers shared by the examples that run `chatd serve` themselves (each
//! includes this module with `mod common;`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The `chatd` binary to run: `explicit` (`--chatd-bin`) when given, else
/// the one built next to the running example (`target/<profile>/chatd`).
/// Whether it exists is left to the caller.
///
/// # Errors
/// When the running example's path has no `target/<profile>` ancestor.
pub fn chatd_bin(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(bin) => Ok(bin.to_owned()),
        None => Ok(std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .context("locating target/<profile>")?
            .join("chatd")),
    }
}
