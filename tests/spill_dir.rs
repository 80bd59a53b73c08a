//! Spill files stay safe in a spill parent shared with other users: here a `Config::spill_dir`
//! of mode `0777` without the sticky bit, where anyone may plant symlinks and rename or replace
//! entries. Symlinks planted at the names the host uses lead it nowhere: a victim file outside
//! the parent is never written, and every spill file is a regular `0600` file of this user holding
//! the complete stream.
//!
//! Contract: one directory per host process, created `0700` on first use under the configured
//! spill directory; files named `dsh-bash-<host pid>-<counter>-<12 hex>-<stdout|stderr>.log`,
//! created exclusively with mode `0600`.

#[path = "support/exec.rs"]
mod exec;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_executor::{Config, Executor, LocalExecutor, RunResult};
use tokio_util::sync::CancellationToken;

/// Bytes kept in memory per stream; commands write [`N`] to each stream, so both spill.
const KEEP: u64 = 1000;
const N: usize = 5000;

/// A uid that is not the test's (`nobody` on most systems); giving a directory to it takes root.
const OTHER_UID: u32 = 65534;

const VICTIM_TEXT: &[u8] = b"precious\n";

/// The shared spill parent and a victim directory outside it.
struct Shared {
    parent: tempfile::TempDir,
    victim_dir: tempfile::TempDir,
    victim: PathBuf,
    exec: Arc<LocalExecutor>,
    _events: tokio::sync::mpsc::UnboundedReceiver<dsh_executor::Task>,
}

fn shared() -> Shared {
    let parent = tempfile::tempdir().unwrap();
    // World-writable, no sticky bit: anyone may rename or replace what the host makes here.
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim_dir = tempfile::tempdir().unwrap();
    let victim = victim_dir.path().join("victim.txt");
    std::fs::write(&victim, VICTIM_TEXT).unwrap();
    let config = Config {
        grace_ms: 200.0,
        spill_dir: Some(parent.path().to_path_buf()),
        max_output_bytes: KEEP,
        ..Config::default()
    };
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let exec = LocalExecutor::new(config, tx).expect("valid config");
    Shared {
        parent,
        victim_dir,
        victim,
        exec,
        _events: events,
    }
}

/// A command writing `N` bytes of `out` to stdout and `N` of `err` to stderr.
fn both_streams(out: char, err: char) -> String {
    format!("head -c {N} /dev/zero | tr '\\0' {out}; head -c {N} /dev/zero | tr '\\0' {err} >&2")
}

fn full(c: char) -> Vec<u8> {
    vec![c as u8; N]
}

impl Shared {
    async fn run(&self, command: &str) -> RunResult {
        let spec = exec::spec(self.exec.as_ref(), command);
        let result = self
            .exec
            .run(spec, CancellationToken::new())
            .await
            .expect("run succeeds");
        assert_eq!(result.exit_code, Some(0));
        assert!(result.stdout.truncated && result.stderr.truncated);
        result
    }

    fn assert_victim_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(self.victim_dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["victim.txt"],
            "something was created in the victim dir"
        );
        let meta = std::fs::symlink_metadata(&self.victim).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(std::fs::read(&self.victim).unwrap(), VICTIM_TEXT);
    }
}

fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// `path` is a regular file (not a symlink) of this user, mode `0600`, holding `content`.
fn assert_private_file(path: &Path, content: &[u8]) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.file_type().is_file(), "{path:?} is not a regular file");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "{path:?}");
    assert_eq!(meta.uid(), euid(), "{path:?}");
    let on_disk = std::fs::read(path).unwrap();
    assert!(
        on_disk == content,
        "{path:?} holds {} bytes, not the complete stream",
        on_disk.len()
    );
}

/// `path` is a directory (not a symlink) of this user, mode `0700`.
fn assert_private_dir(path: &Path) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.file_type().is_dir(), "{path:?} is not a directory");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700, "{path:?}");
    assert_eq!(meta.uid(), euid(), "{path:?}");
}

/// The spill file names in `dir`, each with its full path.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// Runs one spilling command and returns the spill directory it made (checked to be private,
/// with both files complete).
async fn first_spill(s: &Shared) -> PathBuf {
    let first = s.run(&both_streams('a', 'A')).await;
    let out = PathBuf::from(first.stdout.spill_path.expect("stdout spilled"));
    let err = PathBuf::from(first.stderr.spill_path.expect("stderr spilled"));
    assert_private_file(&out, &full('a'));
    assert_private_file(&err, &full('A'));
    let dir = out.parent().unwrap().to_path_buf();
    assert_eq!(dir.parent(), Some(s.parent.path()));
    assert_private_dir(&dir);
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_at_predictable_names_are_not_followed() {
    let s = shared();
    let pid = std::process::id();
    // What a neighbour can guess: the host's pid and the first counters.
    let mut planted = vec![(
        s.parent.path().join(format!("dsh-bash-{pid}")),
        s.victim_dir.path().to_path_buf(),
    )];
    for counter in 1..=8 {
        for stream in ["stdout", "stderr"] {
            planted.push((
                s.parent.path().join(format!(
                    "dsh-bash-{pid}-{counter}-000000000000-{stream}.log"
                )),
                s.victim.clone(),
            ));
        }
    }
    for (link, target) in &planted {
        std::os::unix::fs::symlink(target, link).unwrap();
    }
    let dir = first_spill(&s).await;
    assert!(!planted.iter().any(|(link, _)| *link == dir));
    for (link, target) in &planted {
        assert_eq!(std::fs::read_link(link).unwrap(), *target, "{link:?}");
    }
    s.assert_victim_untouched();
    s.exec.shutdown().await;
    assert!(!dir.exists(), "the spill directory outlived the shutdown");
    s.assert_victim_untouched();
}

/// The spill directory is moved away after its first use and `replace` puts something else under
/// its name; the next command spills. Returns the moved directory.
async fn spill_after_the_directory_is_replaced(
    s: &Shared,
    replace: impl FnOnce(&Path),
) -> (PathBuf, RunResult) {
    let dir = first_spill(s).await;
    let before = files_in(&dir);
    let moved = s.parent.path().join("moved-away");
    std::fs::rename(&dir, &moved).unwrap();
    replace(&dir);

    let second = s.run(&both_streams('b', 'B')).await;
    s.assert_victim_untouched();
    // The host kept writing into its own directory, wherever it now is.
    let before: Vec<PathBuf> = before
        .iter()
        .map(|p| moved.join(p.file_name().unwrap()))
        .collect();
    let new: Vec<PathBuf> = files_in(&moved)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(new.len(), 2, "{new:?}");
    let (out, err): (Vec<&PathBuf>, Vec<&PathBuf>) = new
        .iter()
        .partition(|p| p.to_string_lossy().ends_with("-stdout.log"));
    assert_private_file(out[0], &full('b'));
    assert_private_file(err[0], &full('B'));
    for earlier in &before {
        let stdout = earlier.to_string_lossy().ends_with("-stdout.log");
        assert_private_file(earlier, &full(if stdout { 'a' } else { 'A' }));
    }
    // The paths under the old name lead elsewhere now: they are not presented as the output.
    assert_eq!(second.stdout.spill_path, None);
    assert_eq!(second.stderr.spill_path, None);
    assert_eq!(second.stdout.text.len() as u64, KEEP);
    (moved, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spill_directory_swapped_for_a_symlink_gets_no_writes() {
    let s = shared();
    let victim_dir = s.victim_dir.path().to_path_buf();
    let mut name = PathBuf::new();
    let (moved, _) = spill_after_the_directory_is_replaced(&s, |dir| {
        std::os::unix::fs::symlink(&victim_dir, dir).unwrap();
        name = dir.to_path_buf();
    })
    .await;
    s.exec.shutdown().await;
    // The host's files are gone; the symlink under the old name and its target are left alone.
    assert_eq!(files_in(&moved), Vec::<PathBuf>::new());
    assert_eq!(std::fs::read_link(&name).unwrap(), victim_dir);
    s.assert_victim_untouched();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spill_directory_swapped_for_someone_elses_gets_no_writes() {
    if euid() != 0 {
        eprintln!("notice: not root, so no directory of another uid can be made: skipped");
        return;
    }
    let s = shared();
    let mut theirs = PathBuf::new();
    let (moved, _) = spill_after_the_directory_is_replaced(&s, |dir| {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::chown(dir, Some(OTHER_UID), None).unwrap();
        theirs = dir.to_path_buf();
    })
    .await;
    assert_eq!(
        files_in(&theirs),
        Vec::<PathBuf>::new(),
        "output went into someone else's directory"
    );
    s.exec.shutdown().await;
    assert_eq!(files_in(&moved), Vec::<PathBuf>::new());
    // Someone else's directory is not removed either.
    assert!(std::fs::symlink_metadata(&theirs).unwrap().is_dir());
}
