//! The protected subpaths of writable roots: git's hooks and configuration (`.git/hooks`,
//! `.git/config`, `.gitmodules`, and a linked worktree's git directories'), which a later `git`
//! run by the user would execute or obey. Committing stays possible: objects, refs and the index
//! are not protected.
//!
//! In the namespace tier they are bound read-only ([`super::namespaces`]); in the Landlock tier,
//! which cannot carve them out of a writable root, the helper snapshots them before the command
//! and restores them once nothing of the command is left ([`Snapshot`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::landlock::Freshness;

/// The most bytes a snapshot holds; beyond it the command is refused rather than left
/// unprotected.
const SNAPSHOT_LIMIT: u64 = 16 << 20;

/// What to protect for one command.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Protected {
    /// Git directories under the roots: not to be renamed or replaced (they stay writable).
    pub(crate) anchors: Vec<PathBuf>,
    /// The protected paths, canonical, whether they exist or not (a hook directory or
    /// `.gitmodules` made by the command must not outlive it either).
    pub(crate) paths: Vec<PathBuf>,
}

/// The protected paths under `writable`, looking in each root, in every directory from
/// `workdir` up to the root holding it, and in the `nested` repositories ([`Nested`]).
pub(crate) fn find(writable: &[PathBuf], workdir: &Path, nested: &[PathBuf]) -> Protected {
    let inside = |path: &Path| {
        writable
            .iter()
            .any(|root| path.starts_with(root) && path != root)
    };
    let mut dirs: Vec<PathBuf> = writable.to_vec();
    if let Ok(workdir) = std::fs::canonicalize(workdir) {
        let mut up = Some(workdir.as_path());
        while let Some(dir) = up.filter(|dir| writable.iter().any(|r| dir.starts_with(r))) {
            dirs.push(dir.to_path_buf());
            up = dir.parent();
        }
    }
    dirs.extend(nested.iter().cloned());
    let mut found = Protected::default();
    for dir in dirs {
        let Ok(dir) = std::fs::canonicalize(&dir) else {
            continue;
        };
        found.paths.push(dir.join(".gitmodules"));
        let git = dir.join(".git");
        let mut git_dirs = match std::fs::symlink_metadata(&git) {
            Ok(meta) if meta.is_dir() => vec![git],
            // A `.git` file (a linked worktree, a submodule) or symlink: itself protected (it
            // names the git directory), and the git directory it names.
            Ok(meta) if meta.is_file() => {
                found.paths.push(git.clone());
                linked_git_dirs(&dir, &git)
            }
            Ok(meta) if meta.file_type().is_symlink() => {
                found.paths.push(git.clone());
                std::fs::canonicalize(&git)
                    .ok()
                    .filter(|target| target.is_dir())
                    .into_iter()
                    .collect()
            }
            _ => Vec::new(),
        };
        // Submodules' git directories live in `modules/` of their superproject's.
        // Linked worktrees' git directories live in `worktrees/` of the main one's.
        let mut i = 0;
        while i < git_dirs.len() && git_dirs.len() < MAX_GIT_DIRS {
            module_git_dirs(&git_dirs[i].join("modules"), 0, &mut git_dirs);
            if let Ok(entries) = std::fs::read_dir(git_dirs[i].join("worktrees")) {
                let worktrees: Vec<PathBuf> = entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect();
                git_dirs.extend(worktrees);
            }
            i += 1;
        }
        for git_dir in git_dirs {
            // `commondir` and `gitdir` would point git at another directory's hooks.
            for name in ["hooks", "config", "config.worktree", "commondir", "gitdir"] {
                found.paths.push(git_dir.join(name));
            }
            found.anchors.push(git_dir);
        }
    }
    for list in [&mut found.paths, &mut found.anchors] {
        list.retain(|path| inside(path));
        list.sort();
        list.dedup();
    }
    found
}

/// How deep below a writable root nested repositories are looked for, how many directories at
/// most are read doing so, and how many git directories are protected at most.
const NESTED_DEPTH: usize = 3;
const NESTED_DIRS: usize = 200;
const MAX_GIT_DIRS: usize = 256;

/// The repositories nested in the writable roots (a submodule's checkout, a repository inside
/// the workspace), and the directories read to find them as they were. Looked for by the spawn
/// helper while it waits for its command (a workspace of 51 directories took 0.3 ms to read
/// here), and looked for again only where one of those directories changed since
/// ([`Nested::current`]): a repository made by the previous command, or by the user meanwhile,
/// is protected all the same.
#[derive(Debug, Clone)]
pub(crate) struct Nested {
    pub(crate) repos: Vec<PathBuf>,
    read: Freshness,
}

impl Nested {
    /// Looks in `writable`, but `/tmp`, whose trees are scratch and would make this walk long.
    pub(crate) fn find(writable: &[PathBuf]) -> Nested {
        let mut nested = Nested {
            repos: Vec::new(),
            read: Freshness::start(),
        };
        for root in writable.iter().filter(|r| r.as_path() != Path::new("/tmp")) {
            nested_repositories(root, &mut nested.repos, &mut nested.read);
        }
        nested
    }

    /// Whether every directory read is as it was (and was not changed too close to the reading
    /// for its timestamp to tell).
    pub(crate) fn current(&self) -> bool {
        self.read.current()
    }
}

/// Directories holding a `.git` below `root` (not `root` itself), up to [`NESTED_DEPTH`] levels
/// down and [`NESTED_DIRS`] directories read, each recorded in `record` before it is read;
/// dependency and build trees are skipped.
fn nested_repositories(root: &Path, out: &mut Vec<PathBuf>, record: &mut Freshness) {
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), 0)]);
    let mut read = 0;
    while let Some((dir, depth)) = queue.pop_front() {
        if read >= NESTED_DIRS {
            break;
        }
        read += 1;
        record.read(&dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name();
            // A git directory, a file naming one (a submodule's checkout, a linked worktree)
            // or a symlink to one: [`find`] protects each.
            if name == ".git" && (kind.is_dir() || kind.is_file() || kind.is_symlink()) {
                if dir != root {
                    out.push(dir.clone());
                }
                continue;
            }
            if !kind.is_dir() {
                continue;
            }
            if depth + 1 < NESTED_DEPTH
                && name != "node_modules"
                && name != "target"
                && !name.as_bytes().starts_with(b".")
            {
                queue.push_back((entry.path(), depth + 1));
            }
        }
    }
}

/// Git directories (a `HEAD` inside) under a superproject's `modules/`, recursively.
fn module_git_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 4 || out.len() >= MAX_GIT_DIRS {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if path.join("HEAD").is_file() {
            out.push(path);
        } else {
            module_git_dirs(&path, depth + 1, out);
        }
    }
}

/// A linked worktree's git directory (from `.git`'s `gitdir:` line) and its common directory.
fn linked_git_dirs(worktree: &Path, dot_git: &Path) -> Vec<PathBuf> {
    let Some(text) = read_small(dot_git) else {
        return Vec::new();
    };
    let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir:")) else {
        return Vec::new();
    };
    let gitdir = worktree.join(gitdir.trim());
    let mut dirs = vec![gitdir.clone()];
    if let Some(common) = read_small(&gitdir.join("commondir")) {
        dirs.push(gitdir.join(common.trim()));
    }
    dirs.into_iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect()
}

/// A small regular file's text, read without following a symlink or blocking on a FIFO a
/// command may have put there.
fn read_small(path: &Path) -> Option<String> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// How deep and how many entries a protected directory may hold; beyond, it is refused (at the
/// snapshot) or put aside (at the restore) rather than walked.
const MAX_DEPTH: usize = 16;
const MAX_ENTRIES: usize = 4096;

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
        entries: BTreeMap<OsString, Entry>,
    },
    Missing,
}

/// The protected paths as they were before a command (Landlock tier), each as a writable root
/// and the path below it.
#[derive(Debug)]
pub(crate) struct Snapshot {
    paths: Vec<(PathBuf, PathBuf, Entry)>,
}

impl Snapshot {
    /// Snapshots `paths` (as [`find`] returns them: canonical, under one of `roots`).
    pub(crate) fn take(roots: &[PathBuf], paths: &[PathBuf]) -> io::Result<Snapshot> {
        let mut budget = SNAPSHOT_LIMIT;
        let mut taken = Vec::new();
        let mut walker = Walker::default();
        for path in paths {
            let Some(root) = roots
                .iter()
                .filter(|root| path.starts_with(root))
                .max_by_key(|root| root.as_os_str().len())
            else {
                continue;
            };
            let below = path
                .strip_prefix(root)
                .expect("under its root")
                .to_path_buf();
            let (dir, name) = walker.walk(root, &below, false)?;
            let entry = read_at(dir, &name, &mut budget)?;
            taken.push((root.clone(), below, entry));
        }
        Ok(Snapshot { paths: taken })
    }

    /// Puts back every protected path the command changed; returns those it changed. Every
    /// step is relative to a directory descriptor reached without following a symlink, so a
    /// command that swapped a directory on the way (`.git` itself) for a symlink cannot make this
    /// (unconfined) restore write anywhere else: such a symlink is replaced by a directory.
    pub(crate) fn restore(&self) -> Vec<PathBuf> {
        let mut changed = Vec::new();
        let mut walker = Walker::default();
        for (root, below, before) in &self.paths {
            let path = root.join(below);
            let mut restored = || -> io::Result<bool> {
                let (dir, name) = walker.walk(root, below, true)?;
                let mut budget = SNAPSHOT_LIMIT;
                let now = read_at(dir, &name, &mut budget).unwrap_or(Entry::Missing);
                if now == *before {
                    return Ok(false);
                }
                if remove_at(dir, &name).is_err() {
                    // Put aside under a name git gives no meaning to, then put back.
                    let mut aside = name.clone();
                    aside.push(format!(
                        ".dsh-removed-{}",
                        rustix::process::getpid().as_raw_nonzero()
                    ));
                    let _ = remove_at(dir, &aside);
                    rustix::fs::renameat(dir, &name, dir, &aside)?;
                }
                put_back_at(dir, &name, before)?;
                Ok(true)
            };
            match restored() {
                Ok(false) => {}
                Ok(true) => changed.push(path),
                Err(err) => {
                    changed.push(path.clone());
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

fn open_dir(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// [`walk`], keeping the directory last reached for the next path in it: the protected paths
/// come sorted, a git directory's together (`commondir`, `config`, `hooks`, ...).
#[derive(Default)]
struct Walker {
    last: Option<((PathBuf, PathBuf), OwnedFd)>,
}

impl Walker {
    fn walk(
        &mut self,
        root: &Path,
        below: &Path,
        repair: bool,
    ) -> io::Result<(&OwnedFd, OsString)> {
        let key = (
            root.to_path_buf(),
            below.parent().unwrap_or(below).to_path_buf(),
        );
        let name = last_part(below)?;
        if self.last.as_ref().is_none_or(|(last, _)| *last != key) {
            self.last = None;
            let (dir, _) = walk(root, below, repair)?;
            self.last = Some((key, dir));
        }
        let (_, dir) = self.last.as_ref().expect("just walked");
        Ok((dir, name))
    }
}

/// The last component of `below` (a path beneath a writable root, never the root itself).
fn last_part(below: &Path) -> io::Result<OsString> {
    below
        .file_name()
        .map(OsStr::to_os_string)
        .ok_or_else(|| io::Error::other("a protected path is a writable root itself"))
}

/// The directory holding `root/below`, reached component by component without following
/// symlinks, and the last component. With `repair`, a component that is no longer a directory
/// (a symlink or file the command put there) is removed and made a directory again.
fn walk(root: &Path, below: &Path, repair: bool) -> io::Result<(OwnedFd, OsString)> {
    let mut dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let name = last_part(below)?;
    let parts: Vec<&OsStr> = below.iter().collect();
    for &part in &parts[..parts.len() - 1] {
        dir = match open_dir(&dir, part) {
            Ok(next) => next,
            Err(err) if repair => {
                if err.raw_os_error() != Some(libc::ENOENT) {
                    remove_at(&dir, part)?;
                }
                rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755))?;
                open_dir(&dir, part)?
            }
            Err(err) => return Err(err),
        };
    }
    Ok((dir, name))
}

fn read_at(dir: &OwnedFd, name: &OsStr, budget: &mut u64) -> io::Result<Entry> {
    let mut entries = MAX_ENTRIES;
    read_bounded(dir, name, budget, &mut entries, 0)
}

fn read_bounded(
    dir: &OwnedFd,
    name: &OsStr,
    budget: &mut u64,
    left: &mut usize,
    depth: usize,
) -> io::Result<Entry> {
    if depth > MAX_DEPTH || *left == 0 {
        return Err(io::Error::other(
            "a protected directory is too deep or too large",
        ));
    }
    *left -= 1;
    let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(Entry::Missing),
        Err(err) => return Err(err.into()),
    };
    let mode = stat.st_mode & 0o7777;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Symlink => Ok(Entry::Symlink(PathBuf::from(OsString::from_vec(
            rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes(),
        )))),
        FileType::Directory => {
            let fd = open_dir(dir, name)?;
            let mut entries = BTreeMap::new();
            for entry in rustix::fs::Dir::read_from(&fd)? {
                let entry = entry?;
                let child = OsStr::from_bytes(entry.file_name().to_bytes());
                if child == "." || child == ".." {
                    continue;
                }
                entries.insert(
                    child.to_os_string(),
                    read_bounded(&fd, child, budget, left, depth + 1)?,
                );
            }
            Ok(Entry::Dir { mode, entries })
        }
        FileType::RegularFile if (stat.st_size as u64) <= *budget => {
            // Without blocking on a FIFO a command put there meanwhile.
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            // What was opened is what is read: a file replaced meanwhile (git renames its new
            // `config` into place) is read as it is now, if it is still a regular file.
            let opened = rustix::fs::fstat(&fd)?;
            if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
                return Err(io::Error::other(format!(
                    "{} is no regular file any more",
                    Path::new(name).display()
                )));
            }
            let mode = opened.st_mode & 0o7777;
            // Sized by the size just read, through `Take`, so that the whole file takes one
            // read and the end one more (a `File` asks the kernel its size again first).
            let mut bytes = Vec::with_capacity((opened.st_size as u64).min(*budget) as usize + 1);
            std::fs::File::from(fd)
                .take(*budget + 1)
                .read_to_end(&mut bytes)?;
            // Grown past what is left meanwhile: refused like one that was already.
            *budget = budget.checked_sub(bytes.len() as u64).ok_or_else(|| {
                io::Error::other(format!(
                    "{} is too large to protect",
                    Path::new(name).display()
                ))
            })?;
            Ok(Entry::File { bytes, mode })
        }
        _ => Err(io::Error::other(format!(
            "{} is too large or not a regular file to protect",
            Path::new(name).display()
        ))),
    }
}

/// Removes `name` in `dir` and, if a directory, everything in it, never following a symlink.
fn remove_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    remove_bounded(dir, name, 0)
}

fn remove_bounded(dir: &OwnedFd, name: &OsStr, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other("too deep to remove"));
    }
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(err) => Err(err.into()),
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
            // A directory the command made unreadable is still the helper's to empty.
            let _ = rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty());
            let fd = open_dir(dir, name)?;
            let children: Vec<OsString> = rustix::fs::Dir::read_from(&fd)?
                .filter_map(Result::ok)
                .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
                .filter(|n| n != "." && n != "..")
                .collect();
            for child in children {
                remove_bounded(&fd, &child, depth + 1)?;
            }
            Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
        }
        Ok(_) => Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
    }
}

fn put_back_at(dir: &OwnedFd, name: &OsStr, entry: &Entry) -> io::Result<()> {
    match entry {
        Entry::Missing => Ok(()),
        Entry::Symlink(target) => Ok(rustix::fs::symlinkat(target, dir, name)?),
        Entry::File { bytes, mode } => {
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut file = std::fs::File::from(fd);
            file.write_all(bytes)?;
            Ok(rustix::fs::fchmod(&file, Mode::from_raw_mode(*mode))?)
        }
        Entry::Dir { mode, entries } => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
            let fd = open_dir(dir, name)?;
            for (child, entry) in entries {
                put_back_at(&fd, child, entry)?;
            }
            Ok(rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode))?)
        }
    }
}
