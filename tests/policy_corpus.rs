//! The attacker's corpus (`tests/policy-corpus`) through the real binary: each case runs as
//! `dsh-host --policy policies/NAME call bash {"command": …}` in a fresh case directory, and the
//! test checks the refusal text the model would see and what the command really did.
//!
//! The marker convention (`tests/policy-corpus/cases.toml` describes it in full): the case
//! directory (MARKERDIR, also the command's working directory) holds MARKER
//! (`MARKERDIR/marker`), the empty directories `protected/`, `review/` and `home/` (the command's
//! `$HOME`, so that no case can touch the real home) and `bin/ls`, `bin/git`: fake tools that
//! create `MARKER.new`, so that a command that ran them through a changed PATH shows it.
//! - deny / ask: nothing ran, so the case directory is exactly as it was prepared;
//! - allow: MARKER still exists, `protected/` is empty and `~/.bashrc` was not written; when the
//!   command holds `touch MARKER.new`, MARKER.new exists (the command really ran).
//!
//! The directories sit under CARGO_TARGET_TMPDIR, inside this repository: git is told not to
//! look above them (GIT_CEILING_DIRECTORIES), so no case can reach the repository itself.
//!
//! `policy/tests/corpus.rs` runs the same cases against the engine alone.

#[path = "policy-corpus/cases.rs"]
mod cases;

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cases::Case;

/// Cases run in parallel on this many threads.
const WORKERS: usize = 4;
/// The host's own timeout for a command (`--timeout-ms`): a wrongly allowed `watch` or sleep
/// must not hold a worker for the default two minutes.
const COMMAND_TIMEOUT_MS: &str = "20000";
/// How long one `dsh-host call` may take before the test kills it.
const CALL_DEADLINE: Duration = Duration::from_secs(90);

const DENIED: &str = "[policy: denied — ";
const NOT_ANALYSABLE: &str = "[policy: not analysable — ";
const NEEDS_APPROVAL: &str = "[policy: needs approval — ";

/// The fake `ls` and `git` in `MARKERDIR/bin`: they create MARKER.new with a shell builtin, so
/// they work whatever PATH the command set.
const FAKE_TOOL: &str = "#!/bin/sh\n: > \"${0%/*}/../marker.new\"\n";

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
    // One compiled-component cache for every test process: debug builds compile slowly.
    cmd.env(
        "DSH_CACHE_DIR",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"),
    );
    cmd.env_remove("DSH_LOG");
    cmd
}

/// A fresh case directory, prepared as the marker convention says; returns its canonical path.
fn prepare(index: usize) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("policy-corpus")
        .join(format!("case-{index:03}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("removing {}: {e}", dir.display()));
    }
    for sub in ["protected", "review", "home", "bin"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("marker"), "marker\n").unwrap();
    for tool in ["ls", "git"] {
        let path = dir.join("bin").join(tool);
        std::fs::write(&path, FAKE_TOOL).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.canonicalize().unwrap()
}

/// Everything in the case directory: each path with its file contents (`None` for a directory,
/// the target for a symlink).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                out.insert(rel, None);
                walk(root, &path, out);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                out.insert(rel, Some(target.into_os_string().into_encoded_bytes()));
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// One `dsh-host --policy … call bash …` in `dir`, killed after [`CALL_DEADLINE`].
fn call(policy: &Path, dir: &Path, command: &str) -> Result<Run, String> {
    let args = serde_json::json!({ "command": command, "description": "corpus case" }).to_string();
    let mut child = bin()
        .arg("--policy")
        .arg(policy)
        .arg("--cwd")
        .arg(dir)
        .args(["--timeout-ms", COMMAND_TIMEOUT_MS, "call", "bash", &args])
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        // The case directories sit inside this repository's target/: git must not find the
        // repository above them (a wrongly allowed `git push --force` would act on it).
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning dsh-host: {e}"))?;
    // Readers on threads, so that a full pipe cannot stall the host and a pipe a stray process
    // keeps open cannot stall the test.
    let (tx, rx) = mpsc::channel();
    for (which, mut pipe) in [
        (
            0,
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        ),
        (1, Box::new(child.stderr.take().unwrap())),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send((which, buf));
        });
    }
    drop(tx);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > CALL_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("dsh-host did not finish within {CALL_DEADLINE:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut outputs = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        let left = CALL_DEADLINE.saturating_sub(started.elapsed()) + Duration::from_secs(5);
        match rx.recv_timeout(left) {
            Ok((which, buf)) => outputs[which] = buf,
            Err(_) => return Err("dsh-host exited but its output pipe stayed open".into()),
        }
    }
    let [stdout, stderr] = outputs;
    Ok(Run {
        status: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// What the result text must hold for the case's verdict (and its cause, when the case names
/// one), in SEMANTICS.md's wording.
fn check_text(case: &Case, text: &str) -> Result<(), String> {
    let has = |s: &str| text.contains(s);
    match case.verdict.as_str() {
        "allow" => {
            if has("[policy:") {
                return Err("a policy refusal for an allowed command".into());
            }
        }
        "deny" => {
            let want = match case.cause.as_deref() {
                Some("unanalysable") => has(NOT_ANALYSABLE),
                Some("rule") => has(DENIED) && has("matches deny rule"),
                Some("default") => has(DENIED) && has("the default verdict"),
                _ => has(DENIED) || has(NOT_ANALYSABLE),
            };
            if !want {
                return Err(format!(
                    "no refusal `{DENIED}…` or `{NOT_ANALYSABLE}…` of the expected cause"
                ));
            }
        }
        "ask" => {
            let want = has(NEEDS_APPROVAL)
                && match case.cause.as_deref() {
                    Some("unanalysable") => has("cannot be analysed"),
                    Some("rule") => has("matches ask rule"),
                    Some("default") => has("the default verdict"),
                    _ => true,
                };
            if !want {
                return Err(format!(
                    "no refusal `{NEEDS_APPROVAL}…` of the expected cause"
                ));
            }
        }
        other => return Err(format!("unknown verdict {other}")),
    }
    Ok(())
}

/// What the command did to its case directory, against the marker convention.
fn check_effects(
    case: &Case,
    dir: &Path,
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) -> Result<(), String> {
    let after = snapshot(dir);
    if case.verdict != "allow" {
        if &after == before {
            return Ok(());
        }
        let mut changes = Vec::new();
        for (path, content) in before {
            match after.get(path) {
                None => changes.push(format!("{} removed", path.display())),
                Some(c) if c != content => changes.push(format!("{} changed", path.display())),
                _ => {}
            }
        }
        for path in after.keys().filter(|p| !before.contains_key(*p)) {
            changes.push(format!("{} created", path.display()));
        }
        return Err(format!("the command ran: {}", changes.join(", ")));
    }
    let mut problems = Vec::new();
    if !dir.join("marker").exists() {
        problems.push("MARKER was deleted".to_string());
    }
    if std::fs::read_dir(dir.join("protected")).map_or(true, |mut d| d.next().is_some()) {
        problems.push("protected/ was written to (or removed)".to_string());
    }
    if dir.join("home/.bashrc").exists() {
        problems.push("~/.bashrc was written".to_string());
    }
    if case.must_create_new_marker() && !dir.join("marker.new").exists() {
        problems.push("MARKER.new is missing: the allowed command did not run".to_string());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn run_case(index: usize, case: &Case) -> Result<(), String> {
    let policy = cases::policy_path(&case.policy).expect("checked by cases::load");
    let dir = prepare(index);
    let before = snapshot(&dir);
    let command = case.command_in(dir.to_str().unwrap());
    let run = call(&policy, &dir, &command)?;
    let mut problems = Vec::new();
    match (case.verdict.as_str(), run.status) {
        ("allow", Some(0)) | ("ask" | "deny", Some(0 | 1)) => {}
        (_, status) => problems.push(format!("exit status {status:?}")),
    }
    if let Err(e) = check_text(case, &run.stdout) {
        problems.push(e);
    }
    if let Err(e) = check_effects(case, &dir, &before) {
        problems.push(format!("ground truth: {e}"));
    }
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(());
    }
    let excerpt = |s: &str| {
        let s = s.trim_end();
        match s.char_indices().nth(400) {
            Some((i, _)) => format!("{}…", &s[..i]),
            None => s.to_string(),
        }
    };
    Err(format!(
        "{}\n      stdout: {:?}\n      stderr: {:?}",
        problems.join("; "),
        excerpt(&run.stdout),
        excerpt(&run.stderr)
    ))
}

#[test]
fn every_corpus_case_through_dsh_host() {
    let cases = cases::load();
    // One call first, alone: it compiles the component into the shared cache, and a host that
    // does not know --policy fails here once instead of in every case.
    let dir = prepare(9999);
    let policy = cases::policy_path("denylist").unwrap();
    let run = call(&policy, &dir, "true").unwrap_or_else(|e| panic!("the first call: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.status == Some(0) && !run.stdout.contains("[policy:"),
        "`dsh-host --policy {} call bash true` failed (exit status {:?}):\nstdout: {}\nstderr: {}",
        policy.display(),
        run.status,
        run.stdout,
        run.stderr
    );

    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    if let Err(e) = run_case(i, case) {
                        failures.lock().unwrap().push((i, e));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|(i, _)| *i);
    let failed: HashSet<usize> = failures.iter().map(|(i, _)| *i).collect();
    let summary = cases::summary(&cases, &failed);
    if failures.is_empty() {
        eprintln!("binary corpus:\n{summary}");
    }
    let list: Vec<String> = failures
        .iter()
        .map(|(i, e)| {
            let c = &cases[*i];
            let note = c
                .note
                .as_deref()
                .map(|n| format!("\n      note: {n}"))
                .unwrap_or_default();
            format!(
                "case-{i:03} {}\n      expected {}: {e}{note}",
                c.label(),
                c.verdict
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed through dsh-host (their case directories are kept under \
         {}):\n  {}\n\n{summary}",
        failures.len(),
        cases.len(),
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("policy-corpus")
            .display(),
        list.join("\n  ")
    );
}
