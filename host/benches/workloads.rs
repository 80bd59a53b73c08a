//! The project's benchmark: each figure of the performance goals as a ratio to a floor measured
//! in the same run.
//!
//! `cargo bench -p dsh-host --bench workloads` runs the full workloads and prints a table.
//! Under `cargo test` (no `--bench` argument) every workload runs once at a tiny scale, so the
//! benchmark keeps building and working without timing anything.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../../tests/support/nats.rs"]
mod nats;
#[path = "../../tests/support/nested_cargo.rs"]
mod nested_cargo;
#[path = "../../tests/support/provision.rs"]
mod provision;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");

/// Calls in a row on one side of the spawn comparison.
const BLOCK: usize = 20;

struct Scale {
    /// Blocks of [`BLOCK`] calls on each side of the spawn comparison.
    rounds: usize,
    big_output: &'static str,
    /// Runs of each side of the big-output comparison.
    big_runs: usize,
    background_tasks: usize,
    process_runs: usize,
    /// HTTP sessions calling at once, calls each, and idle sessions for the memory figure.
    http_sessions: (usize, usize, usize),
    /// Pool sessions calling at once, calls each, and rounds of each side of the spread
    /// comparison.
    pool_sessions: (usize, usize, usize),
}

const FULL: Scale = Scale {
    rounds: 50,
    big_output: "1G",
    big_runs: 5,
    background_tasks: 100,
    process_runs: 30,
    http_sessions: (100, 10, 1000),
    pool_sessions: (100, 10, 5),
};

const SMOKE: Scale = Scale {
    rounds: 1,
    big_output: "1M",
    big_runs: 1,
    background_tasks: 3,
    process_runs: 1,
    http_sessions: (3, 2, 10),
    pool_sessions: (3, 2, 1),
};

fn main() {
    // `cargo bench` runs this program with LD_LIBRARY_PATH naming the toolchain's and the
    // target's directories; every program started from here, and every `bash` the hosts start,
    // would then look for its libraries there first (68 file opens for a `bash -c true` here
    // instead of 32), which an installed host's commands do not. Removed before any thread
    // starts, so that the workloads and their floors run as a user's would.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::remove_var("LD_LIBRARY_PATH") };
    let full = std::env::args().any(|a| a == "--bench");
    let scale = if full { &FULL } else { &SMOKE };
    let work = tempfile::tempdir().expect("temp dir");
    let cache = work.path().join("cache");
    // Warm the compiled-component cache, as any installed host has after its first start.
    run_call(&cache, "true");

    // `cargo bench -p dsh-host --bench workloads -- spawn big` runs only the named workloads;
    // `pool` names every `pool_…` one.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| {
        named.is_empty()
            || named.iter().any(|n| {
                n == name
                    || name
                        .strip_prefix(n.as_str())
                        .is_some_and(|rest| rest.starts_with('_'))
            })
    };
    let mut report = Report::default();
    if wanted("spawn") {
        spawn_overhead(scale, &cache, &mut report);
    }
    if wanted("sandbox") {
        sandbox_overhead(scale, &cache, work.path(), &mut report);
    }
    if wanted("sandbox_walk") {
        sandbox_walk(scale, &cache, work.path(), &mut report);
    }
    if wanted("sandbox_read") {
        sandbox_read(scale, &cache, work.path(), &mut report);
    }
    if wanted("sandbox_repo") {
        sandbox_repo(scale, &cache, work.path(), &mut report);
    }
    if wanted("served") {
        served_executor(scale, &cache, &mut report);
    }
    if wanted("policy") {
        policy_overhead(scale, &cache, work.path(), &mut report);
    }
    if wanted("big") {
        big_output(scale, &cache, work.path(), &mut report);
    }
    if wanted("background") {
        background_fan_out(scale, &cache, &mut report);
    }
    if wanted("start") {
        process_start(scale, &cache, &mut report);
    }
    if wanted("sessions") {
        http_sessions(scale, &cache, &mut report);
    }
    if wanted("pool_call") {
        pool_call(scale, &cache, work.path(), &mut report);
    }
    if wanted("pool_spread") {
        pool_spread(scale, work.path(), &mut report);
    }
    if full {
        println!("{}", machine_description());
        report.print();
    } else {
        println!(
            "workloads ran once at smoke scale ({} figures)",
            report.rows.len()
        );
    }
}

#[derive(Default)]
struct Report {
    rows: Vec<(String, String, String, String, String)>,
}

impl Report {
    fn ratio(&mut self, name: &str, measured: Duration, floor: Duration, goal: f64) {
        let ratio = measured.as_secs_f64() / floor.as_secs_f64();
        self.rows.push((
            name.into(),
            format!("{:.3} ms", ms(measured)),
            format!("{:.3} ms", ms(floor)),
            format!("{ratio:.3}"),
            verdict(ratio <= goal, format!("≤ {goal}")),
        ));
    }

    fn absolute(&mut self, name: &str, measured: String, goal: String, ok: bool) {
        self.rows.push((
            name.into(),
            measured,
            "-".into(),
            "-".into(),
            verdict(ok, goal),
        ));
    }

    /// A ratio without a goal of its own: reported, never judged.
    fn compare(&mut self, name: &str, measured: f64, floor: f64, unit: &str) {
        self.rows.push((
            name.into(),
            format!("{measured:.2} {unit}"),
            format!("{floor:.2} {unit}"),
            format!("{:.3}", measured / floor),
            "-".into(),
        ));
    }

    /// A figure without a floor or a goal.
    fn note(&mut self, name: &str, measured: String) {
        self.rows
            .push((name.into(), measured, "-".into(), "-".into(), "-".into()));
    }

    fn print(&self) {
        println!("| figure | measured | floor | ratio | goal |");
        println!("|---|---|---|---|---|");
        for (a, b, c, d, e) in &self.rows {
            println!("| {a} | {b} | {c} | {d} | {e} |");
        }
    }
}

fn verdict(ok: bool, goal: String) -> String {
    format!("{goal} {}", if ok { "(met)" } else { "(NOT met)" })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// The 99th percentile (nearest rank).
fn p99(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    let rank = (xs.len() * 99).div_ceil(100);
    xs[rank.saturating_sub(1)]
}

/// `bash` with `true` through `dsh-host mcp`, against `bash -c true` spawned directly: by Python's
/// `subprocess.run` (the floor the goal names) and by Rust's `std::process::Command`.
fn spawn_overhead(scale: &Scale, cache: &Path, report: &mut Report) {
    let mut server = McpServer::start(cache, &[]);
    let mut python = PythonSpawner::start();
    let (mut rust, mut py, mut mcp) = (Vec::new(), Vec::new(), Vec::new());
    // Short blocks of each in turn: drift in machine load hits every side alike, while each
    // block runs warm, as calls in a row do.
    for _ in 0..scale.rounds {
        for _ in 0..BLOCK {
            let t = Instant::now();
            let status = Command::new("bash")
                .args(["-c", "true"])
                .status()
                .expect("bash runs");
            rust.push(t.elapsed());
            assert!(status.success());
        }
        if let Some(python) = python.as_mut() {
            for _ in 0..BLOCK {
                py.push(python.run());
            }
        }
        for _ in 0..BLOCK {
            let t = Instant::now();
            let r = server.call(
                "bash",
                json!({"command": "true", "description": "Run true"}),
            );
            mcp.push(t.elapsed());
            assert_eq!(r["content"][0]["text"], "(no output)", "{r}");
        }
    }
    server.stop();
    let mcp = median(mcp);
    if !py.is_empty() {
        report.ratio(
            "`bash` true via MCP ÷ `bash -c true` by Python `subprocess.run`",
            mcp,
            median(py),
            1.15,
        );
    }
    report.ratio(
        "`bash` true via MCP ÷ `bash -c true` by Rust `Command::status`",
        mcp,
        median(rust),
        1.15,
    );
}

/// A `bash` call in each sandbox tier (workspace-write, network off) against the same call
/// unsandboxed, through `dsh-host mcp`, interleaved in blocks in one run.
///
/// The host's runtime directory (its cache here) is laid out as an installed host's is: outside
/// the workspace and `/tmp` (`~/.cache/dsh-host`, `$XDG_RUNTIME_DIR/dsh-host` or
/// `/var/tmp/dsh-host-<uid>`). The sandbox denies reading it, and Landlock spells a denial out
/// entry by entry in every directory above it: under `/tmp` every entry of `/tmp` would be a
/// rule, and files a command made in `/tmp` would be unreadable until the next command.
fn sandbox_overhead(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let cwd = work.display().to_string();
    let runtime = runtime_dir(cache);
    let cache = runtime.path();
    let servers = [
        McpServer::start(cache, &["--cwd", &cwd]),
        sandboxed(cache, &cwd, "landlock"),
        sandboxed(cache, &cwd, "namespaces"),
    ];
    let [plain, landlock, namespaces] = median_true_calls(servers, scale.rounds);
    report.ratio(
        "`bash` true, Landlock + seccomp sandbox ÷ unsandboxed (both via MCP)",
        landlock,
        plain,
        1.10,
    );
    report.ratio(
        "`bash` true, namespace-tier sandbox ÷ unsandboxed (both via MCP)",
        namespaces,
        plain,
        1.5,
    );
}

/// A walk over a tree of 1,051 directories (`find -type d`), in the Landlock tier against
/// unsandboxed: a command that opens many directories and few files, the case where the
/// sandbox's notifications would cost most.
fn sandbox_walk(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let tree = work.join("walk");
    for d in 0..50 {
        for e in 0..20 {
            std::fs::create_dir_all(tree.join(format!("d{d}/e{e}"))).expect("the tree");
        }
    }
    let command = format!("find '{}' -type d > /dev/null", tree.display());
    let name =
        "`find` over 1,051 directories, Landlock + seccomp sandbox ÷ unsandboxed (both via MCP)";
    landlock_against_plain(scale, cache, work, &command, name, report);
}

/// `cat` of 961 small files in 31 directories, in the Landlock tier against unsandboxed: a
/// command that reads many files, each open handed to the helper and judged.
fn sandbox_read(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let tree = work.join("read");
    for d in 0..31 {
        std::fs::create_dir_all(tree.join(format!("d{d}"))).expect("the tree");
        for f in 0..31 {
            std::fs::write(tree.join(format!("d{d}/f{f}")), "x\n").expect("a file");
        }
    }
    let command = format!("cat '{}'/*/* > /dev/null", tree.display());
    let name = "`cat` of 961 files, Landlock + seccomp sandbox ÷ unsandboxed (both via MCP)";
    landlock_against_plain(scale, cache, work, &command, name, report);
}

/// `command` (a long one: a fifth of the rounds) in `work`, in the Landlock tier against
/// unsandboxed, reported as `name`.
fn landlock_against_plain(
    scale: &Scale,
    cache: &Path,
    work: &Path,
    command: &str,
    name: &str,
    report: &mut Report,
) {
    let runtime = runtime_dir(cache);
    let cwd = work.display().to_string();
    let servers = [
        McpServer::start(runtime.path(), &["--cwd", &cwd]),
        sandboxed(runtime.path(), &cwd, "landlock"),
    ];
    let [plain, landlock] = median_calls(servers, scale.rounds.div_ceil(5), command);
    report.compare(name, ms(landlock), ms(plain), "ms");
}

/// The call of [`sandbox_overhead`] with a git repository as the workspace, as an agent's
/// usually is: 68 directories three deep, `git init`'s hooks and configuration. Before each
/// command the sandbox finds what to protect in it (git's hooks and configuration, nested
/// repositories), and in the Landlock tier snapshots them, then checks them after.
fn sandbox_repo(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let repo = work.join("repo");
    for a in 0..4 {
        for b in 0..4 {
            for c in 0..3 {
                std::fs::create_dir_all(repo.join(format!("src{a}/m{b}/d{c}"))).expect("the repo");
            }
        }
    }
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status()
        .expect("git");
    assert!(init.success(), "git init");
    let runtime = runtime_dir(cache);
    // As a user's repository is when an agent starts: not changed in the last seconds (the
    // sandbox looks again at directories changed within two seconds of its last look, the
    // repository's and those on the way to what it denies, `/var/tmp` among them).
    std::thread::sleep(Duration::from_millis(2100));
    let cwd = repo.display().to_string();
    let servers = [
        McpServer::start(runtime.path(), &["--cwd", &cwd]),
        sandboxed(runtime.path(), &cwd, "landlock"),
        sandboxed(runtime.path(), &cwd, "namespaces"),
    ];
    let [plain, landlock, namespaces] = median_true_calls(servers, scale.rounds);
    report.compare(
        "`bash` true in a git repository of 68 directories, Landlock + seccomp sandbox ÷ \
         unsandboxed (both via MCP)",
        ms(landlock),
        ms(plain),
        "ms",
    );
    report.compare(
        "`bash` true in a git repository of 68 directories, namespace-tier sandbox ÷ unsandboxed \
         (both via MCP)",
        ms(namespaces),
        ms(plain),
        "ms",
    );
}

/// `dsh-host mcp` in `cwd` with a workspace-write sandbox (network off) in `tier`.
fn sandboxed(cache: &Path, cwd: &str, tier: &str) -> McpServer {
    McpServer::start(
        cache,
        &[
            "--cwd",
            cwd,
            "--sandbox",
            "workspace-write",
            "--sandbox-tier",
            tier,
        ],
    )
}

/// A runtime directory for the hosts (their cache) outside `/tmp` and the workspace, holding
/// the compiled component of `cache` (see [`sandbox_overhead`]).
fn runtime_dir(cache: &Path) -> tempfile::TempDir {
    let runtime = tempfile::tempdir_in("/var/tmp").expect("a runtime directory in /var/tmp");
    for entry in std::fs::read_dir(cache).expect("the warm cache").flatten() {
        std::fs::copy(entry.path(), runtime.path().join(entry.file_name()))
            .expect("the compiled component copied");
    }
    runtime
}

/// The median time of a `bash` `true` call on each server, calls interleaved in blocks of
/// [`BLOCK`] over `rounds` rounds, so that every server sees the same machine; then the servers
/// are stopped.
fn median_true_calls<const N: usize>(servers: [McpServer; N], rounds: usize) -> [Duration; N] {
    median_calls(servers, rounds, "true")
}

/// [`median_true_calls`] for `command`, which prints nothing.
fn median_calls<const N: usize>(
    mut servers: [McpServer; N],
    rounds: usize,
    command: &str,
) -> [Duration; N] {
    let mut times: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..rounds {
        for (server, times) in servers.iter_mut().zip(times.iter_mut()) {
            for _ in 0..BLOCK {
                let t = Instant::now();
                let r = server.call(
                    "bash",
                    json!({"command": command, "description": "Run a command"}),
                );
                times.push(t.elapsed());
                assert_eq!(r["content"][0]["text"], "(no output)", "{r}");
            }
        }
    }
    for server in servers {
        server.stop();
    }
    times.map(median)
}

/// A `bash` call with the executor behind `dsh-host executor serve --stdio`
/// (`--executor-command`) against the same call on the in-process executor, both via MCP,
/// interleaved in blocks in one run: what the protocol's round trips and the second process cost.
fn served_executor(scale: &Scale, cache: &Path, report: &mut Report) {
    let command = format!("exec '{BIN}' executor serve --stdio");
    let servers = [
        McpServer::start(cache, &[]),
        McpServer::start(cache, &["--executor-command", &command]),
    ];
    let [in_process, served] = median_true_calls(servers, scale.rounds);
    report.ratio(
        "`bash` true, executor via `executor serve --stdio` ÷ in process (both via MCP)",
        served,
        in_process,
        1.15,
    );
}

/// 200 rules of every kind, the last allowing `true`.
fn policy_file() -> String {
    let mut deny = Vec::new();
    let mut ask = Vec::new();
    let mut allow = Vec::new();
    for i in 0..66 {
        deny.push(format!("\"Bash(tool{i} --dangerous *)\""));
        ask.push(format!("\"Bash(deploy{i} *)\""));
        allow.push(format!("\"Bash(build{i} --target * --release)\""));
    }
    deny.push("\"Write(~/.bashrc)\"".to_string());
    allow.push("\"Bash(true)\"".to_string());
    format!(
        "[permissions]\ndefault = \"ask\"\ndeny = [{}]\nask = [{}]\nallow = [{}]\n",
        deny.join(", "),
        ask.join(", "),
        allow.join(", ")
    )
}

/// The engine on a 10 KB command against 200 rules (in process), and a `bash` call allowed by a
/// rule of those 200 against the same call without a policy (both via MCP, interleaved).
fn policy_overhead(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let text = policy_file();
    let policy = dsh_policy::Policy::from_sources(&[("bench.toml".into(), text.clone())])
        .expect("the benchmark's policy reads");
    assert_eq!(policy.rule_count(), 200);
    // Lists, pipelines, substitutions, quoting and redirects: what agents send, 10 KB of it.
    let unit = "cd src && build3 --target x86_64 --release | grep -v 'warning: unused' > /dev/null; \
                echo \"$(git rev-parse HEAD)\" && ls -la \"dir with spaces\" || true\n";
    let mut command = String::new();
    while command.len() < 10 * 1024 {
        command.push_str(unit);
    }
    let call = dsh_policy::Call {
        command: &command,
        cwd: "/work",
        home: Some("/home/user"),
    };
    let grants = dsh_policy::Grants::default();
    let runs = if scale.rounds > 1 { 200 } else { 2 };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let verdict = policy.evaluate(&call, &grants);
        times.push(t.elapsed());
        assert!(
            matches!(verdict, dsh_policy::Verdict::Ask(_)),
            "{verdict:?}"
        );
    }
    let evaluate = median(times);
    report.absolute(
        &format!(
            "policy: {} KB command against 200 rules, one evaluation",
            command.len() / 1024
        ),
        format!("{:.3} ms", ms(evaluate)),
        "≤ 1 ms".into(),
        evaluate <= Duration::from_millis(1),
    );

    let file = work.join("bench-policy.toml");
    std::fs::write(&file, text).expect("policy file written");
    let cwd = work.display().to_string();
    let servers = [
        McpServer::start(cache, &["--cwd", &cwd]),
        McpServer::start(cache, &["--cwd", &cwd, "--policy", file.to_str().unwrap()]),
    ];
    let [plain, allowed] = median_true_calls(servers, scale.rounds);
    report.ratio(
        "`bash` true allowed by a rule of 200 ÷ no policy (both via MCP)",
        allowed,
        plain,
        1.05,
    );
}

/// A Python process that runs `bash -c true` with `subprocess.run` on request and reports how
/// long that took, timed inside Python.
struct PythonSpawner {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PythonSpawner {
    const SCRIPT: &str = "\
import subprocess, sys, time
for _ in sys.stdin:
    t = time.perf_counter()
    subprocess.run(['bash', '-c', 'true'], check=True)
    print(time.perf_counter() - t, flush=True)
";

    /// None where there is no `python3`.
    fn start() -> Option<Self> {
        let mut child = Command::new("python3")
            .args(["-c", Self::SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = BufReader::new(child.stdout.take()?);
        Some(Self {
            child,
            stdin,
            stdout,
        })
    }

    fn run(&mut self) -> Duration {
        self.stdin.write_all(b"\n").expect("python reads");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("python answers");
        let secs: f64 = line.trim().parse().expect("python prints seconds");
        Duration::from_secs_f64(secs)
    }
}

impl Drop for PythonSpawner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One foreground call printing a lot, against the same bytes through a pipe into `cat`; each
/// side several times in turn, medians compared.
fn big_output(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let size = scale.big_output;
    let spill = work.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut server = McpServer::start(cache, &["--spill-dir", spill.to_str().unwrap()]);
    let (mut floors, mut calls) = (Vec::new(), Vec::new());
    for _ in 0..scale.big_runs {
        let t = Instant::now();
        let status = Command::new("bash")
            .args(["-c", &format!("head -c {size} /dev/zero | cat >/dev/null")])
            .status()
            .expect("bash runs");
        floors.push(t.elapsed());
        assert!(status.success());

        let t = Instant::now();
        let r = server.call(
            "bash",
            json!({"command": format!("head -c {size} /dev/zero"), "description": "Print many zero bytes"}),
        );
        calls.push(t.elapsed());
        assert_eq!(r["isError"], false, "{r}");
    }
    let peak = server.peak_rss_kib();
    server.stop();
    report.ratio(
        &format!("{size}B stdout in one call ÷ `head | cat`"),
        median(calls),
        median(floors),
        1.5,
    );
    report.absolute(
        "host peak RSS during those calls",
        format!("{:.1} MiB", peak as f64 / 1024.0),
        "≤ 32 MiB".into(),
        peak <= 32 * 1024,
    );
}

/// Many background tasks started and every completion notice received.
fn background_fan_out(scale: &Scale, cache: &Path, report: &mut Report) {
    let n = scale.background_tasks;
    // The default running-task limit (64) is below the workload's 100.
    let mut server = McpServer::start(cache, &["--max-tasks", "128"]);
    let t = Instant::now();
    for _ in 0..n {
        let r = server.call(
            "bash",
            json!({"command": "sleep 1", "description": "Sleep in the background", "run_in_background": true}),
        );
        assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("started background task"),
            "{r}"
        );
    }
    let mut done = 0;
    while done < n {
        let msg = server
            .next_message(Duration::from_secs(30))
            .expect("completion notices arrive");
        if msg["method"] == "notifications/message" {
            done += 1;
        }
    }
    let wall = t.elapsed();
    let peak = server.peak_rss_kib();
    server.stop();
    report.absolute(
        &format!("{n} background `sleep 1` started and reported"),
        format!(
            "{:.3} s wall, {:.1} MiB peak RSS",
            wall.as_secs_f64(),
            peak as f64 / 1024.0
        ),
        "≤ 1.3 s, ≤ 48 MiB".into(),
        wall <= Duration::from_millis(1300) && peak <= 48 * 1024,
    );
}

/// A whole `dsh-host call` process against a whole `node -e 0` process.
fn process_start(scale: &Scale, cache: &Path, report: &mut Report) {
    let mut host = Vec::new();
    let mut node = Vec::new();
    let have_node = Command::new("node")
        .args(["-e", "0"])
        .status()
        .is_ok_and(|s| s.success());
    for _ in 0..scale.rounds {
        for _ in 0..scale.process_runs {
            let t = Instant::now();
            run_call(cache, "true");
            host.push(t.elapsed());
            if have_node {
                let t = Instant::now();
                Command::new("node")
                    .args(["-e", "0"])
                    .status()
                    .expect("node runs");
                node.push(t.elapsed());
            }
        }
    }
    if have_node {
        report.ratio(
            "`dsh-host call bash true` process ÷ `node -e 0`",
            median(host),
            median(node),
            0.25,
        );
    } else {
        report.absolute(
            "`dsh-host call` process",
            format!("{:.3} ms", ms(median(host))),
            "node missing: no floor".into(),
            false,
        );
    }
}

/// Many agents on one host: `dsh-host mcp --http` with sessions calling `bash` `true` at once,
/// against the same number of `bash -c true` spawned from the client with the same concurrency,
/// and the host's memory with many idle sessions. The client is
/// `tests/mcp-clients/python/http_bench.py`, run by the Python of the venv the tests use
/// (`target/test-env/mcp-clients/venv`, made on first use).
fn http_sessions(scale: &Scale, cache: &Path, report: &mut Report) {
    let root = provision::repo();
    let python = provision::python_venv(
        "mcp-clients",
        &root.join("tests/mcp-clients/python/requirements.txt"),
    );
    let (active, each, idle) = scale.http_sessions;
    let out = Command::new(&python)
        .arg(root.join("tests/mcp-clients/python/http_bench.py"))
        .arg(BIN)
        .args([active, each, idle, 1].map(|n| n.to_string()))
        .env("DSH_CACHE_DIR", cache)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "http_bench.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("http_bench.py prints JSON");
    let figure = |part: &str, key: &str| r[part][key].as_f64().expect("a measured figure");
    report.compare(
        &format!("{active} HTTP sessions × {each} `bash` `true` at once, wall time ÷ as many `bash -c true` spawned {active} at a time from the client"),
        figure("active", "wall_s") * 1000.0,
        figure("floor", "wall_s") * 1000.0,
        "ms",
    );
    report.compare(
        "the same, 99th-percentile latency of a call ÷ of a spawn",
        figure("active", "latency_ms_p99"),
        figure("floor", "latency_ms_p99"),
        "ms",
    );
    let p99 = |part: &str| Duration::from_secs_f64(figure(part, "latency_ms_p99") / 1000.0);
    report.ratio(
        &format!(
            "the same sessions' p99 latency while one more session floods at its limit of {} calls ÷ without it",
            r["flooded"]["flood_width"]
        ),
        p99("flooded"),
        p99("active"),
        1.5,
    );
    let rss_mib = r["idle"][0]["rss_kib"].as_f64().expect("RSS") / 1024.0;
    report.absolute(
        &format!("host RSS with {idle} idle HTTP sessions"),
        format!("{rss_mib:.1} MiB"),
        "≤ 64 MiB".into(),
        rss_mib <= 64.0,
    );
}

/// A NATS server on loopback (`tests/support/nats.rs`) and pools of executor nodes on it
/// (`dsh-host executor serve --nats`), each pool under a prefix of its own and each node in a
/// directory of its own, with the pool's default heartbeat and lease. Dropping it stops the
/// nodes (they leave their pools), then the server.
struct LoopbackPools {
    nodes: Vec<Child>,
    cluster: nats::Cluster,
}

impl LoopbackPools {
    /// `pools`: (prefix, nodes) for each pool.
    fn start(work: &Path, pools: &[(&str, usize)]) -> Self {
        let cluster = nats::Cluster::start(1);
        let url = cluster.url(0);
        let mut nodes = Vec::new();
        for (prefix, n) in pools {
            for i in 0..*n {
                let id = format!("{prefix}-{i}");
                let dir = work.join("pool-nodes").join(&id);
                std::fs::create_dir_all(&dir).unwrap();
                let log = std::fs::File::create(dir.with_extension("log")).unwrap();
                let child = Command::new(BIN)
                    .args(["executor", "serve", "--nats", &url, "--node-id", &id])
                    .args(["--nats-prefix", prefix])
                    .current_dir(&dir)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("a pool node starts");
                nodes.push(child);
            }
        }
        LoopbackPools { nodes, cluster }
    }

    fn url(&self) -> String {
        self.cluster.url(0)
    }
}

impl Drop for LoopbackPools {
    fn drop(&mut self) {
        for child in &self.nodes {
            // SAFETY: a signal to a child of ours, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        for child in &mut self.nodes {
            let _ = child.wait();
        }
    }
}

/// A `bash` call with the executor on a pool of one node (NATS on loopback) against the same
/// call on the in-process executor, both via `dsh-host mcp`, interleaved in blocks in one run:
/// what placement, the NATS round trips and the node's process cost.
fn pool_call(scale: &Scale, cache: &Path, work: &Path, report: &mut Report) {
    let pools = LoopbackPools::start(work, &[("dsh", 1)]);
    let servers = [
        McpServer::start(cache, &[]),
        McpServer::start(cache, &["--executor", &pools.url()]),
    ];
    let [in_process, pooled] = median_true_calls(servers, scale.rounds);
    report.ratio(
        "`bash` true, executor on a pool of 1 node (NATS on loopback) ÷ in process (both via MCP)",
        pooled,
        in_process,
        1.3,
    );
    let (round_trip, claim) = nats_floors(&pools.url(), scale.rounds * BLOCK);
    report.note(
        "the same, one NATS request and its reply between two clients on loopback, alone (a pooled call makes one, `run`: a placed session's requests are resolved at the front)",
        format!("{:.3} ms", ms(round_trip)),
    );
    report.note(
        "the same, one create-if-absent of a new key in a key-value bucket, alone (a node claims each `run`'s request id so)",
        format!("{:.3} ms", ms(claim)),
    );
}

/// The medians of a request answered by another client through the server at `url`, and of a
/// create-if-absent of a new key in a key-value bucket on it, with nothing else to do: the
/// transport's and the request store's parts of a pooled call.
fn nats_floors(url: &str, requests: usize) -> (Duration, Duration) {
    use futures_util::StreamExt;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let responder = async_nats::connect(url).await.expect("NATS answers");
        let requester = async_nats::connect(url).await.expect("NATS answers");
        let mut requests_in = responder
            .subscribe("bench.echo")
            .await
            .expect("a subscription");
        responder
            .flush()
            .await
            .expect("the subscription is in place");
        let echo = tokio::spawn(async move {
            while let Some(message) = requests_in.next().await {
                if let Some(reply) = message.reply {
                    let _ = responder.publish(reply, message.payload).await;
                }
            }
        });
        // A flush does not wait for the server to have the subscription: the first requests
        // may find no responder yet.
        let ready = Instant::now() + Duration::from_secs(10);
        while requester.request("bench.echo", "x".into()).await.is_err() {
            assert!(Instant::now() < ready, "the echo never answered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut times = Vec::with_capacity(requests);
        for _ in 0..requests {
            let t = Instant::now();
            requester
                .request("bench.echo", "x".into())
                .await
                .expect("the echo answers");
            times.push(t.elapsed());
        }
        echo.abort();
        let round_trip = median(times);

        let js = async_nats::jetstream::new(requester);
        let bucket = js
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: "bench-claims".to_string(),
                history: 1,
                ..Default::default()
            })
            .await
            .expect("a bucket");
        let mut times = Vec::with_capacity(requests);
        for i in 0..requests {
            let t = Instant::now();
            bucket
                .create(format!("claim-{i}"), "x".into())
                .await
                .expect("a new key");
            times.push(t.elapsed());
        }
        (round_trip, median(times))
    })
}

/// Sessions (owner tokens) of one front in this process, all calling `bash` `true` at once,
/// each its calls one after another, on a pool of three nodes against the same on a pool of one
/// node (one NATS server on loopback, the pools under prefixes of their own): throughput and
/// 99th-percentile latency of a call, each side's rounds alternating with the other's. Each
/// round's sessions are new, so their first calls place them.
fn pool_spread(scale: &Scale, work: &Path, report: &mut Report) {
    use dsh_host::executor::Executor;
    use dsh_host::executor::pool::{PoolExecutor, PoolOptions};

    let (sessions, calls, rounds) = scale.pool_sessions;
    let pools = LoopbackPools::start(work, &[("one", 1), ("three", 3)]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let front = |prefix: &str, nodes: usize| {
        let options = PoolOptions {
            urls: vec![pools.url()],
            prefix: prefix.to_string(),
            ..PoolOptions::default()
        };
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        let front = PoolExecutor::connect(options, tx).expect("the front reaches the pool");
        let deadline = Instant::now() + Duration::from_secs(30);
        while front.nodes().len() < nodes {
            assert!(
                Instant::now() < deadline,
                "the {prefix} pool's nodes are not live"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        front
    };
    let one = front("one", 1);
    let three = front("three", 3);
    // Per side: wall time, then the latencies of the sessions' first calls (placement
    // included) and of their later calls.
    let mut times: [(Duration, Vec<Duration>, Vec<Duration>); 2] = Default::default();
    let mut spread = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..rounds {
        for (side, front) in [&one, &three].into_iter().enumerate() {
            let t = Instant::now();
            let latencies = runtime.block_on(spread_round(front, round, sessions, calls));
            times[side].0 += t.elapsed();
            for session in latencies {
                let (first, later) = session.split_first().expect("a call");
                times[side].1.push(*first);
                times[side].2.extend_from_slice(later);
            }
        }
        for s in 0..sessions {
            let owner = format!("r{round}-s{s}");
            let node = three.placement(Some(&owner)).expect("placed").node;
            *spread.entry(node).or_default() += 1;
        }
    }
    runtime.block_on(async {
        one.shutdown().await;
        three.shutdown().await;
    });
    let all = (sessions * calls * rounds) as f64;
    let throughput = |side: usize| all / times[side].0.as_secs_f64();
    let latency = |side: usize, first: bool, later: bool| {
        let mut all = Vec::new();
        if first {
            all.extend_from_slice(&times[side].1);
        }
        if later {
            all.extend_from_slice(&times[side].2);
        }
        ms(p99(all))
    };
    report.compare(
        &format!(
            "{sessions} pool sessions × {calls} `bash` `true` at once, throughput on 3 nodes ÷ on 1 node (one NATS server, loopback)"
        ),
        throughput(1),
        throughput(0),
        "calls/s",
    );
    report.compare(
        "the same, 99th-percentile latency of a call on 3 nodes ÷ on 1 node",
        latency(1, true, true),
        latency(0, true, true),
        "ms",
    );
    report.compare(
        "the same, of a session's first call (its placement) alone",
        latency(1, true, false),
        latency(0, true, false),
        "ms",
    );
    report.compare(
        "the same, of the later calls alone",
        latency(1, false, true),
        latency(0, false, true),
        "ms",
    );
    let spread: Vec<String> = spread
        .iter()
        .map(|(node, n)| format!("{node} {n}"))
        .collect();
    report.note(
        "the same, sessions placed on each of the 3 nodes",
        spread.join(", "),
    );
}

/// One round of [`pool_spread`]: `sessions` new sessions calling at once, `calls` each in turn;
/// each session's calls' latencies in order (a call is its `resolve` and its `run`, as a tool
/// call makes them).
async fn spread_round(
    front: &std::sync::Arc<dsh_host::executor::pool::PoolExecutor>,
    round: usize,
    sessions: usize,
    calls: usize,
) -> Vec<Vec<Duration>> {
    use dsh_host::executor::{Executor, Request};

    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let front = front.clone();
            let owner = format!("r{round}-s{s}");
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let t = Instant::now();
                    let request = Request {
                        command: "true".to_string(),
                        workdir: None,
                        timeout_ms: None,
                        owner: Some(owner.clone()),
                    };
                    // `resolve` waits for its answer: off the runtime's workers.
                    let resolver = front.clone();
                    let spec = tokio::task::spawn_blocking(move || resolver.resolve(request))
                        .await
                        .expect("resolve ran")
                        .expect("the pool resolves `true`");
                    let result = front
                        .run(spec, tokio_util::sync::CancellationToken::new())
                        .await
                        .expect("the pool runs `true`");
                    latencies.push(t.elapsed());
                    assert_eq!(result.exit_code, Some(0), "{result:?}");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(sessions);
    for task in tasks {
        latencies.push(task.await.expect("a session's calls"));
    }
    latencies
}

fn run_call(cache: &Path, command: &str) {
    let args = json!({"command": command, "description": "Run a command"}).to_string();
    let out = Command::new(BIN)
        .args(["call", "bash", &args])
        .env("DSH_CACHE_DIR", cache)
        .stderr(Stdio::inherit())
        .output()
        .expect("dsh-host runs");
    assert!(
        out.status.success(),
        "dsh-host call failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A `dsh-host mcp` child driven over newline-delimited JSON-RPC.
struct McpServer {
    child: Child,
    stdin: ChildStdin,
    /// Read in the calling thread, as a client waiting for its answer would: a reader thread
    /// handing lines over would add a thread wake-up to every call.
    stdout: BufReader<ChildStdout>,
    /// Messages that arrived while waiting for a response (notifications, mostly).
    pending: std::collections::VecDeque<Value>,
    next_id: u64,
}

impl McpServer {
    fn start(cache: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .arg("mcp")
            .args(extra)
            .env("DSH_CACHE_DIR", cache)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dsh-host mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Self {
            child,
            stdin,
            stdout,
            pending: Default::default(),
            next_id: 0,
        };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "dsh-bench", "version": "0"}}),
        );
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, msg: Value) {
        // One write per message, as a client would: formatting straight into the pipe would
        // write it in many small pieces, each waking the server.
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).expect("server reads");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let msg = self
                .next_message(Duration::from_secs(60))
                .expect("server answers");
            if msg["id"] == id {
                return msg["result"].clone();
            }
        }
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    fn next_message(&mut self, wait: Duration) -> Option<Value> {
        if let Some(msg) = self.pending.pop_front() {
            return Some(msg);
        }
        let deadline = Instant::now() + wait;
        let mut line = String::new();
        loop {
            // A whole line may already be buffered; otherwise wait (bounded) for more input.
            if !self.stdout.buffer().contains(&b'\n') {
                let left = deadline.saturating_duration_since(Instant::now());
                let mut fd = libc::pollfd {
                    fd: self.stdout.get_ref().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
                // SAFETY: poll on one valid descriptor.
                if unsafe { libc::poll(&mut fd, 1, ms) } <= 0 {
                    return None;
                }
            }
            line.clear();
            if self.stdout.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Ok(msg) = serde_json::from_str(&line) {
                return Some(msg);
            }
        }
    }

    /// The server's peak resident set so far, from /proc (VmHWM).
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.to_string()))
        .unwrap_or_default();
    let kernel = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("machine: {cpu}, {cores} cores, {mem}, Linux {kernel}")
}
