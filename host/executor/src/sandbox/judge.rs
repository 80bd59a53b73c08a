//! Whether the sandbox is what refuses an operation, judged by the spawn helper on the path the
//! kernel will resolve for the command: outside the writable roots, a denied read, a protected
//! git path. Only for reporting: the kernel enforces the sandbox whatever this says. So that a
//! report is never a guess, an operation is named only when the policy refuses it *and*
//! nothing else would: the file (or, to create or remove, its directory) exists, and its
//! permissions allow the access (a mode-000 directory is the user's refusal, not the
//! sandbox's).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::landlock::GrantLookup;
use crate::{Denial, DenialReason, DeniedAccess};

/// What the policy lets one command do, with every path resolved as the kernel sees it.
#[derive(Debug, Clone)]
pub(crate) struct Judge {
    /// Beneath these, changes are allowed (the roots and the private `TMPDIR`).
    pub(crate) writable: Vec<PathBuf>,
    /// These devices may be written.
    pub(crate) devices: Vec<PathBuf>,
    /// Beneath these, files cannot be read (directories can be listed).
    pub(crate) denied: Vec<PathBuf>,
    /// Readable again although beneath a denied path (the private `TMPDIR`).
    pub(crate) readable: Vec<PathBuf>,
    /// Bound read-only inside the writable roots (namespace tier).
    pub(crate) protected: Vec<PathBuf>,
    /// Whether the sandbox made every mount outside the roots read-only (namespace tier), so
    /// that a read-only mount is the sandbox's refusal; elsewhere it is the machine's.
    pub(crate) read_only_mounts: bool,
    /// What each Landlock layer that handles reading granted entry by entry.
    pub(crate) grants: Vec<GrantLookup>,
}

/// Where a path argument is resolved from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Base {
    /// The process's working directory.
    Cwd,
    /// One of its descriptors.
    Fd(i32),
}

/// One file operation, as the command asked it.
#[derive(Debug)]
pub(crate) enum Operation {
    /// `open` and its kin, with their flags.
    Open { flags: u64 },
    /// Writing an existing file without opening it (`truncate`).
    Truncate,
    /// Making a new entry (`mkdir`, `mknod`, `symlink`, `link`'s new name).
    Create,
    /// Making an entry that may replace one (`rename`'s new name).
    Replace,
    /// Removing an entry (`unlink`, `rmdir`, `rename`'s old name).
    Remove,
}

/// Where the resolution of a path argument starts, opened while the process still waits for
/// the answer (its working directory or descriptor may change once it goes on).
pub(crate) enum Start {
    /// An absolute path: the root (a command cannot change its root).
    Root,
    /// The directory a relative path starts from, seen through `/proc`.
    Dir(OwnedFd),
}

impl Start {
    /// Opens where `path`, an argument of process `pid` relative to `base`, starts.
    pub(crate) fn open(pid: u32, base: Base, path: &[u8]) -> Option<Start> {
        if path.first() == Some(&b'/') {
            return Some(Start::Root);
        }
        let link = match base {
            Base::Cwd => format!("/proc/{pid}/cwd"),
            Base::Fd(fd) => format!("/proc/{pid}/fd/{fd}"),
        };
        rustix::fs::open(
            link.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(Start::Dir)
    }

    /// The directory to resolve from, `root` for an absolute path.
    pub(crate) fn fd<'a>(&'a self, root: BorrowedFd<'a>) -> BorrowedFd<'a> {
        match self {
            Start::Root => root,
            Start::Dir(fd) => fd.as_fd(),
        }
    }
}

/// A path argument of a process, ready to be resolved in the helper.
pub(crate) struct Target<'a> {
    /// The directory it is resolved from.
    pub(crate) base: BorrowedFd<'a>,
    pub(crate) path: &'a [u8],
}

impl Judge {
    /// The denial `operation` on `target` meets, if the sandbox is what refuses it.
    pub(crate) fn judge(&self, target: &Target<'_>, operation: &Operation) -> Option<Denial> {
        if target.path.is_empty() {
            return None;
        }
        let base = target.base;
        match operation {
            Operation::Open { flags } => self.open(base, target.path, *flags),
            Operation::Truncate => {
                let file = resolve(base, target.path, true)?;
                self.write_existing(&file)
            }
            Operation::Create => self.entry(base, target.path, Some(false)),
            Operation::Replace => self.entry(base, target.path, None),
            Operation::Remove => self.entry(base, target.path, Some(true)),
        }
    }

    /// Whether `target` names something (not following a final symbolic link): a call whose
    /// source is missing fails with `ENOENT` before any sandbox check.
    pub(crate) fn exists(&self, target: &Target<'_>) -> bool {
        !target.path.is_empty() && resolve(target.base, target.path, false).is_some()
    }

    fn open(&self, base: BorrowedFd<'_>, path: &[u8], flags: u64) -> Option<Denial> {
        let flags = OFlags::from_bits_retain(flags as u32);
        if flags.contains(OFlags::PATH) || flags.contains(OFlags::TMPFILE) {
            return None;
        }
        let writes = flags.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC);
        // Read access: all but write-only (`O_ACCMODE` 3 asks for both).
        let reads = (flags.bits() & libc::O_ACCMODE as u32) != libc::O_WRONLY as u32;
        let creates = flags.contains(OFlags::CREATE);
        let exclusive = creates && flags.contains(OFlags::EXCL);
        let follow = !flags.contains(OFlags::NOFOLLOW) && !exclusive;
        match resolve(base, path, follow) {
            Some(file) => {
                // EEXIST, ELOOP (a symbolic link not followed) or EISDIR, whatever the sandbox
                // says.
                // (Or ENOTDIR.) An exclusive create finding the file may have made it itself: an
                // open that creates and reads is judged below while the file is still missing.
                if exclusive
                    || file.is_link
                    || (writes && file.is_dir)
                    || (flags.contains(OFlags::DIRECTORY) && !file.is_dir)
                {
                    return None;
                }
                if writes {
                    let denied = self.write_existing(&file);
                    // Opened for reading too: refused where reading is.
                    if denied.is_some() || !reads {
                        return denied;
                    }
                }
                self.read_existing(&file)
            }
            None if creates => self
                .entry(base, path, Some(false))
                .or_else(|| reads.then(|| self.made_unreadable(base, path)).flatten()),
            None => None,
        }
    }

    /// An open that makes a file and reads it: the file is made, then refused where the read
    /// layers hold no grant on the way to it (beside a denied path).
    fn made_unreadable(&self, base: BorrowedFd<'_>, path: &[u8]) -> Option<Denial> {
        let (dir, _, real) = new_entry(base, path)?;
        self.read_reason(&real)
            .filter(|reason| *reason == DenialReason::CreatedAfterSetup)
            .and_then(|reason| {
                refusal(
                    &dir,
                    libc::W_OK | libc::X_OK,
                    self.read_only_mounts,
                    (DeniedAccess::Read, &real, reason),
                )
            })
    }

    fn write_existing(&self, file: &Resolved) -> Option<Denial> {
        let reason = if self.protected.iter().any(|p| file.real.starts_with(p)) {
            DenialReason::ProtectedPath
        } else if self.writable.iter().any(|r| file.real.starts_with(r))
            || self.devices.contains(&file.real)
        {
            return None;
        } else {
            DenialReason::OutsideWritableRoots
        };
        refusal(
            file,
            libc::W_OK,
            self.read_only_mounts,
            (DeniedAccess::Write, &file.real, reason),
        )
    }

    fn read_existing(&self, file: &Resolved) -> Option<Denial> {
        // Listing is allowed everywhere.
        if file.is_dir {
            return None;
        }
        let reason = self.read_reason(&file.real)?;
        refusal(
            file,
            libc::R_OK,
            self.read_only_mounts,
            (DeniedAccess::Read, &file.real, reason),
        )
    }

    /// Why the sandbox refuses reading the file at `real`, if it does.
    fn read_reason(&self, real: &Path) -> Option<DenialReason> {
        if self.readable.iter().any(|r| real.starts_with(r)) {
            None
        } else if self.denied.iter().any(|d| real.starts_with(d)) {
            Some(DenialReason::DeniedRead)
        } else if self.grants.iter().any(|g| {
            // What the command cannot rename or replace: nothing beneath a writable root (a root
            // itself: its parent is not writable, or is beneath another root).
            g.refuses(real, |dir| {
                !self
                    .writable
                    .iter()
                    .any(|root| dir.starts_with(root) && dir != root)
            })
        }) {
            Some(DenialReason::CreatedAfterSetup)
        } else {
            None
        }
    }

    /// Making or removing an entry, judged on the directory that holds it; `must_exist`: whether
    /// the entry must be there (to remove) or not (to make), if it matters.
    fn entry(&self, base: BorrowedFd<'_>, path: &[u8], must_exist: Option<bool>) -> Option<Denial> {
        let (dir, name, real) = new_entry(base, path)?;
        let exists =
            rustix::fs::statat(&dir.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok();
        // Making what exists fails with EEXIST, removing what does not with ENOENT.
        if must_exist.is_some_and(|must| must != exists) {
            return None;
        }
        let reason = if self
            .protected
            .iter()
            .any(|p| real.starts_with(p) || dir.real.starts_with(p))
        {
            DenialReason::ProtectedPath
        } else if self.writable.iter().any(|r| dir.real.starts_with(r)) {
            return None;
        } else {
            DenialReason::OutsideWritableRoots
        };
        refusal(
            &dir,
            libc::W_OK | libc::X_OK,
            self.read_only_mounts,
            (DeniedAccess::Write, &real, reason),
        )
    }
}

/// The directory an entry named by `path` is in, resolved, its name, and where the entry is
/// (or would be) really; none for `.`, `..` or a directory that is not one.
fn new_entry<'p>(base: BorrowedFd<'_>, path: &'p [u8]) -> Option<(Resolved, &'p [u8], PathBuf)> {
    let (parent, name) = split(path)?;
    if name == b"." || name == b".." {
        return None;
    }
    let dir = resolve(base, parent, true)?;
    if !dir.is_dir {
        return None;
    }
    let real = dir.real.join(OsStr::from_bytes(name));
    Some((dir, name, real))
}

/// The denial of `what` (access, target, reason), if `checked`'s permissions allow `mode`:
/// otherwise the refusal is the file's own, not the sandbox's.
fn refusal(
    checked: &Resolved,
    mode: i32,
    read_only_mounts: bool,
    (access, target, reason): (DeniedAccess, &Path, DenialReason),
) -> Option<Denial> {
    permits(checked.fd.as_fd(), mode, read_only_mounts).then(|| Denial {
        access,
        target: target.display().to_string(),
        reason,
    })
}

/// A path resolved in the helper: a descriptor of what it names, and where that really is.
struct Resolved {
    fd: OwnedFd,
    real: PathBuf,
    is_dir: bool,
    /// A symbolic link itself (resolved without following it).
    is_link: bool,
}

/// Resolves `path` from `base` as the kernel would for the command, but for magic links
/// (`/proc/self/fd/N` would name the helper's own descriptors): those are not judged.
fn resolve(base: BorrowedFd<'_>, path: &[u8], follow: bool) -> Option<Resolved> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    // An absolute path with no symbolic link on the way is where it leads: no need to ask the
    // kernel (a link is read through /proc, the dearest step). A missing name before any link
    // is missing whichever way it is resolved.
    if path.first() == Some(&b'/') {
        match rustix::fs::openat2(
            base,
            OsStr::from_bytes(path),
            flags,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(fd) => return resolved(fd, lexical(path)),
            Err(rustix::io::Errno::LOOP) => {}
            Err(_) => return None,
        }
    }
    let fd = rustix::fs::openat2(
        base,
        OsStr::from_bytes(path),
        flags,
        Mode::empty(),
        ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let real = real_path(&fd).ok()?;
    resolved(fd, real)
}

fn resolved(fd: OwnedFd, real: PathBuf) -> Option<Resolved> {
    let kind = rustix::fs::fstat(&fd)
        .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode))
        .ok()?;
    Some(Resolved {
        fd,
        real,
        is_dir: kind == rustix::fs::FileType::Directory,
        is_link: kind == rustix::fs::FileType::Symlink,
    })
}

fn real_path(fd: &OwnedFd) -> io::Result<PathBuf> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let real = std::fs::read_link(link)?;
    // A path the kernel no longer knows (deleted) or not in this mount namespace's tree.
    if !real.is_absolute() || real.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    }
    Ok(real)
}

/// An absolute path without symbolic links, written as the kernel would name where it leads:
/// `.` and empty names dropped, `..` taking off the name before it (never above `/`).
fn lexical(path: &[u8]) -> PathBuf {
    let mut names: Vec<&[u8]> = Vec::new();
    for name in path.split(|&b| b == b'/') {
        match name {
            b"" | b"." => {}
            b".." => {
                names.pop();
            }
            name => names.push(name),
        }
    }
    let mut real = Vec::with_capacity(path.len() + 1);
    for name in names {
        real.push(b'/');
        real.extend_from_slice(name);
    }
    if real.is_empty() {
        real.push(b'/');
    }
    PathBuf::from(OsStr::from_bytes(&real))
}

/// `path` as its directory part and its last name, trailing slashes dropped.
fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let path = &path[..end];
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) if path.len() == 1 => None,
        Some(0) => Some((b"/", &path[1..])),
        Some(at) => Some((&path[..at], &path[at + 1..])),
        None => Some((b".", path)),
    }
}

/// Whether the file's permissions (its mode, owner and ACL, and the mount's read-only flag
/// but for the sandbox's own) allow `mode` to the command's user: if not, the refusal is not
/// the sandbox's. Checked with the real user, as `access` does: the helper's capabilities in
/// its user namespace are cleared for a user other than root, as bash's were at its `exec`.
/// A read-only mount counts as allowing where the sandbox made the mounts read-only.
fn permits(fd: BorrowedFd<'_>, mode: i32, read_only_mounts: bool) -> bool {
    // SAFETY: faccessat2 with a valid descriptor, an empty path and integer flags.
    let done = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH,
        )
    };
    done == 0
        || (read_only_mounts && io::Error::last_os_error().raw_os_error() == Some(libc::EROFS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_without_links_is_named_as_the_kernel_names_it() {
        for (path, real) in [
            ("/", "/"),
            ("//usr//lib/", "/usr/lib"),
            ("/usr/./lib/../share", "/usr/share"),
            ("/..", "/"),
            ("/a/b/../../..", "/"),
        ] {
            assert_eq!(lexical(path.as_bytes()), PathBuf::from(real), "{path}");
        }
    }

    #[test]
    fn a_resolved_path_is_where_it_leads_with_or_without_links() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real_dir.join("d/sub")).unwrap();
        std::fs::write(real_dir.join("d/f"), "").unwrap();
        // `l/..` is `d` to the kernel, the directory itself to a reading of the words.
        std::os::unix::fs::symlink(real_dir.join("d/sub"), real_dir.join("l")).unwrap();
        let root = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let at = |p: &str| {
            let path = format!("{}/{p}", real_dir.display());
            resolve(root.as_fd(), path.as_bytes(), true).map(|r| r.real)
        };
        assert_eq!(at("d/f"), Some(real_dir.join("d/f")));
        assert_eq!(at("d/../d/./f"), Some(real_dir.join("d/f")));
        assert_eq!(at("l/../f"), Some(real_dir.join("d/f")));
        assert_eq!(at("l/../sub/../f"), Some(real_dir.join("d/f")));
        assert_eq!(at("missing/f"), None);
        let link = format!("{}/l", real_dir.display());
        let kept = resolve(root.as_fd(), link.as_bytes(), false).unwrap();
        assert!(kept.is_link);
        assert_eq!(kept.real, real_dir.join("l"));
    }

    #[test]
    fn splits_a_path_into_directory_and_name() {
        assert_eq!(split(b"a"), Some((&b"."[..], &b"a"[..])));
        assert_eq!(split(b"/a"), Some((&b"/"[..], &b"a"[..])));
        assert_eq!(split(b"/a/b/"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split(b"a/b"), Some((&b"a"[..], &b"b"[..])));
        assert_eq!(split(b"/"), None);
        assert_eq!(split(b"///"), None);
    }
}
