//! Spill files: once a stream outgrows its in-memory tail, the complete stream goes to disk.
//!
//! One directory per host process and spill parent, created `0700` on first use; files named
//! `dsh-bash-<host pid>-<counter>-<12 hex>-<stdout|stderr>.log`, created exclusively with `0600`.
//! A file is only ever presented while it holds every byte of its stream: one that hit its cap or
//! failed to write is withdrawn, and output continues in memory only.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Spill directories already created by this process, by parent.
static DIRS: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
/// Numbers the commands of this process in spill file names.
static COUNTER: AtomicU64 = AtomicU64::new(1);

/// Where one stream spills to, decided when the command starts.
#[derive(Debug, Clone)]
pub(crate) struct SpillTarget {
    parent: Option<PathBuf>,
    cap: u64,
    file_name: String,
}

/// The spill targets of one command's stdout and stderr, sharing counter and random part.
pub(crate) fn targets(parent: Option<&Path>, cap: u64) -> (SpillTarget, SpillTarget) {
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem = format!("dsh-bash-{}-{counter}-{}", std::process::id(), random_hex());
    let target = |stream: &str| SpillTarget {
        parent: parent.map(Path::to_path_buf),
        cap,
        file_name: format!("{stem}-{stream}.log"),
    };
    (target("stdout"), target("stderr"))
}

/// 12 random hex digits, so that names cannot be guessed ahead of time.
fn random_hex() -> String {
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

/// This process's spill directory under `parent`, created `0700` on first use.
fn spill_dir(parent: &Path) -> io::Result<PathBuf> {
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, dir)) = dirs.iter().find(|(p, _)| p == parent) {
        return Ok(dir.clone());
    }
    loop {
        let dir = parent.join(format!("dsh-bash-{}-{}", std::process::id(), random_hex()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // The umask may have narrowed the mode; make it exactly 0700.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
                dirs.push((parent.to_path_buf(), dir.clone()));
                return Ok(dir);
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

/// Forgets a spill directory that vanished (e.g. a temp cleaner), so the next spill recreates it.
fn forget_dir(parent: &Path) {
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    dirs.retain(|(p, _)| p != parent);
}

fn create_file(parent: &Path, name: &str) -> io::Result<(File, PathBuf)> {
    let path = spill_dir(parent)?.join(name);
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
        let parent = self
            .target
            .parent
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let created = create_file(&parent, &self.target.file_name).or_else(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                forget_dir(&parent);
                create_file(&parent, &self.target.file_name)
            } else {
                Err(err)
            }
        });
        self.state = match created {
            Ok((file, path)) => State::Open { file, path },
            Err(err) => {
                tracing::warn!(dir = %parent.display(), %err, "cannot create spill file; output stays in memory only");
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
        let (a, b) = targets(None, 10);
        let (c, _) = targets(None, 10);
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
        let (target, _) = targets(Some(dir.path()), 5);
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
        let (target, _) = targets(Some(file.path()), 100);
        let mut spill = Spill::new(target);
        spill.begin();
        spill.write(b"abc");
        spill.close();
        assert!(spill.started());
        assert_eq!(spill.complete_path(), None);
    }
}
