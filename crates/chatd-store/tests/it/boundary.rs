//! The store's boundary (issue 32; ARCHITECTURE.md "chatd-store"): other
//! crates reach its SQL only through the front (`chatd_store::{chats,
//! messages, files, ...}`), never through `internals`, which exists for
//! these tests alone.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_other_crate_uses_the_store_internals() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(crates)
        .expect("crates/ is readable")
        .flatten()
    {
        if entry.file_name() != "chatd-store" {
            rust_files(&entry.path(), &mut files);
        }
    }
    assert!(
        files.len() > 50,
        "found only {} files under {crates:?}",
        files.len()
    );
    let offenders: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            text.contains("chatd_store::internals")
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "these files use chatd_store::internals (use the front instead): {offenders:?}"
    );
}
