//! The local workspace directory against its committed state (API.md
//! "Workspaces and provider-hosted tools": what a step's tools changed is
//! committed with that step; a replica that takes the chat over continues
//! with the same files).
//!
//! A [`Manifest`] maps each relative path to an [`Entry`] (kind, SHA-256 of
//! the content, size, executable bit). [`LocalWorkspace::scan`] walks the
//! directory without following symlinks and rehashes only the entries whose
//! `(size, mtime, ctime, inode, mode)` changed since the last scan or apply;
//! [`LocalWorkspace::diff`] gives the [`Change`]s from a committed manifest
//! to the directory (what a step commits); [`LocalWorkspace::apply`] makes
//! the directory exactly a committed manifest.
//!
//! Only files, directories and symlinks are part of a workspace: a scan
//! leaves FIFOs, sockets and devices out of the manifest (and on disk), and
//! an apply deletes them like any entry the target does not have.
//! Every write and delete of [`LocalWorkspace::apply`] goes through a cap-std
//! [`Dir`] of the root, so a symlink in the directory never leads them out.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt, Permissions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The kind of a workspace entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (listed even when empty).
    Dir,
    /// A symbolic link; its content is its target, never followed.
    Symlink,
}

/// One path of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// File, directory or symlink.
    pub kind: EntryKind,
    /// SHA-256 of the content: a file's bytes, a symlink's target, the empty
    /// string for a directory.
    pub sha256: [u8; 32],
    /// The content's length in bytes (0 for a directory).
    pub bytes: u64,
    /// A file's executable bit (any of `0o111`); false for the other kinds.
    pub executable: bool,
}

impl Entry {
    /// The entry of a directory.
    pub fn dir() -> Entry {
        Entry {
            kind: EntryKind::Dir,
            sha256: sha256(b""),
            bytes: 0,
            executable: false,
        }
    }

    /// The entry of a file with these bytes.
    pub fn file(content: &[u8], executable: bool) -> Entry {
        Entry {
            kind: EntryKind::File,
            sha256: sha256(content),
            bytes: content.len() as u64,
            executable,
        }
    }

    /// The entry of a symlink to `target` (its bytes).
    pub fn symlink(target: &[u8]) -> Entry {
        Entry {
            kind: EntryKind::Symlink,
            sha256: sha256(target),
            bytes: target.len() as u64,
            executable: false,
        }
    }

    /// Whether reaching `self` from `other` needs content (a file or symlink
    /// whose kind or bytes differ); an executable bit alone does not.
    fn needs_content_over(&self, other: Option<&Entry>) -> bool {
        self.kind != EntryKind::Dir
            && other.is_none_or(|o| o.kind != self.kind || o.sha256 != self.sha256)
    }
}

/// The state of a workspace: relative `/`-separated path → entry. Parents
/// sort before their children.
pub type Manifest = BTreeMap<String, Entry>;

/// One difference between two manifests, as a step commits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The path is created or replaced.
    Put {
        /// Relative, `/`-separated.
        path: String,
        /// Its new entry.
        entry: Entry,
        /// A file's bytes, a symlink's target, empty for a directory.
        content: Vec<u8>,
    },
    /// The path (and for a directory, everything under it) is gone.
    Delete {
        /// Relative, `/`-separated.
        path: String,
    },
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// What a cached hash is valid for: any change of content changes one of
/// these (ctime cannot be set back by a process, unlike mtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    mode: u32,
}

impl StatKey {
    fn of(meta: &std::fs::Metadata) -> StatKey {
        StatKey {
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
            ino: meta.ino(),
            mode: meta.mode(),
        }
    }
}

/// A change within this long before a scan may share its timestamp with a
/// later change of the same size (the kernel's file times are coarse):
/// such entries are hashed again by the next scan.
const RACY_NS: i128 = 2_000_000_000;

/// The chat's workspace directory on this replica, with a cache of the
/// hashes of its entries.
#[derive(Debug)]
pub struct LocalWorkspace {
    root: PathBuf,
    known: HashMap<String, (StatKey, Entry)>,
    last: Manifest,
    unkept: Vec<String>,
    unkept_count: usize,
    special: Vec<String>,
    special_count: usize,
    /// Entries of the last scan that a checkout would not make as they
    /// are: files with other hard links or a mode other than 0o644/0o755,
    /// directories with a mode other than 0o755.
    irregular: std::collections::HashSet<String>,
}

/// How many of the names the last scan left out [`LocalWorkspace::unkept`]
/// keeps (it counts them all).
const UNKEPT_SHOWN: usize = 5;

impl LocalWorkspace {
    /// Opens (and creates, mode 0o755, with its parents) the directory
    /// `root`. The cache starts empty: the first scan hashes everything.
    pub fn open(root: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        let meta = std::fs::metadata(&root)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
        Ok(LocalWorkspace {
            root,
            known: HashMap::new(),
            last: Manifest::new(),
            unkept: Vec::new(),
            unkept_count: 0,
            special: Vec::new(),
            special_count: 0,
            irregular: Default::default(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The entries the last scan left out because their names (relative to
    /// the root) are not UTF-8: how many, and the first few, lossily
    /// decoded (U+FFFD for each bad byte). They are not part of the
    /// workspace: a diff does not see them and an apply deletes them.
    pub fn unkept(&self) -> (usize, &[String]) {
        (self.unkept_count, &self.unkept)
    }

    /// The FIFOs, sockets and devices the last scan left out (only files,
    /// directories and symlinks are kept): how many, and the first few
    /// paths. A diff does not see them and an apply deletes them.
    pub fn special(&self) -> (usize, &[String]) {
        (self.special_count, &self.special)
    }

    /// Walks the directory (symlinks not followed; FIFOs, sockets and
    /// devices left out) and returns its manifest, hashing only the entries
    /// new or changed since the last scan or apply.
    ///
    /// Errors: the directory cannot be walked or a file read.
    pub fn scan(&mut self) -> io::Result<Manifest> {
        let started = now_ns();
        let dir = self.dir()?;
        let mut manifest = Manifest::new();
        let mut known = HashMap::new();
        let (mut unkept, mut unkept_count) = (Vec::new(), 0);
        let mut irregular = std::collections::HashSet::new();
        let (mut special, mut special_count) = (Vec::new(), 0);
        let mut walker = walkdir::WalkDir::new(&self.root)
            .follow_links(false)
            .min_depth(1)
            .sort_by_file_name()
            .into_iter();
        while let Some(item) = walker.next() {
            let item = item.map_err(io::Error::other)?;
            let Some(rel) = relative(&self.root, item.path()) else {
                // Not UTF-8: not part of the workspace (an apply deletes it).
                unkept_count += 1;
                if unkept.len() < UNKEPT_SHOWN {
                    let name = item.path().strip_prefix(&self.root).unwrap_or(item.path());
                    unkept.push(name.to_string_lossy().into_owned());
                }
                if item.file_type().is_dir() {
                    walker.skip_current_dir();
                }
                continue;
            };
            let meta = match item.metadata() {
                Ok(meta) => meta,
                // Deleted between the readdir and the lstat.
                Err(e) if e.io_error().map(io::Error::kind) == Some(io::ErrorKind::NotFound) => {
                    continue;
                }
                Err(e) => return Err(io::Error::other(e)),
            };
            let key = StatKey::of(&meta);
            let file_type = meta.file_type();
            let entry = if file_type.is_dir() {
                Entry::dir()
            } else if !(file_type.is_file() || file_type.is_symlink()) {
                special_count += 1;
                if special.len() < UNKEPT_SHOWN {
                    special.push(rel);
                }
                continue;
            } else if let Some((cached_key, cached)) = self.known.get(&rel)
                && *cached_key == key
            {
                cached.clone()
            } else {
                match read_entry(&dir, &rel)? {
                    Some((entry, _)) => entry,
                    None => continue,
                }
            };
            if key.ctime_ns.max(key.mtime_ns) < started - RACY_NS {
                known.insert(rel.clone(), (key, entry.clone()));
            }
            let mode = meta.mode() & 0o7777;
            let regular = match entry.kind {
                EntryKind::Dir => mode == 0o755,
                EntryKind::File => {
                    meta.nlink() == 1 && mode == if entry.executable { 0o755 } else { 0o644 }
                }
                EntryKind::Symlink => true,
            };
            if !regular {
                irregular.insert(rel.clone());
            }
            manifest.insert(rel, entry);
        }
        self.known = known;
        self.last = manifest.clone();
        self.unkept = unkept;
        self.unkept_count = unkept_count;
        self.irregular = irregular;
        self.special = special;
        self.special_count = special_count;
        Ok(manifest)
    }

    /// Scans, then returns the changes that turn `base` into the directory's
    /// state: deletes first (children before their parents), then puts in
    /// path order (parents first), with contents read. A file that changes
    /// while it is read is put with the entry of the bytes read.
    ///
    /// Errors: those of [`LocalWorkspace::scan`], or a changed entry cannot
    /// be read.
    pub fn diff(&mut self, base: &Manifest) -> io::Result<Vec<Change>> {
        let current = self.scan()?;
        let dir = self.dir()?;
        let mut changes: Vec<Change> = base
            .keys()
            .rev()
            .filter(|path| !current.contains_key(*path))
            .map(|path| Change::Delete { path: path.clone() })
            .collect();
        for (path, entry) in &current {
            if base.get(path) == Some(entry) {
                continue;
            }
            if entry.kind == EntryKind::Dir {
                changes.push(Change::Put {
                    path: path.clone(),
                    entry: entry.clone(),
                    content: Vec::new(),
                });
                continue;
            }
            match read_entry(&dir, path)? {
                Some((entry, content)) => changes.push(Change::Put {
                    path: path.clone(),
                    entry,
                    content,
                }),
                // Gone since the scan: the next diff sees it as deleted.
                None if base.contains_key(path) => {
                    changes.push(Change::Delete { path: path.clone() });
                }
                None => {}
            }
        }
        Ok(changes)
    }

    /// After a scan: the paths of `target` whose content must be fetched to
    /// reach it (files and symlinks absent here or with other content; an
    /// executable bit alone needs nothing), in path order.
    pub fn missing(&self, target: &Manifest) -> io::Result<Vec<String>> {
        Ok(target
            .iter()
            .filter(|(path, entry)| entry.needs_content_over(self.last.get(*path)))
            .map(|(path, _)| path.clone())
            .collect())
    }

    /// Makes the directory exactly `target`, as a checkout into an empty
    /// directory would: deletes every entry `target` does not have (or has
    /// with another kind or symlink target), creates directories, writes
    /// files and symlinks whose content differs from `contents` (keyed by
    /// path), sets each file's mode (0o755 or 0o644, by its executable
    /// bit) and each directory's (0o755), and gives a file that has other
    /// hard links an inode of its own.
    ///
    /// Errors: a needed content is missing from `contents` or does not match
    /// its entry's SHA-256 (`InvalidData`; the directory may then be
    /// partly updated, and a later apply finishes the job), or an I/O error.
    pub fn apply(
        &mut self,
        target: &Manifest,
        contents: &HashMap<String, Vec<u8>>,
    ) -> io::Result<()> {
        let current = self.scan()?;
        // Check every content before touching anything.
        for (path, entry) in target {
            if entry.needs_content_over(current.get(path)) {
                let content = contents.get(path).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the content of {path} is missing"),
                    )
                })?;
                if sha256(content) != entry.sha256 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the content of {path} does not match its SHA-256"),
                    ));
                }
            }
        }
        let dir = self.dir()?;
        // Deletes, children before parents, so a removed directory is empty
        // by then; special files (not in the scan) go through the walk below.
        for (path, entry) in current.iter().rev() {
            let keep = target.get(path).is_some_and(|t| {
                t.kind == entry.kind && (t.kind != EntryKind::Symlink || t.sha256 == entry.sha256)
            });
            if !keep {
                remove(&dir, path, entry.kind)?;
            }
        }
        remove_special_files(&dir)?;
        let irregular = std::mem::take(&mut self.irregular);
        for (path, entry) in target {
            let here = current
                .get(path)
                .filter(|c| c.kind == entry.kind && c.sha256 == entry.sha256);
            match entry.kind {
                EntryKind::Dir => {
                    if here.is_none() {
                        dir.create_dir_all(path)?;
                    }
                    if irregular.contains(path) {
                        dir.set_permissions(
                            path,
                            Permissions::from_std(std::fs::Permissions::from_mode(0o755)),
                        )?;
                    }
                }
                EntryKind::Symlink => {
                    if here.is_none() {
                        let target = Path::new(OsStr::from_bytes(&contents[path]));
                        dir.symlink_contents(target, path)?;
                    }
                }
                EntryKind::File => {
                    let odd = here.is_some() && irregular.contains(path);
                    if odd {
                        // Another hard link to it, or an odd mode: a file
                        // of its own, as a checkout elsewhere makes it
                        // (its content is the target's already).
                        if let Some((_, content)) = read_entry(&dir, path)? {
                            dir.remove_file(path)?;
                            write_file(&dir, path, &content)?;
                        }
                    } else if here.is_none() {
                        write_file(&dir, path, &contents[path])?;
                    }
                    // Only where the bit differs: a chmod changes the
                    // file's ctime even to the same mode, and the stat
                    // cache would hash every file again (bench_workspace).
                    if odd || here.is_none_or(|c| c.executable != entry.executable) {
                        let mode = if entry.executable { 0o755 } else { 0o644 };
                        dir.set_permissions(
                            path,
                            Permissions::from_std(std::fs::Permissions::from_mode(mode)),
                        )?;
                    }
                }
            }
        }
        self.scan()?;
        Ok(())
    }

    /// The sum of the entries' bytes (files' sizes and symlinks' target
    /// lengths), what counts against `--max-workspace-bytes`.
    pub fn total_bytes(manifest: &Manifest) -> u64 {
        manifest.values().map(|e| e.bytes).sum()
    }

    fn dir(&self) -> io::Result<Dir> {
        Dir::open_ambient_dir(&self.root, ambient_authority())
    }
}

/// Reads a file or symlink beneath `dir` without following a symlink in its
/// last component: `None` when it is gone or became another kind.
fn read_entry(dir: &Dir, rel: &str) -> io::Result<Option<(Entry, Vec<u8>)>> {
    let meta = match dir.symlink_metadata(rel) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        let target = match dir.read_link_contents(rel) {
            Ok(target) => target,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bytes = target.into_os_string().into_encoded_bytes();
        return Ok(Some((Entry::symlink(&bytes), bytes)));
    }
    if !meta.is_file() {
        return Ok(None);
    }
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    let mut file = match dir.open_with(rel, &options) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut content = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut content)?;
    let executable = cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0;
    Ok(Some((Entry::file(&content, executable), content)))
}

fn write_file(dir: &Dir, rel: &str, content: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    let mut file = dir.open_with(rel, &options)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!("{rel} is not a regular file")));
    }
    file.write_all(content)?;
    file.flush()
}

fn remove(dir: &Dir, rel: &str, kind: EntryKind) -> io::Result<()> {
    let result = match kind {
        EntryKind::Dir => dir.remove_dir_all(rel),
        EntryKind::File | EntryKind::Symlink => dir.remove_file(rel),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Deletes FIFOs, sockets, devices and entries whose name is not UTF-8
/// anywhere beneath `dir`: none of them can be in a manifest.
fn remove_special_files(dir: &Dir) -> io::Result<()> {
    for entry in dir.entries()? {
        let entry = entry?;
        let file_type = entry.file_type()?;
        let name = entry.file_name();
        if name.to_str().is_none() {
            if file_type.is_dir() {
                dir.remove_dir_all(&name)?;
            } else {
                dir.remove_file(&name)?;
            }
            continue;
        }
        if file_type.is_dir() {
            remove_special_files(&entry.open_dir()?)?;
        } else if !(file_type.is_file() || file_type.is_symlink()) {
            entry.remove_file()?;
        }
    }
    Ok(())
}

/// `path` relative to `root`, `None` when it is not UTF-8.
fn relative(root: &Path, path: &Path) -> Option<String> {
    path.strip_prefix(root).ok()?.to_str().map(str::to_owned)
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}
