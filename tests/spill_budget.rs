//! The executor's total spill budget (`Config::max_spill_total_bytes`), through the public API:
//! a spill file that would go beyond it is withdrawn like a capped one, and a background task's
//! spill files are deleted, their bytes freed, when the task drops off the finished list.

#[path = "support/exec.rs"]
mod exec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_executor::{Config, ExecError, Executor, LocalExecutor, RunResult, Task};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

const BUDGET: u64 = 100_000;

struct Harness {
    exec: Arc<LocalExecutor>,
    events: UnboundedReceiver<Task>,
    /// Spill parent; kept alive for the test's duration.
    spill: tempfile::TempDir,
}

fn harness(edit: impl FnOnce(&mut Config)) -> Harness {
    let spill = tempfile::tempdir().unwrap();
    let mut config = Config {
        grace_ms: 200.0,
        default_timeout_ms: 20_000.0,
        spill_dir: Some(spill.path().to_path_buf()),
        max_output_bytes: 1000,
        max_spill_total_bytes: BUDGET,
        ..Config::default()
    };
    edit(&mut config);
    let (tx, events) = unbounded_channel();
    let exec = LocalExecutor::new(config, tx).expect("valid config");
    Harness {
        exec,
        events,
        spill,
    }
}

/// A command writing `n` bytes of `a` to stdout.
fn bytes(n: u64) -> String {
    format!("head -c {n} /dev/zero | tr '\\0' a")
}

impl Harness {
    async fn run(&self, command: &str) -> RunResult {
        let spec = exec::spec(self.exec.as_ref(), command);
        self.exec
            .run(spec, CancellationToken::new())
            .await
            .expect("run succeeds")
    }

    /// Starts a background command and waits for it to finish.
    async fn start_and_finish(&mut self, command: &str) -> Task {
        let spec = exec::spec(self.exec.as_ref(), command);
        let task = self.exec.start(spec).await.expect("start succeeds");
        let done = exec::next_event(&mut self.events).await;
        assert_eq!(done.id, task.id);
        task
    }

    /// Every spill file on disk with its size, by path.
    fn spill_files(&self) -> Vec<(PathBuf, u64)> {
        let mut found = Vec::new();
        for dir in std::fs::read_dir(self.spill.path()).unwrap().flatten() {
            for file in std::fs::read_dir(dir.path()).unwrap().flatten() {
                found.push((file.path(), file.metadata().unwrap().len()));
            }
        }
        found.sort();
        found
    }
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_beyond_the_budget_is_withdrawn_like_a_capped_spill() {
    let h = harness(|_| {});
    // Within the budget: spilled and presented.
    let small = h.run(&bytes(30_000)).await;
    let small_path = PathBuf::from(small.stdout.spill_path.expect("complete spill"));
    assert!(small.stdout.truncated);
    assert_eq!(size(&small_path), 30_000);

    // More than what is left: the file keeps what fit, stops there and is not presented.
    let big = h.run(&bytes(2 * BUDGET)).await;
    assert!(big.stdout.truncated);
    assert_eq!(big.stdout.spill_path, None);
    assert_eq!(big.stdout.text, "a".repeat(1000));
    let files = h.spill_files();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(files.iter().map(|(_, len)| len).sum::<u64>(), BUDGET);
    // The foreground file shown to the model is untouched.
    assert_eq!(size(&small_path), 30_000);

    // Later commands still work; with the budget used up, overflow stays in memory only.
    let ok = h.run("echo ok").await;
    assert_eq!(ok.stdout.text, "ok\n");
    assert_eq!(ok.exit_code, Some(0));
    let more = h.run(&format!("{}; echo done >&2", bytes(5000))).await;
    assert_eq!(more.stdout.text, "a".repeat(1000));
    assert!(more.stdout.truncated);
    assert_eq!(more.stdout.spill_path, None);
    assert_eq!(more.stderr.text, "done\n");
    assert_eq!(h.spill_files(), files, "no file grew or was added");
    h.exec.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_task_takes_its_spill_files_and_frees_their_bytes() {
    let mut h = harness(|c| c.max_finished_tasks = 1);
    let a = h.start_and_finish(&bytes(60_000)).await;
    let a_path = PathBuf::from(
        h.exec
            .read_output(&a.id)
            .unwrap()
            .stdout
            .spill_path
            .expect("complete spill"),
    );
    assert_eq!(size(&a_path), 60_000);

    // A's file counts: a foreground command that needs more than what is left is withdrawn.
    let crowded = h.run(&bytes(60_000)).await;
    assert_eq!(crowded.stdout.spill_path, None);
    assert!(crowded.stdout.truncated);
    assert_eq!(
        h.spill_files().iter().map(|(_, len)| len).sum::<u64>(),
        BUDGET
    );

    // B finishing evicts A: A's spill file is deleted with it.
    let b = h.start_and_finish("echo b").await;
    assert!(!a_path.exists(), "{a_path:?} outlived its task");
    assert!(matches!(
        h.exec.read_output(&a.id),
        Err(ExecError::UnknownTask(_))
    ));
    assert_eq!(h.exec.read_output(&b.id).unwrap().stdout.text, "b\n");

    // The freed bytes let a later big command spill whole again.
    let later = h.run(&bytes(50_000)).await;
    let later_path = PathBuf::from(later.stdout.spill_path.expect("complete spill"));
    assert_eq!(std::fs::read(&later_path).unwrap(), vec![b'a'; 50_000]);
    h.exec.shutdown().await;
}
