//! Spill files: once a stream outgrows its in-memory tail, the complete stream goes to disk.
//!
//! One directory per executor (so per host process) under the spill parent, created `0700` on
//! first use and removed with its files at a clean shutdown unless kept; files named
//! `dsh-bash-<host pid>-<counter>-<12 hex>-<stdout|stderr>.log`, created exclusively with `0600`.
//! A file is only ever presented while it holds every byte of its stream: one that hit its cap,
//! failed to write or was removed at shutdown is withdrawn, and output continues in memory only.
//!
//! Disk is bounded per executor: every byte written to any of its spill files counts against one
//! total budget ([`crate::Config::max_spill_total_bytes`]). A file whose write would exceed the
//! budget is treated exactly like one that hit its own cap (it keeps what fit, stops growing and
//! is withdrawn). Bytes return to the budget when a file is deleted: a failed file at once, a
//! background task's files when the task is evicted from the finished list ([`Spill::discard`]),
//! everything at shutdown. A foreground command's files are presented to the model by path, so
//! they stay until shutdown and stay counted: the budget is what bounds them.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Numbers the commands of this process in spill file names.
static COUNTER: AtomicU64 = AtomicU64::new(1);

/// The bytes all spill files of one executor may hold together.
#[derive(Debug)]
struct Budget {
    total: u64,
    /// Bytes written to spill files that have not been deleted since.
    used: AtomicU64,
}

impl Budget {
    /// Takes up to `want` bytes; returns how many were granted (less once the budget runs out).
    fn reserve(&self, want: u64) -> u64 {
        let mut granted = 0;
        // Never fails: the closure always returns `Some`.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                granted = want.min(self.total.saturating_sub(used));
                Some(used + granted)
            });
        granted
    }

    /// Gives back the bytes of a deleted file.
    fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    fn exhausted(&self) -> bool {
        self.used() >= self.total
    }
}

/// An executor's spill directory, and the budget its files share.
#[derive(Debug)]
pub(crate) struct SpillDir {
    /// `None`: the system temp dir.
    parent: Option<PathBuf>,
    /// The directory, once created.
    path: Mutex<Option<PathBuf>>,
    /// Removed at shutdown: no file is presented or created any more.
    removed: AtomicBool,
    budget: Budget,
}

impl SpillDir {
    /// A spill directory with the default total budget ([`crate::Config`]'s default
    /// `max_spill_total_bytes`); see [`SpillDir::with_budget`]. The executor passes its
    /// configured budget; this is for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn new(parent: Option<PathBuf>) -> Arc<Self> {
        Self::with_budget(parent, crate::Config::default().max_spill_total_bytes)
    }

    /// A spill directory whose files may hold `total_bytes` together.
    pub(crate) fn with_budget(parent: Option<PathBuf>, total_bytes: u64) -> Arc<Self> {
        Arc::new(Self {
            parent,
            path: Mutex::new(None),
            removed: AtomicBool::new(false),
            budget: Budget {
                total: total_bytes,
                used: AtomicU64::new(0),
            },
        })
    }

    /// Bytes currently counted against the total budget.
    #[cfg(test)]
    pub(crate) fn used_bytes(&self) -> u64 {
        self.budget.used()
    }

    fn parent(&self) -> PathBuf {
        self.parent.clone().unwrap_or_else(std::env::temp_dir)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PathBuf>> {
        self.path.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory if it was created (and not removed).
    pub(crate) fn path(&self) -> Option<PathBuf> {
        self.lock().clone()
    }

    fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// The directory, created `0700` on first use.
    fn get(&self) -> io::Result<PathBuf> {
        let mut path = self.lock();
        if self.is_removed() {
            return Err(io::Error::other(
                "the spill directory was removed at shutdown",
            ));
        }
        if let Some(dir) = &*path {
            return Ok(dir.clone());
        }
        let parent = self.parent();
        loop {
            let dir = parent.join(format!("dsh-bash-{}-{}", std::process::id(), random_hex()));
            match DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    // The umask may have narrowed the mode; make it exactly 0700.
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
                    *path = Some(dir.clone());
                    return Ok(dir);
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Forgets a directory that vanished (e.g. a temp cleaner), so the next spill recreates it.
    fn forget(&self) {
        *self.lock() = None;
    }

    /// Removes the directory with every file in it. Files being written are unlinked; no spill
    /// file is presented or created from now on.
    pub(crate) fn remove(&self) -> io::Result<()> {
        let mut path = self.lock();
        self.removed.store(true, Ordering::Release);
        match path.take() {
            Some(dir) => match std::fs::remove_dir_all(&dir) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            },
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
}

/// The spill targets of one command's stdout and stderr, sharing counter and random part.
pub(crate) fn targets(dir: &Arc<SpillDir>, cap: u64) -> (SpillTarget, SpillTarget) {
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem = format!("dsh-bash-{}-{counter}-{}", std::process::id(), random_hex());
    let target = |stream: &str| SpillTarget {
        dir: dir.clone(),
        cap,
        file_name: format!("{stem}-{stream}.log"),
    };
    (target("stdout"), target("stderr"))
}

/// 12 random hex digits, so that names cannot be guessed ahead of time.
pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 6];
    if getrandom::fill(&mut bytes).is_err() {
        // Never seen in practice; the name is still unique through pid and counter, and the
        // exclusive create refuses anything planted under it.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes.copy_from_slice(&nanos.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn create_file(dir: &SpillDir, name: &str) -> io::Result<(File, PathBuf)> {
    let path = dir.get()?.join(name);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok((file, path))
}

#[derive(Debug)]
enum State {
    NotStarted,
    Open {
        file: File,
        path: PathBuf,
    },
    Closed {
        path: PathBuf,
    },
    /// Hit its cap or the executor's budget: the file stays (still counted), but it is not the
    /// full output. No file when the budget was exhausted before it was created.
    Capped {
        path: Option<PathBuf>,
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
        if dir.budget.exhausted() {
            tracing::debug!(
                total = dir.budget.total,
                "the spill budget is used up; output stays in memory only"
            );
            self.state = State::Capped { path: None };
            return;
        }
        let created = create_file(dir, &self.target.file_name).or_else(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                dir.forget();
                create_file(dir, &self.target.file_name)
            } else {
                Err(err)
            }
        });
        self.state = match created {
            Ok((file, path)) => State::Open { file, path },
            Err(err) => {
                tracing::warn!(dir = %dir.parent().display(), %err, "cannot create spill file; output stays in memory only");
                State::Failed
            }
        };
    }

    /// Appends to the file, up to its cap and as far as the executor's budget allows.
    pub(crate) fn write(&mut self, data: &[u8]) {
        let State::Open { file, path } = &mut self.state else {
            return;
        };
        let budget = &self.target.dir.budget;
        let room = self.target.cap - self.written;
        let want = (data.len() as u64).min(room);
        let granted = budget.reserve(want);
        // `granted <= data.len()`, so this never truncates.
        let take = usize::try_from(granted).unwrap_or(usize::MAX);
        if let Err(err) = file.write_all(&data[..take]) {
            tracing::warn!(path = %path.display(), %err, "spill write failed; output stays in memory only");
            // A partial file must not pass for the full output, nor fill the disk further.
            let path = path.clone();
            self.written += granted;
            self.state = State::Failed;
            self.delete(&path);
            return;
        }
        self.written += granted;
        if take < data.len() {
            if granted < want {
                tracing::debug!(
                    path = %path.display(),
                    total = budget.total,
                    "the spill budget is used up; the file stops growing and output stays in memory only"
                );
            }
            self.state = State::Capped {
                path: Some(path.clone()),
            };
        }
    }

    /// Deletes this stream's file, whatever its state, and returns its bytes to the budget. The
    /// stream is memory-only from now on: no file is presented, and none is created later. Used
    /// when the task is evicted from the finished list.
    pub(crate) fn discard(&mut self) {
        let path = match std::mem::replace(&mut self.state, State::Discarded) {
            State::Open { path, .. }
            | State::Closed { path }
            | State::Capped { path: Some(path) } => path,
            _ => return,
        };
        self.delete(&path);
    }

    /// Removes a file of this stream and returns its bytes to the budget. A file that cannot be
    /// removed stays counted: its bytes are still on disk.
    fn delete(&mut self, path: &std::path::Path) {
        match std::fs::remove_file(path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), %err, "cannot delete a spill file; its bytes stay counted");
            }
            _ => {
                self.target.dir.budget.release(self.written);
                self.written = 0;
            }
        }
    }

    /// The stream ended: close the file.
    pub(crate) fn close(&mut self) {
        if let State::Open { path, .. } = &self.state {
            self.state = State::Closed { path: path.clone() };
        }
    }

    /// The file's path while it holds every byte of the stream.
    pub(crate) fn complete_path(&self) -> Option<String> {
        if self.target.dir.is_removed() {
            return None;
        }
        match &self.state {
            State::Open { path, .. } | State::Closed { path } => {
                Some(path.to_string_lossy().into_owned())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pair_streams_and_count_up() {
        let dir = SpillDir::new(None);
        let (a, b) = targets(&dir, 10);
        let (c, _) = targets(&dir, 10);
        let stem = a.file_name.strip_suffix("-stdout.log").unwrap();
        assert_eq!(b.file_name, format!("{stem}-stderr.log"));
        let parts: Vec<&str> = stem.split('-').collect();
        assert_eq!(parts[..3], ["dsh", "bash", &std::process::id().to_string()]);
        assert_eq!(parts[4].len(), 12);
        assert!(parts[4].bytes().all(|b| b.is_ascii_hexdigit()));
        let next: u64 = c.file_name.split('-').nth(3).unwrap().parse().unwrap();
        assert!(next > parts[3].parse().unwrap());
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
        // With nothing left, a new stream creates no file at all.
        let mut c = open_spill(&dir, 100);
        c.write(b"y");
        c.close();
        assert!(c.started());
        assert_eq!(c.complete_path(), None);
        assert_eq!(files_in(&dir), 2);
        assert_eq!(dir.used_bytes(), 10);
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
