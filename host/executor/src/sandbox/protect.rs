//! The protected subpaths of writable roots: git's hooks and configuration (`.git/hooks`,
//! `.git/config`, `.gitmodules`, and a linked worktree's git directories'), which a later `git`
//! run by the user would execute or obey. Committing stays possible: objects, refs and the index
//! are not protected.
//!
//! In the namespace tier they are bound read-only ([`super::namespaces`]); in the Landlock tier,
//! which cannot carve them out of a writable root, the helper snapshots them before the command
//! and restores them once nothing of the command is left ([`Snapshot`]).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The most bytes a snapshot holds; beyond it the command is refused rather than left
/// unprotected.
const SNAPSHOT_LIMIT: u64 = 16 << 20;

/// The protected paths that exist under `writable`, looking in each root and in every directory
/// from `workdir` up to the root holding it.
pub(crate) fn find(writable: &[PathBuf], workdir: &Path) -> Vec<PathBuf> {
    let inside = |path: &Path| writable.iter().any(|root| path.starts_with(root));
    let mut dirs: Vec<PathBuf> = writable.to_vec();
    if let Ok(workdir) = std::fs::canonicalize(workdir) {
        let mut up = Some(workdir.as_path());
        while let Some(dir) = up.filter(|dir| inside(dir)) {
            dirs.push(dir.to_path_buf());
            up = dir.parent();
        }
    }
    let mut found = Vec::new();
    for dir in dirs {
        found.push(dir.join(".gitmodules"));
        let git = dir.join(".git");
        match std::fs::symlink_metadata(&git) {
            Ok(meta) if meta.is_dir() => {
                found.push(git.join("hooks"));
                found.push(git.join("config"));
            }
            Ok(meta) if meta.is_file() => {
                for gitdir in linked_git_dirs(&dir, &git) {
                    found.push(gitdir.join("hooks"));
                    found.push(gitdir.join("config"));
                    found.push(gitdir.join("config.worktree"));
                }
            }
            _ => {}
        }
    }
    let mut found: Vec<PathBuf> = found
        .into_iter()
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .filter_map(|path| std::fs::canonicalize(&path).ok().or(Some(path)))
        .filter(|path| inside(path))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// A linked worktree's git directory (from `.git`'s `gitdir:` line) and its common directory.
fn linked_git_dirs(worktree: &Path, dot_git: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(dot_git) else {
        return Vec::new();
    };
    let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir:")) else {
        return Vec::new();
    };
    let gitdir = worktree.join(gitdir.trim());
    let mut dirs = vec![gitdir.clone()];
    if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
        dirs.push(gitdir.join(common.trim()));
    }
    dirs.into_iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect()
}

/// What one protected path held.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        bytes: Vec<u8>,
        mode: u32,
    },
    Symlink(PathBuf),
    Dir {
        mode: u32,
        entries: BTreeMap<std::ffi::OsString, Entry>,
    },
    Missing,
}

/// The protected paths as they were before a command (Landlock tier).
#[derive(Debug)]
pub(crate) struct Snapshot {
    paths: Vec<(PathBuf, Entry)>,
}

impl Snapshot {
    pub(crate) fn take(paths: &[PathBuf]) -> io::Result<Snapshot> {
        let mut budget = SNAPSHOT_LIMIT;
        let paths = paths
            .iter()
            .map(|path| Ok((path.clone(), read(path, &mut budget)?)))
            .collect::<io::Result<_>>()?;
        Ok(Snapshot { paths })
    }

    /// Puts back every protected path the command changed; returns those it changed.
    pub(crate) fn restore(&self) -> Vec<PathBuf> {
        let mut changed = Vec::new();
        for (path, before) in &self.paths {
            let mut budget = SNAPSHOT_LIMIT;
            let now = read(path, &mut budget).unwrap_or(Entry::Missing);
            if now != *before {
                changed.push(path.clone());
                if let Err(err) = put_back(path, before) {
                    eprintln!(
                        "dsh-spawn-helper: could not restore {}: {err}",
                        path.display()
                    );
                }
            }
        }
        changed
    }
}

fn read(path: &Path, budget: &mut u64) -> io::Result<Entry> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Entry::Missing),
        Err(err) => return Err(err),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() {
        return Ok(Entry::Symlink(std::fs::read_link(path)?));
    }
    if meta.is_dir() {
        let mut entries = BTreeMap::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            entries.insert(entry.file_name(), read(&entry.path(), budget)?);
        }
        return Ok(Entry::Dir { mode, entries });
    }
    if !meta.is_file() || meta.len() > *budget {
        return Err(io::Error::other(format!(
            "{} is too large or not a regular file to protect",
            path.display()
        )));
    }
    *budget -= meta.len();
    Ok(Entry::File {
        bytes: std::fs::read(path)?,
        mode,
    })
}

fn remove(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn put_back(path: &Path, entry: &Entry) -> io::Result<()> {
    remove(path)?;
    match entry {
        Entry::Missing => Ok(()),
        Entry::Symlink(target) => std::os::unix::fs::symlink(target, path),
        Entry::File { bytes, mode } => {
            std::fs::write(path, bytes)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
        }
        Entry::Dir { mode, entries } => {
            std::fs::create_dir(path)?;
            for (name, entry) in entries {
                put_back(&path.join(name), entry)?;
            }
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
        }
    }
}
