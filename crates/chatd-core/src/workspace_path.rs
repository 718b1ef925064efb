//! Paths inside a chat's workspace (API.md "Workspaces and provider-hosted
//! tools": "Paths are relative to the workspace's root; an absolute path,
//! or one that leaves the workspace, is an error"): the one check and
//! normalization that the workspace tools (`chatd_tools::workspace`) and
//! the file route (`GET /chats/{chat}/workspace/file?path=`) share, so a
//! path the model wrote is found under the same name by the API.

/// The longest path accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// Why [`normalize`] refused a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Longer than [`MAX_PATH_BYTES`] (the length in bytes).
    #[error("the path is {0} bytes long; at most {MAX_PATH_BYTES} are allowed")]
    TooLong(usize),
    /// Holds a NUL byte.
    #[error("the path contains a NUL byte")]
    Nul,
    /// Starts with `/`.
    #[error("the path is absolute; paths are relative to the workspace's root")]
    Absolute,
    /// Has a `..` component.
    #[error("the path contains `..`; paths cannot leave the workspace")]
    Parent,
    /// Empty, or only `.` and slashes (the root itself).
    #[error("the path is empty; name a file relative to the workspace's root")]
    Empty,
}

/// Checks a workspace path and returns it normalized: relative,
/// `/`-separated, without `.` components, repeated or trailing slashes
/// (`./src//main.rs/` is `src/main.rs`).
///
/// # Errors
/// [`PathError`]: too long, a NUL byte, absolute, a `..` component, or
/// nothing left after normalizing.
pub fn normalize(path: &str) -> Result<String, PathError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong(path.len()));
    }
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute);
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(PathError::Parent),
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(PathError::Empty);
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_and_escapes_refused() {
        assert_eq!(normalize("./src//main.rs/").unwrap(), "src/main.rs");
        assert_eq!(normalize("a/./b").unwrap(), "a/b");
        assert_eq!(normalize("..a/b..").unwrap(), "..a/b..");
        assert_eq!(normalize("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(normalize("a/../../b"), Err(PathError::Parent));
        assert_eq!(normalize(".."), Err(PathError::Parent));
        assert_eq!(normalize("./"), Err(PathError::Empty));
        assert_eq!(normalize(""), Err(PathError::Empty));
        assert_eq!(normalize("a\0b"), Err(PathError::Nul));
        let long = "a".repeat(MAX_PATH_BYTES + 1);
        assert_eq!(
            normalize(&long),
            Err(PathError::TooLong(MAX_PATH_BYTES + 1))
        );
        assert!(normalize(&"a".repeat(MAX_PATH_BYTES)).is_ok());
    }
}
