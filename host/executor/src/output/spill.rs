//! Spill files: once a stream outgrows its in-memory tail, the complete stream goes to disk.
//!
//! One directory per executor (so per host process) under the spill parent, created `0700` on
//! first use and removed with its files at a clean shutdown unless kept; files named
//! `dsh-bash-<host pid>-<counter>-<12 hex>-<stdout|stderr>.log` (the counter the session's own), created exclusively with `0600`.
//! A file is only ever presented while it holds every byte of its stream: one that hit its cap,
//! failed to write or was removed at shutdown is withdrawn, and output continues in memory only.
//!
//! The spill parent may be shared with other users (the system temp dir, or a `--spill-dir`
//! without the sticky bit), so nothing here trusts a path after creating it. The directory is
//! made like `mkdtemp`: a fresh random name (`dsh-bash-<host pid>-<12 hex>`) created with `mkdir`
//! mode `0700` (a name already taken, even by a symlink, is never reused: another name is tried),
//! opened at once with `O_NOFOLLOW`, and refused unless the open descriptor is a directory owned
//! by this user. That descriptor stays open, and every file is created relative to it
//! (`openat(O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600)`) and deleted relative to it (`unlinkat`):
//! a directory moved away and replaced by a symlink or by someone else's directory gets none of
//! the host's writes or deletes. The files' paths are still what the model is given (the
//! contract names spill files by path), but a path is only presented while it leads to the file
//! the host wrote: one that resolves elsewhere is withdrawn like a failed file. At shutdown the
//! files go through the descriptor, and the directory is removed from its parent only while its
//! name still refers to it.
//!
//! Disk is bounded per session and per executor ([`crate::Config::max_session_spill_bytes`],
//! [`crate::Config::max_spill_total_bytes`]; see [`super::ledger`]): a write that would go
//! beyond a budget first deletes finished files, oldest first (the session's own past its
//! budget, the fullest session's past the total); with only files still being written left, the
//! file is treated exactly like one that hit its own cap (it keeps what fit, stops growing and is
//! withdrawn). Bytes also return when a file is deleted otherwise: a failed file at once, a
//! background task's files when the task is evicted from the finished list ([`Spill::discard`]),
//! everything at shutdown. A foreground command's files are presented to the model by path; they
//! stay until a budget needs their room or the host shuts down.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::ledger::{Entry, Ledger};

/// Fresh directory names tried before giving up (each taken name is someone else's or a race).
const DIR_ATTEMPTS: usize = 64;

/// How deep [`remove_contents`] descends into directories the commands made in the spill
/// directory.
const MAX_REMOVE_DEPTH: usize = 32;

/// Whether two `stat` results are the same file.
fn same_file(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// The per-process directory, once created: held open for as long as it is in use.
#[derive(Debug)]
struct Created {
    /// Where it was created; what the model's paths are made of.
    path: PathBuf,
    /// The directory itself. Files are created and deleted relative to it, and each file keeps
    /// a handle on it (so a file made before the directory vanished is deleted where it is).
    fd: Arc<OwnedFd>,
    /// The spill parent it was created in, and its name there: to remove it at shutdown.
    parent: OwnedFd,
    name: String,
    /// Its identity, to check at shutdown that the name still refers to it.
    stat: Stat,
}

impl Created {
    /// Makes a fresh directory in `parent_path`, `0700`, like `mkdtemp`.
    fn make(parent_path: &Path) -> io::Result<Self> {
        let parent = rustix::fs::open(
            parent_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let euid = rustix::process::geteuid().as_raw();
        for _ in 0..DIR_ATTEMPTS {
            let name = format!("dsh-bash-{}-{}", std::process::id(), random_hex());
            match rustix::fs::mkdirat(&parent, name.as_str(), Mode::RWXU) {
                Ok(()) => {}
                // Taken (by anything, a symlink included): another name.
                Err(Errno::EXIST) => continue,
                Err(err) => return Err(err.into()),
            }
            // Opened without following a symlink; in a shared parent without the sticky bit the
            // new directory may already have been swapped for a symlink or for a directory of
            // someone else, which is refused (and left alone) here.
            let fd = match rustix::fs::openat(
                &parent,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(err @ (Errno::LOOP | Errno::NOTDIR | Errno::NOENT)) => {
                    tracing::warn!(dir = %parent_path.join(&name).display(), %err, "the new spill directory was replaced before it was opened; trying another name");
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            let stat = rustix::fs::fstat(&fd)?;
            if stat.st_uid != euid || FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
                tracing::warn!(dir = %parent_path.join(&name).display(), owner = stat.st_uid, "the new spill directory was replaced by someone else's before it was opened; trying another name");
                continue;
            }
            // The umask may have narrowed the mode; make it exactly 0700.
            rustix::fs::fchmod(&fd, Mode::RWXU)?;
            return Ok(Self {
                path: parent_path.join(&name),
                fd: Arc::new(fd),
                parent,
                name,
                stat,
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "no fresh spill directory name in {} after {DIR_ATTEMPTS} tries",
                parent_path.display()
            ),
        ))
    }

    /// Deletes every file in the directory through its descriptor, then the directory itself if
    /// its name in the parent still refers to it.
    fn remove(self) -> io::Result<()> {
        let files = remove_contents(&self.fd, MAX_REMOVE_DEPTH);
        let dir = match rustix::fs::statat(
            &self.parent,
            self.name.as_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(now) if same_file(&now, &self.stat) => {
                match rustix::fs::unlinkat(&self.parent, self.name.as_str(), AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => Ok(()),
                    Err(err) => Err(err.into()),
                }
            }
            Ok(_) => {
                tracing::warn!(dir = %self.path.display(), "the spill directory was moved and its name reused; its files were deleted, what is under the name now is left alone");
                Ok(())
            }
            Err(Errno::NOENT) => Ok(()),
            Err(err) => Err(err.into()),
        };
        files.and(dir)
    }
}

/// Deletes everything in the directory `dir` without following symlinks: files and symlinks are
/// unlinked, directories (which commands may have made) emptied the same way up to `depth`
/// levels down and removed. Returns the first error; deletes what it can.
fn remove_contents(dir: &OwnedFd, depth: usize) -> io::Result<()> {
    let mut names: Vec<CString> = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    let mut result = Ok(());
    for name in names {
        let removed = match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(Errno::ISDIR) if depth > 0 => rustix::fs::openat(
                dir,
                name.as_c_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io::Error::from)
            .and_then(|sub| remove_contents(&sub, depth - 1))
            .and_then(|()| {
                Ok(rustix::fs::unlinkat(
                    dir,
                    name.as_c_str(),
                    AtFlags::REMOVEDIR,
                )?)
            }),
            Err(err) => Err(err.into()),
        };
        if result.is_ok() {
            result = removed;
        }
    }
    result
}

/// An executor's spill directory, and the budget its files share.
#[derive(Debug)]
pub(crate) struct SpillDir {
    /// `None`: the system temp dir.
    parent: Option<PathBuf>,
    /// The directory, once created.
    dir: Mutex<Option<Created>>,
    /// Removed at shutdown: no file is presented or created any more.
    removed: AtomicBool,
    ledger: Ledger,
    /// Each session's count of commands given spill targets.
    counters: Counters,
}

/// Sessions whose command counters are kept; past it the longest-kept is forgotten (its next
/// name counts from 1 again, still unique through its random part).
const COUNTED_SESSIONS: usize = 4096;

/// Each session's (owner token's) command counter, for spill file names.
#[derive(Debug, Default)]
struct Counters {
    inner: Mutex<CounterTable>,
}

#[derive(Debug, Default)]
struct CounterTable {
    next: HashMap<Option<String>, u64>,
    /// The sessions in the order they were first counted.
    order: VecDeque<Option<String>>,
}

impl Counters {
    /// The next number of `owner`'s session, from 1.
    fn next(&self, owner: Option<&str>) -> u64 {
        let mut table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = owner.map(str::to_string);
        if !table.next.contains_key(&key) {
            if table.order.len() >= COUNTED_SESSIONS
                && let Some(oldest) = table.order.pop_front()
            {
                table.next.remove(&oldest);
            }
            table.order.push_back(key.clone());
        }
        let n = table.next.entry(key).or_insert(0);
        *n += 1;
        *n
    }
}

impl SpillDir {
    /// A spill directory with the default total budget ([`crate::Config`]'s default
    /// `max_spill_total_bytes`); see [`SpillDir::with_budget`]. The executor passes its
    /// configured budget; this is for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn new(parent: Option<PathBuf>) -> Arc<Self> {
        let total = crate::Config::default().max_spill_total_bytes;
        Self::with_budgets(parent, total, total)
    }

    /// A spill directory whose files may hold `total_bytes` together, with no smaller budget
    /// per session.
    #[cfg(test)]
    pub(crate) fn with_budget(parent: Option<PathBuf>, total_bytes: u64) -> Arc<Self> {
        Self::with_budgets(parent, total_bytes, total_bytes)
    }

    /// A spill directory whose files may hold `total_bytes` together and `session_bytes` per
    /// session (see [`super::ledger`]).
    pub(crate) fn with_budgets(
        parent: Option<PathBuf>,
        total_bytes: u64,
        session_bytes: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            parent,
            dir: Mutex::new(None),
            removed: AtomicBool::new(false),
            ledger: Ledger::new(total_bytes, session_bytes),
            counters: Counters::default(),
        })
    }

    /// Bytes currently counted against the total budget.
    #[cfg(test)]
    pub(crate) fn used_bytes(&self) -> u64 {
        self.ledger.used()
    }

    fn parent(&self) -> PathBuf {
        self.parent.clone().unwrap_or_else(std::env::temp_dir)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Created>> {
        self.dir.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory's path if it was created (and not removed).
    pub(crate) fn path(&self) -> Option<PathBuf> {
        self.lock().as_ref().map(|dir| dir.path.clone())
    }

    fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// The directory (its descriptor and path), created `0700` on first use.
    fn get(&self) -> io::Result<(Arc<OwnedFd>, PathBuf)> {
        let mut dir = self.lock();
        if self.is_removed() {
            return Err(io::Error::other(
                "the spill directory was removed at shutdown",
            ));
        }
        if let Some(dir) = &*dir {
            return Ok((dir.fd.clone(), dir.path.clone()));
        }
        let created = Created::make(&self.parent())?;
        let got = (created.fd.clone(), created.path.clone());
        *dir = Some(created);
        Ok(got)
    }

    /// Forgets a directory that vanished (e.g. a temp cleaner), so the next spill recreates it.
    fn forget(&self) {
        *self.lock() = None;
    }

    /// Removes the directory with every file in it. Files being written are unlinked; no spill
    /// file is presented or created from now on.
    pub(crate) fn remove(&self) -> io::Result<()> {
        let mut dir = self.lock();
        self.removed.store(true, Ordering::Release);
        match dir.take() {
            Some(created) => created.remove(),
            None => Ok(()),
        }
    }
}

/// Where one stream spills to, decided when the command starts.
#[derive(Debug, Clone)]
pub(crate) struct SpillTarget {
    dir: Arc<SpillDir>,
    cap: u64,
    file_name: String,
    /// The session whose budget the file counts against.
    owner: Option<String>,
}

/// The spill targets of one command (of no session) of stdout and stderr: [`targets_for`].
#[cfg(test)]
pub(crate) fn targets(dir: &Arc<SpillDir>, cap: u64) -> (SpillTarget, SpillTarget) {
    targets_for(dir, cap, None)
}

/// The spill targets of one command's stdout and stderr for the session `owner`, sharing a
/// counter and a random part. The counter is the session's own (the `n`th command of that
/// session that was given spill targets), so that a name shown to one session does not tell how
/// many commands the others ran.
pub(crate) fn targets_for(
    dir: &Arc<SpillDir>,
    cap: u64,
    owner: Option<&str>,
) -> (SpillTarget, SpillTarget) {
    let counter = dir.counters.next(owner);
    let stem = format!("dsh-bash-{}-{counter}-{}", std::process::id(), random_hex());
    let target = |stream: &str| SpillTarget {
        dir: dir.clone(),
        cap,
        file_name: format!("{stem}-{stream}.log"),
        owner: owner.map(str::to_string),
    };
    (target("stdout"), target("stderr"))
}

/// 12 random hex digits, so that names cannot be guessed ahead of time (spill files, command
/// cgroups, and the host's cache temporary files).
pub fn random_hex() -> String {
    let mut bytes = [0u8; 6];
    if getrandom::fill(&mut bytes).is_err() {
        // Never seen in practice; the name is still unique through pid and counter, and the
        // exclusive create refuses anything planted under it.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes.copy_from_slice(&nanos.to_le_bytes()[..6]);
    }
    crate::hex::hex(&bytes)
}

/// A spill file on disk: where the host made it, and the path the model is given.
#[derive(Debug)]
struct Placed {
    path: PathBuf,
    /// Its identity, from the descriptor it was created with.
    stat: Stat,
    /// Its place in the spill budget.
    entry: Arc<Entry>,
}

impl Placed {
    /// The path, while it leads to this file.
    fn presentable_path(&self) -> Option<String> {
        if self.entry.gone() {
            return None;
        }
        match rustix::fs::stat(&self.path) {
            Ok(now) if same_file(&now, &self.stat) => {
                Some(self.path.to_string_lossy().into_owned())
            }
            Ok(_) => {
                tracing::warn!(path = %self.path.display(), "the spill file's path leads to another file (its directory was moved or replaced); the path is withdrawn");
                None
            }
            Err(err) => {
                tracing::warn!(path = %self.path.display(), %err, "the spill file's path no longer leads to it; the path is withdrawn");
                None
            }
        }
    }
}

/// Creates `name` in the spill directory for `owner`'s session: exclusively, `0600`, never
/// through a symlink.
fn create_file(dir: &SpillDir, name: &str, owner: Option<&str>) -> io::Result<(File, Placed)> {
    let (dir_fd, dir_path) = dir.get()?;
    let fd = rustix::fs::openat(
        &*dir_fd,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )?;
    // The umask may have narrowed the mode; make it exactly 0600.
    rustix::fs::fchmod(&fd, Mode::RUSR | Mode::WUSR)?;
    let stat = rustix::fs::fstat(&fd)?;
    let entry = dir.ledger.open(owner, dir_fd.clone(), name);
    let placed = Placed {
        path: dir_path.join(name),
        stat,
        entry,
    };
    Ok((File::from(fd), placed))
}

#[derive(Debug)]
enum State {
    NotStarted,
    Open {
        file: File,
        at: Placed,
    },
    Closed {
        at: Placed,
    },
    /// Hit its cap or the executor's budget: the file stays (still counted), but it is not the
    /// full output. No file when the budget was exhausted before it was created.
    Capped {
        at: Option<Placed>,
    },
    /// Could not be created or written: memory only.
    Failed,
    /// Deleted with its task (or never started and not wanted any more): memory only.
    Discarded,
}

/// The spill file of one stream.
#[derive(Debug)]
pub(crate) struct Spill {
    target: SpillTarget,
    state: State,
    written: u64,
}

impl Spill {
    pub(crate) fn new(target: SpillTarget) -> Self {
        Self {
            target,
            state: State::NotStarted,
            written: 0,
        }
    }

    pub(crate) fn started(&self) -> bool {
        !matches!(self.state, State::NotStarted)
    }

    /// Creates the file. On failure the stream stays memory-only for good; with the budget used
    /// up no file is created at all, and the stream is treated as capped.
    pub(crate) fn begin(&mut self) {
        if self.started() {
            return;
        }
        let dir = &self.target.dir;
        let owner = self.target.owner.as_deref();
        if !dir.ledger.has_room(owner) {
            tracing::debug!(
                total = dir.ledger.total(),
                "the spill budget is used up; output stays in memory only"
            );
            self.state = State::Capped { at: None };
            return;
        }
        let created = create_file(dir, &self.target.file_name, owner).or_else(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                dir.forget();
                create_file(dir, &self.target.file_name, owner)
            } else {
                Err(err)
            }
        });
        self.state = match created {
            Ok((file, at)) => State::Open { file, at },
            Err(err) => {
                tracing::warn!(dir = %dir.parent().display(), %err, "cannot create spill file; output stays in memory only");
                State::Failed
            }
        };
    }

    /// Appends to the file, up to its cap and as far as the executor's budget allows.
    pub(crate) fn write(&mut self, data: &[u8]) {
        let State::Open { file, at } = &mut self.state else {
            return;
        };
        let ledger = &self.target.dir.ledger;
        let room = self.target.cap - self.written;
        let want = (data.len() as u64).min(room);
        let granted = ledger.reserve(&at.entry, want);
        // `granted <= data.len()`, so this never truncates.
        let take = usize::try_from(granted).unwrap_or(usize::MAX);
        if let Err(err) = file.write_all(&data[..take]) {
            tracing::warn!(path = %at.path.display(), %err, "spill write failed; output stays in memory only");
            // A partial file must not pass for the full output, nor fill the disk further.
            if let State::Open { at, .. } = std::mem::replace(&mut self.state, State::Failed) {
                self.delete(&at);
            }
            return;
        }
        self.written += granted;
        if take < data.len() {
            if granted < want {
                tracing::debug!(
                    path = %at.path.display(),
                    total = ledger.total(),
                    "the spill budget is used up; the file stops growing and output stays in memory only"
                );
            }
            if let State::Open { at, .. } = std::mem::replace(&mut self.state, State::Failed) {
                ledger.finish(&at.entry, false);
                self.state = State::Capped { at: Some(at) };
            }
        }
    }

    /// Deletes this stream's file, whatever its state, and returns its bytes to the budget. The
    /// stream is memory-only from now on: no file is presented, and none is created later. Used
    /// when the task is evicted from the finished list.
    pub(crate) fn discard(&mut self) {
        let at = match std::mem::replace(&mut self.state, State::Discarded) {
            State::Open { at, .. } | State::Closed { at } | State::Capped { at: Some(at) } => at,
            _ => return,
        };
        self.delete(&at);
    }

    /// Removes a file of this stream (relative to the directory it was created in) and returns
    /// its bytes to the budget. A file that cannot be removed stays counted: its bytes are still
    /// on disk.
    fn delete(&mut self, at: &Placed) {
        self.target.dir.ledger.delete(&at.entry);
        self.written = 0;
    }

    /// The stream ended: close the file.
    pub(crate) fn close(&mut self) {
        if matches!(self.state, State::Open { .. })
            && let State::Open { at, .. } = std::mem::replace(&mut self.state, State::Discarded)
        {
            self.target.dir.ledger.finish(&at.entry, true);
            self.state = State::Closed { at };
        }
    }

    /// Whether the complete file this stream had was deleted to keep within a spill budget.
    pub(crate) fn evicted(&self) -> bool {
        matches!(&self.state, State::Closed { at } if at.entry.evicted())
    }

    /// The file's path while it holds every byte of the stream (and the path leads to it).
    pub(crate) fn complete_path(&self) -> Option<String> {
        if self.target.dir.is_removed() {
            return None;
        }
        match &self.state {
            State::Open { at, .. } | State::Closed { at } => at.presentable_path(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn names_pair_streams_and_count_per_session() {
        let dir = SpillDir::new(None);
        let (a, b) = targets_for(&dir, 10, Some("s"));
        let stem = a.file_name.strip_suffix("-stdout.log").unwrap();
        assert_eq!(b.file_name, format!("{stem}-stderr.log"));
        let parts: Vec<&str> = stem.split('-').collect();
        assert_eq!(parts[..3], ["dsh", "bash", &std::process::id().to_string()]);
        assert_eq!(parts[3], "1");
        assert_eq!(parts[4].len(), 12);
        assert!(parts[4].bytes().all(|b| b.is_ascii_hexdigit()));
        let counter = |owner: Option<&str>| {
            let (t, _) = targets_for(&dir, 10, owner);
            t.file_name
                .split('-')
                .nth(3)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        // Another session's commands do not move a session's count.
        assert_eq!(counter(Some("t")), 1);
        assert_eq!(counter(Some("t")), 2);
        assert_eq!(counter(None), 1);
        assert_eq!(counter(Some("s")), 2);
    }

    #[test]
    fn stops_at_cap_and_withdraws_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (target, _) = targets(&SpillDir::new(Some(dir.path().into())), 5);
        let mut spill = Spill::new(target);
        spill.begin();
        spill.write(b"abc");
        spill.write(b"de");
        let path = spill.complete_path().expect("exactly at cap is complete");
        spill.write(b"f");
        assert_eq!(spill.complete_path(), None);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcde");
    }

    fn open_spill(dir: &Arc<SpillDir>, cap: u64) -> Spill {
        let mut spill = Spill::new(targets(dir, cap).0);
        spill.begin();
        spill
    }

    fn files_in(dir: &SpillDir) -> usize {
        dir.path()
            .map_or(0, |d| std::fs::read_dir(d).unwrap().count())
    }

    #[test]
    fn the_budget_caps_like_the_per_file_cap() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 10);
        let mut a = open_spill(&dir, 100);
        a.write(b"abcdef");
        let mut b = open_spill(&dir, 100);
        b.write(b"ghij");
        let b_path = b
            .complete_path()
            .expect("exactly at the budget is complete");
        assert_eq!(dir.used_bytes(), 10);
        // Over the budget: the file keeps what fit, stops growing and is withdrawn.
        a.write(b"x");
        assert_eq!(a.complete_path(), None);
        a.write(b"more");
        assert_eq!(dir.used_bytes(), 10);
        assert_eq!(std::fs::read(&b_path).unwrap(), b"ghij");
        // The capped file shows nobody anything: the next stream takes its room.
        let mut c = open_spill(&dir, 100);
        c.write(b"klmnop");
        assert!(c.complete_path().is_some());
        assert!(!a.evicted());
        assert_eq!(files_in(&dir), 2);
        // With nothing left that may go (both files still being written), a new stream
        // creates no file at all.
        let mut d = open_spill(&dir, 100);
        d.write(b"y");
        d.close();
        assert!(d.started());
        assert_eq!(d.complete_path(), None);
        assert_eq!(files_in(&dir), 2);
        assert_eq!(dir.used_bytes(), 10);
    }

    /// A started spill of `owner`'s session.
    fn session_spill(dir: &Arc<SpillDir>, owner: &str, cap: u64) -> Spill {
        let mut spill = Spill::new(targets_for(dir, cap, Some(owner)).0);
        spill.begin();
        spill
    }

    /// A finished, complete spill file of `owner` holding `bytes`, and its path.
    fn finished_file(dir: &Arc<SpillDir>, owner: &str, bytes: &[u8]) -> (Spill, String) {
        let mut spill = session_spill(dir, owner, 100);
        spill.write(bytes);
        spill.close();
        let path = spill.complete_path().expect("complete");
        (spill, path)
    }

    #[test]
    fn past_its_budget_a_session_loses_its_own_oldest_files_first() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budgets(Some(parent.path().into()), 100, 10);
        let (old, old_path) = finished_file(&dir, "s", b"0123");
        let (mid, mid_path) = finished_file(&dir, "s", b"4567");
        let (other, other_path) = finished_file(&dir, "t", b"abcdefgh");
        // 8 of s's 10 bytes are used: 6 more take the oldest file, and only it.
        let mut new = session_spill(&dir, "s", 100);
        new.write(b"ABCDEF");
        assert!(new.complete_path().is_some());
        assert!(!Path::new(&old_path).exists());
        assert_eq!(old.complete_path(), None);
        assert!(old.evicted());
        assert_eq!(std::fs::read(&mid_path).unwrap(), b"4567");
        assert!(!mid.evicted());
        // Another session's file is never taken for this session's budget.
        assert_eq!(std::fs::read(&other_path).unwrap(), b"abcdefgh");
        assert!(!other.evicted());
        assert_eq!(dir.used_bytes(), 4 + 8 + 6);
    }

    #[test]
    fn past_the_total_the_fullest_session_loses_its_oldest() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budgets(Some(parent.path().into()), 16, 16);
        let (flood_old, flood_old_path) = finished_file(&dir, "flood", b"0123456");
        let (_flood_new, flood_new_path) = finished_file(&dir, "flood", b"789abc");
        let (quiet, quiet_path) = finished_file(&dir, "quiet", b"xy");
        // 15 of 16 used: the quiet session's 4 bytes take the flooding session's oldest.
        let mut more = session_spill(&dir, "quiet", 100);
        more.write(b"zzzz");
        assert!(more.complete_path().is_some());
        assert!(flood_old.evicted());
        assert!(!Path::new(&flood_old_path).exists());
        assert!(Path::new(&flood_new_path).exists());
        assert_eq!(std::fs::read(&quiet_path).unwrap(), b"xy");
        assert!(!quiet.evicted());
        assert_eq!(dir.used_bytes(), 6 + 2 + 4);
    }

    #[test]
    fn a_file_being_written_is_never_evicted() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budgets(Some(parent.path().into()), 100, 8);
        let mut running = session_spill(&dir, "s", 100);
        running.write(b"0123");
        let running_path = running.complete_path().unwrap();
        let mut next = session_spill(&dir, "s", 100);
        next.write(b"456789");
        // Nothing finished to give: the new file is capped, the running one untouched.
        assert_eq!(next.complete_path(), None);
        assert!(!next.evicted());
        assert_eq!(std::fs::read(&running_path).unwrap(), b"0123");
        assert!(running.complete_path().is_some());
        assert_eq!(dir.used_bytes(), 8);
    }

    #[test]
    fn a_capped_file_goes_silently_and_a_discard_after_eviction_frees_nothing_twice() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budgets(Some(parent.path().into()), 100, 10);
        let mut capped = session_spill(&dir, "s", 3);
        capped.write(b"abcd");
        let (mut complete, _) = finished_file(&dir, "s", b"efg");
        let mut next = session_spill(&dir, "s", 100);
        next.write(b"0123456789");
        assert!(next.complete_path().is_some());
        // Both went; only the complete one is reported as evicted.
        assert!(!capped.evicted());
        assert!(complete.evicted());
        assert_eq!(dir.used_bytes(), 10);
        complete.discard();
        capped.discard();
        assert_eq!(dir.used_bytes(), 10);
        assert_eq!(files_in(&dir), 1);
    }

    #[test]
    fn a_write_straddling_the_budget_keeps_what_fit() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 4);
        let mut spill = open_spill(&dir, 100);
        spill.write(b"ab");
        let path = spill.complete_path().unwrap();
        spill.write(b"cdef");
        assert_eq!(spill.complete_path(), None);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcd");
        assert_eq!(dir.used_bytes(), 4);
    }

    #[test]
    fn discarding_deletes_the_file_and_frees_its_bytes() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 10);
        // Complete, then closed.
        let mut closed = open_spill(&dir, 100);
        closed.write(b"abcd");
        closed.close();
        let closed_path = closed.complete_path().unwrap();
        // Capped by its own cap.
        let mut capped = open_spill(&dir, 3);
        capped.write(b"efgh");
        assert_eq!(capped.complete_path(), None);
        // Still open.
        let mut open = open_spill(&dir, 100);
        open.write(b"ij");
        let open_path = open.complete_path().unwrap();
        assert_eq!(dir.used_bytes(), 9);
        assert_eq!(files_in(&dir), 3);
        for spill in [&mut closed, &mut capped, &mut open] {
            spill.discard();
            assert_eq!(spill.complete_path(), None);
        }
        assert_eq!(dir.used_bytes(), 0);
        assert_eq!(files_in(&dir), 0);
        assert!(!std::path::Path::new(&closed_path).exists());
        // A discarded stream stays memory-only: nothing is written or recreated.
        open.write(b"kl");
        open.begin();
        open.write(b"mn");
        assert_eq!(open.complete_path(), None);
        assert!(!std::path::Path::new(&open_path).exists());
        assert_eq!(dir.used_bytes(), 0);
        // The freed budget is there for the next stream; discarding twice changes nothing.
        let mut next = open_spill(&dir, 100);
        next.write(b"0123456789");
        assert!(next.complete_path().is_some());
        open.discard();
        assert_eq!(dir.used_bytes(), 10);
    }

    #[test]
    fn a_stream_discarded_before_it_spilled_never_spills() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 10);
        let mut spill = Spill::new(targets(&dir, 100).0);
        spill.discard();
        spill.begin();
        spill.write(b"abc");
        assert_eq!(spill.complete_path(), None);
        assert_eq!((files_in(&dir), dir.used_bytes()), (0, 0));
    }

    #[test]
    fn a_file_removed_at_shutdown_is_freed_when_discarded() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 10);
        let mut spill = open_spill(&dir, 100);
        spill.write(b"abc");
        dir.remove().unwrap();
        spill.discard();
        assert_eq!(dir.used_bytes(), 0);
    }

    #[test]
    fn a_failed_file_is_deleted_and_freed() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::with_budget(Some(parent.path().into()), 100);
        let mut spill = open_spill(&dir, 100);
        spill.write(b"abc");
        let path = spill.complete_path().unwrap();
        // Make the next write fail: swap the open file for a read-only descriptor.
        let State::Open { file, .. } = &mut spill.state else {
            panic!("open");
        };
        *file = File::open(&path).unwrap();
        spill.write(b"def");
        assert_eq!(spill.complete_path(), None);
        assert!(!std::path::Path::new(&path).exists());
        assert_eq!(dir.used_bytes(), 0);
    }

    #[test]
    fn unusable_parent_fails_quietly() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let (target, _) = targets(&SpillDir::new(Some(file.path().into())), 100);
        let mut spill = Spill::new(target);
        spill.begin();
        spill.write(b"abc");
        spill.close();
        assert!(spill.started());
        assert_eq!(spill.complete_path(), None);
    }

    #[test]
    fn removal_empties_what_commands_made_without_following_symlinks() {
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"victim").unwrap();
        let dir = SpillDir::new(Some(parent.path().into()));
        let mut spill = open_spill(&dir, 100);
        spill.write(b"abc");
        let spill_dir = dir.path().unwrap();
        // What a command running as the same user might leave in there.
        std::fs::create_dir_all(spill_dir.join("sub/deeper")).unwrap();
        std::fs::write(spill_dir.join("sub/deeper/file"), b"x").unwrap();
        std::os::unix::fs::symlink(&victim, spill_dir.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), spill_dir.join("sub/dirlink")).unwrap();
        dir.remove().unwrap();
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn the_directory_is_private_and_named_for_the_host() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::new(Some(parent.path().into()));
        let _spill = open_spill(&dir, 100);
        let path = dir.path().unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let suffix = name
            .strip_prefix(&format!("dsh-bash-{}-", std::process::id()))
            .unwrap();
        assert_eq!(suffix.len(), 12);
        assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn removal_deletes_files_and_withdraws_paths() {
        let parent = tempfile::tempdir().unwrap();
        let dir = SpillDir::new(Some(parent.path().into()));
        assert_eq!(dir.path(), None);
        let (target, _) = targets(&dir, 100);
        let mut spill = Spill::new(target);
        spill.begin();
        spill.write(b"abc");
        let path = PathBuf::from(spill.complete_path().unwrap());
        assert_eq!(path.parent(), dir.path().as_deref());
        dir.remove().unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        assert_eq!(spill.complete_path(), None);
        // Later spills stay in memory.
        let (target, _) = targets(&dir, 100);
        let mut late = Spill::new(target);
        late.begin();
        late.write(b"x");
        assert_eq!(late.complete_path(), None);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }
}
