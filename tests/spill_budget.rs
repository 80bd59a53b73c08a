//! The executor's total spill budget (`Config::max_spill_total_bytes`), through the public API:
//! a write that would go beyond it first deletes finished spill files, oldest first (a later read
//! of one reports it evicted); a file that still cannot fit is withdrawn like a capped one; a
//! background task's spill files are deleted, their bytes freed, when it drops off the finished
//! list.

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
async fn output_beyond_the_budget_takes_finished_files_first_then_is_withdrawn_like_a_capped_spill()
{
    let h = harness(|_| {});
    // Within the budget: spilled and presented.
    let small = h.run(&bytes(30_000)).await;
    let small_path = PathBuf::from(small.stdout.spill_path.expect("complete spill"));
    assert!(small.stdout.truncated);
    assert_eq!(size(&small_path), 30_000);

    // More than the whole budget: the finished file goes first, then the new file keeps what
    // fit, stops there and is not presented (nor reported evicted: it was never complete).
    let big = h.run(&bytes(2 * BUDGET)).await;
    assert!(big.stdout.truncated);
    assert_eq!(big.stdout.spill_path, None);
    assert!(!big.stdout.spill_evicted);
    assert_eq!(big.stdout.text, "a".repeat(1000));
    assert!(!small_path.exists(), "the oldest finished file made room");
    let files = h.spill_files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].1, BUDGET);

    // Later commands still work, and the capped file, which nobody is shown, makes room for
    // the next complete one.
    let ok = h.run("echo ok").await;
    assert_eq!(ok.stdout.text, "ok\n");
    assert_eq!(ok.exit_code, Some(0));
    let more = h.run(&format!("{}; echo done >&2", bytes(5000))).await;
    assert_eq!(more.stdout.text, "a".repeat(1000));
    assert!(more.stdout.truncated);
    let more_path = PathBuf::from(more.stdout.spill_path.expect("complete spill"));
    assert_eq!(size(&more_path), 5000);
    assert_eq!(more.stderr.text, "done\n");
    assert_eq!(h.spill_files(), [(more_path, 5000)]);
    h.exec.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_needing_room_takes_the_oldest_finished_file_and_its_reads_say_so() {
    let mut h = harness(|_| {});
    let a = h.start_and_finish(&bytes(60_000)).await;
    let first = h.exec.read_output(&a.id).unwrap();
    let a_path = PathBuf::from(first.stdout.spill_path.expect("complete spill"));
    assert!(!first.stdout.spill_evicted);
    assert_eq!(size(&a_path), 60_000);

    // 60,000 more do not fit beside A's: A's file goes, the new one is whole.
    let crowded = h.run(&bytes(60_000)).await;
    let crowded_path = PathBuf::from(crowded.stdout.spill_path.expect("complete spill"));
    assert_eq!(std::fs::read(&crowded_path).unwrap(), vec![b'a'; 60_000]);
    assert!(!crowded.stdout.spill_evicted);
    assert!(!a_path.exists());

    // A's reads say its file was evicted, and name none.
    let read = h.exec.read_output(&a.id).unwrap();
    assert!(read.stdout.spill_evicted);
    assert_eq!(read.stdout.spill_path, None);
    assert!(!read.stderr.spill_evicted, "stderr never spilled");
    assert_eq!(h.spill_files(), [(crowded_path, 60_000)]);
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

    // B finishing evicts A: A's spill file is deleted with it.
    let b = h.start_and_finish("echo b").await;
    assert!(!a_path.exists(), "{a_path:?} outlived its task");
    assert!(matches!(
        h.exec.read_output(&a.id),
        Err(ExecError::UnknownTask(_))
    ));
    assert_eq!(h.exec.read_output(&b.id).unwrap().stdout.text, "b\n");

    // Its bytes were freed: a command using all but a byte of the budget spills whole.
    let later = h.run(&bytes(BUDGET - 1)).await;
    let later_path = PathBuf::from(later.stdout.spill_path.expect("complete spill"));
    assert_eq!(size(&later_path), BUDGET - 1);
    h.exec.shutdown().await;
}
