//! Spill files: once a stream outgrows its in-memory tail, the complete stream goes to disk.
//!
//! One directory per executor (so per host process) under the spill parent, created `0700` on
//! first use and removed with its files at a clean shutdown unless kept; files named
//! `dsh-bash-<host pid>-<counter>-<12 hex>-<stdout|stderr>.log`, created exclusively with `0600`.
//! A file is only ever presented while it holds every byte of its stream: one that hit its cap,
//! failed to write or was removed at shutdown is withdrawn, and output continues in memory only.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Numbers the commands of this process in spill file names.
static COUNTER: AtomicU64 = AtomicU64::new(1);

/// An executor's spill directory.
#[derive(Debug)]
pub(crate) struct SpillDir {
    /// `None`: the system temp dir.
    parent: Option<PathBuf>,
    /// The directory, once created.
    path: Mutex<Option<PathBuf>>,
    /// Removed at shutdown: no file is presented or created any more.
    removed: AtomicBool,
}

impl SpillDir {
    pub(crate) fn new(parent: Option<PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            parent,
            path: Mutex::new(None),
            removed: AtomicBool::new(false),
        })
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
    /// Hit its cap: the file stays, but it is not the full output.
    Capped,
    /// Could not be created or written: memory only.
    Failed,
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

    /// Creates the file. On failure the stream stays memory-only for good.
    pub(crate) fn begin(&mut self) {
        if self.started() {
            return;
        }
        let dir = &self.target.dir;
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

    /// Appends to the file, up to the cap.
    pub(crate) fn write(&mut self, data: &[u8]) {
        let State::Open { file, path } = &mut self.state else {
            return;
        };
        let room = self.target.cap - self.written;
        let take = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if let Err(err) = file.write_all(&data[..take]) {
            tracing::warn!(path = %path.display(), %err, "spill write failed; output stays in memory only");
            // A partial file must not pass for the full output, nor fill the disk further.
            let _ = std::fs::remove_file(&*path);
            self.state = State::Failed;
            return;
        }
        self.written += take as u64;
        if take < data.len() {
            self.state = State::Capped;
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
