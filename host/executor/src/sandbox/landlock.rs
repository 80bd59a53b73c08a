//! The Landlock rulesets of a sandboxed command (bash's side only restricts itself with them,
//! [`super::apply`]). Two layers:
//!
//! - the read layer handles reading, listing and executing: everything is allowed but the denied
//!   paths. Landlock only grants, so "all but these" is spelled out: every directory is listable,
//!   and reading and executing are granted beneath every entry of `/` except the one leading to a
//!   denied path, recursively along that path, the denied path itself getting nothing
//!   ([`walk`]). A denied path made later is denied too: it never had a grant. The
//!   directory of this host's private `TMPDIR`s is granted whole: the layer is the same for
//!   every command of the host, made once by the helper factory (its rules are most of the
//!   sandbox's cost).
//! - the command's own layer ([`command_layer`]) handles reading too: everything but the
//!   directory of the private `TMPDIR`s, and in it the command's own (a short walk: the few
//!   directories above that one). It also handles every kind of change (writing, truncating,
//!   creating, removing, linking, renaming): granted beneath the writable roots, the command's
//!   `TMPDIR` and a few devices only. Where the network is off, it also handles TCP bind and
//!   connect, with no port granted; and it scopes signals and abstract Unix sockets to the
//!   command's own domain, so that no command signals the host, its helper or another command.
//!
//! The command's layer is applied first: each restriction copies the rules of the layers
//! before it, so the big shared layer goes last.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

/// Devices every command may write (and truncate, as `> /dev/null` does).
pub(crate) const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The kernel's Landlock ABI version.
pub(crate) fn abi() -> io::Result<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the documented version query: no ruleset, size 0, the version flag.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(version as u32)
}

/// A Landlock call's failure, naming what it made, with the error number of the system call
/// beneath it where there is one (out of memory under a cgroup's limit, say).
fn error(what: &str, err: impl std::error::Error + 'static) -> io::Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<io::Error>() {
            return super::error::context(io, format_args!("Landlock {what}"));
        }
        cause = inner.source();
    }
    io::Error::other(format!("Landlock {what}: {err}"))
}

fn created(ruleset: RulesetCreated) -> io::Result<OwnedFd> {
    Option::<OwnedFd>::from(ruleset)
        .ok_or_else(|| io::Error::other("Landlock ruleset: not created"))
}

/// Opens `path` itself (a symlink stays a symlink) for a rule.
fn open_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// `path` resolved through symlinks as far as it exists, the rest appended: a denied path that
/// does not exist yet is left out of the grants all the same, so it is denied once made.
pub(crate) fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Some(real);
    }
    let (parent, name) = (path.parent()?, path.file_name()?);
    Some(resolve(parent)?.join(name))
}

/// A directory's inode and the time of its last change, to tell whether a listing of it is
/// still current (an entry made, removed or renamed in it changes it; unlike the modification
/// time, no command can set it back).
type Stamp = (u64, i64, i64);

fn stamp(dir: &Path) -> Option<Stamp> {
    use rustix::fs::{AtFlags, StatxFlags};
    // Asked of the file system itself where it keeps attributes elsewhere (NFS, FUSE), which
    // could otherwise answer from a cache older than an entry made on the other side; without
    // mounting what an automounter would. Where `statx` is refused (a container's seccomp
    // profile) or gives no change time, `stat` does.
    let wanted = StatxFlags::INO | StatxFlags::CTIME;
    match rustix::fs::statx(
        rustix::fs::CWD,
        dir,
        AtFlags::STATX_FORCE_SYNC | AtFlags::NO_AUTOMOUNT,
        wanted,
    ) {
        Ok(stat) if StatxFlags::from_bits_retain(stat.stx_mask).contains(wanted) => Some((
            stat.stx_ino,
            stat.stx_ctime.tv_sec,
            i64::from(stat.stx_ctime.tv_nsec),
        )),
        Ok(_) | Err(rustix::io::Errno::PERM | rustix::io::Errno::NOSYS) => {
            let stat = rustix::fs::stat(dir).ok()?;
            Some((stat.st_ino, stat.st_ctime, stat.st_ctime_nsec as i64))
        }
        Err(_) => None,
    }
}

/// What one walk granted, as the judge asks it. Landlock grants an entry by its inode, and lets
/// a read through where any directory on the way, or the file itself, holds a grant. An entry
/// made in a walked directory after the walk (or removed and made again) has none, so what lies
/// beneath it cannot be read (unless it holds a granted entry moved there) until the layer is
/// made again: by the next command's helper, which finds the directory changed.
#[derive(Debug, Default)]
pub(crate) struct GrantIndex {
    /// The directories walked whole (listed, each entry granted on its own).
    walked: HashSet<PathBuf>,
    /// Directories on the way to a denied path that could not be listed: nothing beneath them
    /// was granted, and the judge does not know why.
    unlisted: HashSet<PathBuf>,
    /// The granted entries' device and inode numbers (a layer's rules hold their inodes: no
    /// number is given to another entry while its layer lives).
    granted: HashSet<(u64, u64)>,
    /// Entries left without a grant on purpose (the denied paths, block devices).
    refused: HashSet<PathBuf>,
    /// Granted whole by a rule of their own, wherever they lie.
    beneath: Vec<PathBuf>,
}

impl GrantIndex {
    /// Whether the walk's layer refuses reading the file at `real` (a real path, of a file
    /// that is neither a directory nor beneath a denied path) because no directory on the way
    /// to it, nor the file itself, holds a grant: something on the way was made after the
    /// walk. The file itself may be missing (an open that creates it).
    ///
    /// `known` holds what was found of directories on the way before, that the command cannot
    /// replace (`fixed`): granted (`true`), or neither granted nor a stop (`false`); those are
    /// not looked at again.
    pub(crate) fn refuses(
        &self,
        real: &Path,
        known: &mut BTreeMap<PathBuf, bool>,
        fixed: impl Fn(&Path) -> bool,
    ) -> bool {
        if self.beneath.iter().any(|b| real.starts_with(b)) {
            return false;
        }
        let mut way: Vec<&Path> = real.ancestors().collect();
        // From the top down; `/` itself holds no grant of reading.
        way.pop();
        for path in way.into_iter().rev() {
            if self.refused.contains(path) || self.unlisted.contains(path) {
                return false;
            }
            match known.get(path) {
                Some(true) => return false,
                Some(false) => continue,
                None => {}
            }
            let remember = path != real && fixed(path);
            let stat = rustix::fs::statx(
                rustix::fs::CWD,
                path,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                rustix::fs::StatxFlags::TYPE | rustix::fs::StatxFlags::INO,
            );
            match stat {
                Ok(stat) => {
                    let dev = rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor);
                    if self.granted.contains(&(dev, stat.stx_ino)) {
                        if remember {
                            known.insert(path.to_path_buf(), true);
                        }
                        return false;
                    }
                    let kind = rustix::fs::FileType::from_raw_mode(u32::from(stat.stx_mode));
                    if matches!(
                        kind,
                        rustix::fs::FileType::Symlink | rustix::fs::FileType::BlockDevice
                    ) {
                        return false;
                    }
                    // Something mounted over an entry hides the entry's grant (Landlock passes
                    // over a covered mount point), and no later walk notices: not a new entry.
                    if stat
                        .stx_attributes
                        .contains(rustix::fs::StatxAttributes::MOUNT_ROOT)
                        && !self.walked.contains(path)
                    {
                        return false;
                    }
                    // Passed through: remembered only for a walked directory, which existed at
                    // the walk and holds no grant. One made since could be replaced by a granted
                    // one moved in from outside the sandbox, which a later look would find.
                    if remember && self.walked.contains(path) {
                        known.insert(path.to_path_buf(), false);
                    }
                }
                // Being made by the very call judged.
                Err(_) if path == real => {}
                Err(_) => return false,
            }
        }
        true
    }
}

/// A [`GrantIndex`] as one command's judge asks it: with what its reads found of the
/// directories on the way, where the command cannot replace them ([`GrantIndex::refuses`]).
/// Most reads are beneath a few of them (`/usr`, `/var/tmp`, the workspace's parent), each then
/// judged without a look at it.
#[derive(Debug, Clone)]
pub(crate) struct GrantLookup {
    index: Arc<GrantIndex>,
    known: RefCell<BTreeMap<PathBuf, bool>>,
}

impl GrantLookup {
    pub(crate) fn new(index: Arc<GrantIndex>) -> GrantLookup {
        GrantLookup {
            index,
            known: RefCell::default(),
        }
    }

    /// [`GrantIndex::refuses`], remembering what it finds.
    pub(crate) fn refuses(&self, real: &Path, fixed: impl Fn(&Path) -> bool) -> bool {
        self.index
            .refuses(real, &mut self.known.borrow_mut(), fixed)
    }
}

/// What a walk's grants were made from: the walked directories as they were, and when.
#[derive(Debug, Clone)]
pub(crate) struct Freshness {
    walked: Vec<(PathBuf, Option<Stamp>)>,
    made: std::time::SystemTime,
}

/// Walks from `/` along every denied path (resolved through symlinks first), handing `grant`
/// every entry off those paths as it is found (its descriptor, and whether it is a directory);
/// the denied paths themselves, symlinks (reached through their targets) and block devices (a
/// disk holds every denied file) get nothing. `whole` is granted whole by rules of its own,
/// even where it lies under a denied path. `walk_dev` walks `/dev` and every directory in it
/// too.
///
/// One entry's descriptor at a time: a directory on the way (a home) may hold more entries
/// than the process may hold descriptors.
fn walk(
    deny: &[PathBuf],
    walk_dev: bool,
    whole: &[PathBuf],
    mut grant: impl FnMut(OwnedFd, bool) -> io::Result<()>,
) -> io::Result<(Freshness, GrantIndex)> {
    let mut freshness = Freshness::start();
    let denied: BTreeSet<PathBuf> = deny
        .iter()
        .filter_map(|path| resolve(path))
        .filter(|path| path != Path::new("/"))
        .collect();
    // Every proper ancestor of a denied path is walked, not granted; so are /dev and every
    // directory in it.
    let mut ancestors = BTreeSet::new();
    if walk_dev {
        ancestors.insert(PathBuf::from("/dev"));
    }
    for path in &denied {
        let mut up = path.parent();
        while let Some(dir) = up {
            ancestors.insert(dir.to_path_buf());
            up = dir.parent();
        }
    }
    let mut index = GrantIndex {
        beneath: whole.to_vec(),
        ..GrantIndex::default()
    };
    let mut stack = vec![PathBuf::from("/")];
    while let Some(dir) = stack.pop() {
        freshness.read(&dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if nothing_to_grant(&err) => {
                index.unlisted.insert(dir);
                continue;
            }
            Err(err) => return Err(walk_error(&dir, err)),
        };
        index.walked.insert(dir.clone());
        for entry in entries {
            let entry = entry.map_err(|err| walk_error(&dir, err))?;
            let path = entry.path();
            if denied.contains(&path) {
                index.refused.insert(path);
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() || kind.is_block_device() {
                index.refused.insert(path);
                continue;
            }
            if ancestors.contains(&path) || (walk_dev && kind.is_dir() && path.starts_with("/dev"))
            {
                stack.push(path);
                continue;
            }
            let fd = match open_path(&path) {
                Ok(fd) => fd,
                Err(err) if nothing_to_grant(&err) => continue,
                Err(err) => return Err(walk_error(&path, err)),
            };
            // What was opened decides, not the listing: the entry may have been replaced since.
            let stat = rustix::fs::fstat(&fd).map_err(|err| walk_error(&path, err.into()))?;
            let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
            if matches!(
                kind,
                rustix::fs::FileType::Symlink | rustix::fs::FileType::BlockDevice
            ) {
                index.refused.insert(path);
                continue;
            }
            index.granted.insert((stat.st_dev, stat.st_ino));
            grant(fd, kind == rustix::fs::FileType::Directory)?;
        }
    }
    Ok((freshness, index))
}

/// [`walk`], each entry granted in `ruleset` as it is found: `access[0]` beneath a directory,
/// `access[1]` on anything else.
fn walk_granting(
    ruleset: &mut RulesetCreated,
    deny: &[PathBuf],
    walk_dev: bool,
    whole: &[PathBuf],
    access: [BitFlags<AccessFs>; 2],
) -> io::Result<(Freshness, GrantIndex)> {
    walk(deny, walk_dev, whole, |fd, is_dir| {
        (&mut *ruleset)
            .add_rule(PathBeneath::new(fd, access[usize::from(!is_dir)]))
            .map(drop)
            .map_err(|e| error("read rule", e))
    })
}

/// Whether the walk's failure to list or open an entry means there is nothing to grant: the
/// entry is gone since the listing (or turned into something else), or this process may not
/// reach it (a directory listed but not searched, another security module's refusal, a stale
/// network file handle), and so neither may its commands. Any other failure (out of
/// descriptors or memory) fails the walk: an entry left without its grant would be unreadable
/// for no reason the judge could name.
fn nothing_to_grant(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP | libc::ESTALE)
    )
}

/// A failure of the walk at `path`, naming it and keeping its error number.
fn walk_error(path: &Path, err: io::Error) -> io::Error {
    super::error::context(
        &err,
        format_args!("reading {} for the read rules", path.display()),
    )
}

impl Freshness {
    /// Starts a record of directories read from now on.
    pub(crate) fn start() -> Freshness {
        Freshness {
            walked: Vec::new(),
            made: std::time::SystemTime::now(),
        }
    }

    /// Records `dir` as it is, before it is read.
    pub(crate) fn read(&mut self, dir: &Path) {
        self.walked.push((dir.to_path_buf(), stamp(dir)));
    }

    /// Whether every walked directory is as it was, and was last changed well before the walk
    /// (a change within the file system's timestamp granularity of the walk could be missed:
    /// two seconds where the coarsest keep them).
    pub(crate) fn current(&self) -> bool {
        let settled = |s: &Stamp| {
            let changed = std::time::UNIX_EPOCH
                + std::time::Duration::new(s.1.max(0) as u64, s.2.clamp(0, 999_999_999) as u32);
            changed + std::time::Duration::from_secs(2) < self.made
        };
        self.walked.iter().all(|(dir, before)| {
            let now = stamp(dir);
            now == *before && now.as_ref().is_none_or(settled)
        })
    }
}

/// A layer that handles reading ([`read_layer`], [`command_layer`]), and what its grants were
/// made from.
#[derive(Debug)]
pub(crate) struct ReadLayer {
    pub(crate) layer: OwnedFd,
    pub(crate) freshness: Freshness,
    /// What was granted, for the judge.
    pub(crate) index: Arc<GrantIndex>,
}

/// The read layer: everything readable, listable and executable but the `deny` paths (see
/// [`walk`]), `whole` granted whole, and moving files between directories allowed beneath
/// `writable`. Each entry's rule is added as the walk finds it, and its descriptor closed.
pub(crate) fn read_layer(
    abi: u32,
    deny: &[PathBuf],
    whole: &[PathBuf],
    writable: &[PathBuf],
) -> io::Result<ReadLayer> {
    let abi = ABI::from(abi as i32);
    let read = AccessFs::from_read(abi);
    // Every layer refuses moving a file to another directory unless it grants it: granted
    // beneath the writable roots, as the write layer does.
    let refer = BitFlags::from(AccessFs::Refer);
    let file = AccessFs::ReadFile | AccessFs::Execute;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(read | refer)
        .map_err(|e| error("read layer", e))?
        .create()
        .map_err(|e| error("read layer", e))?
        // Listing is allowed everywhere: a denied directory's names, not its contents.
        .add_rule(PathBeneath::new(
            open_path(Path::new("/"))?,
            AccessFs::ReadDir,
        ))
        .map_err(|e| error("rule for /", e))?;
    let (freshness, index) = walk_granting(&mut ruleset, deny, true, whole, [read, file])?;
    for path in &index.beneath {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open_path(path)?, read))
            .map_err(|e| error(&format!("rule for {}", path.display()), e))?;
    }
    for root in writable {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open_path(root)?, refer))
            .map_err(|e| error(&format!("rule for {}", root.display()), e))?;
    }
    Ok(ReadLayer {
        layer: created(ruleset)?,
        freshness,
        index: Arc::new(index),
    })
}

/// One command's own layer. Reading: its private `TMPDIR` (`tmpdir`) and everything but
/// `tmp_parent`, the directory of every command's (a walk of the few directories above it,
/// whose entries' rules are added as they are found, [`walk`]; the read layer, shared by every
/// command of a host, grants that directory whole). Changes: beneath `writable` (which holds
/// `tmpdir`) and to [`DEVICES`] only. TCP bind and connect refused where `network_off`; signals
/// and abstract Unix sockets scoped to the domain.
///
/// Walked again for each command, in its helper while it waits, rather than kept: the walk
/// passes a directory anyone may fill (`/var/tmp`), whose entries' descriptors would be
/// held for as long as the host runs.
pub(crate) fn command_layer(
    abi: u32,
    tmp_parent: &Path,
    tmpdir: &Path,
    writable: &[PathBuf],
    network_off: bool,
) -> io::Result<ReadLayer> {
    let abi_level = ABI::from(abi as i32);
    let read = AccessFs::from_read(abi_level);
    let file = AccessFs::ReadFile | AccessFs::Execute;
    // Device ioctls are not a change to the filesystem: left unhandled. Moving files between
    // directories (`Refer`) is among the changes.
    let write = AccessFs::from_write(abi_level) & !BitFlags::from(AccessFs::IoctlDev);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(read | write)
        .map_err(|e| error("command layer", e))?;
    if network_off && abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi_level))
            .map_err(|e| error("network rules", e))?;
    }
    if abi >= 6 {
        ruleset = ruleset
            .scope(Scope::from_all(abi_level))
            .map_err(|e| error("scopes", e))?;
    }
    let mut ruleset = ruleset
        .create()
        .map_err(|e| error("command layer", e))?
        .add_rule(PathBeneath::new(
            open_path(Path::new("/"))?,
            AccessFs::ReadDir,
        ))
        .map_err(|e| error("rule for /", e))?
        .add_rule(PathBeneath::new(open_path(tmpdir)?, read))
        .map_err(|e| error(&format!("rule for {}", tmpdir.display()), e))?;
    let deny = [tmp_parent.to_path_buf()];
    let (freshness, index) = walk_granting(&mut ruleset, &deny, false, &[], [read, file])?;
    for root in writable {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open_path(root)?, write))
            .map_err(|e| error(&format!("rule for {}", root.display()), e))?;
    }
    let device = AccessFs::WriteFile | AccessFs::Truncate;
    for path in DEVICES {
        // Resolved: /dev/tty and the like may be symlinks elsewhere.
        let Ok(fd) = rustix::fs::open(
            path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, device))
            .map_err(|e| error(&format!("rule for {path}"), e))?;
    }
    Ok(ReadLayer {
        layer: created(ruleset)?,
        freshness,
        index: Arc::new(index),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_rule_keeps_its_error_number() {
        // A pipe is no path: the kernel refuses it as a rule's directory (EBADFD).
        let (pipe, _writer) = rustix::pipe::pipe().unwrap();
        let err = Ruleset::default()
            .handle_access(AccessFs::ReadFile)
            .unwrap()
            .create()
            .unwrap()
            .add_rule(PathBeneath::new(pipe, AccessFs::ReadFile))
            .map_err(|e| error("read rule", e))
            .unwrap_err();
        assert_eq!(
            super::super::error::errno(&err),
            Some(libc::EBADFD),
            "{err}"
        );
        assert!(err.to_string().starts_with("Landlock read rule: "), "{err}");
    }

    #[test]
    fn a_read_beneath_a_directory_judged_before_is_judged_from_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(top.join("denied")).unwrap();
        std::fs::create_dir_all(top.join("home")).unwrap();
        std::fs::write(top.join("home/f"), "x").unwrap();
        // Held, as a layer's rules hold their inodes: a number freed could be given to the
        // directory made anew below.
        let mut held = Vec::new();
        let (_, index) = walk(&[top.join("denied")], true, &[], |fd, _| {
            held.push(fd);
            Ok(())
        })
        .unwrap();
        let index = &index;
        std::fs::write(top.join("new"), "x").unwrap();

        // Nothing remembered where the command could replace what it found.
        let mut known = BTreeMap::new();
        assert!(!index.refuses(&top.join("home/f"), &mut known, |_| false));
        assert!(known.is_empty());

        let mut known = BTreeMap::new();
        assert!(!index.refuses(&top.join("home/f"), &mut known, |_| true));
        // The walked directories on the way pass, the first granted one grants.
        assert_eq!(known.get(&top), Some(&false), "{known:?}");
        assert_eq!(known.get(&top.join("home")), Some(&true), "{known:?}");
        assert!(!known.contains_key(&top.join("home/f")), "{known:?}");
        // Made after the walk, beside the denied path: refused, also with what was found.
        assert!(index.refuses(&top.join("new"), &mut known, |_| true));
        // What was found decides without a look (which is why only what the command cannot
        // replace is remembered): `home` made anew is granted no more, but was found granted.
        std::fs::remove_dir_all(top.join("home")).unwrap();
        std::fs::create_dir(top.join("home")).unwrap();
        std::fs::write(top.join("home/g"), "x").unwrap();
        assert!(!index.refuses(&top.join("home/g"), &mut known, |_| true));
        let mut fresh = BTreeMap::new();
        assert!(index.refuses(&top.join("home/g"), &mut fresh, |_| true));
    }
}
