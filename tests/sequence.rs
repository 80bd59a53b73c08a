//! The stateful sequence test (issue 9, item 2): every command starts from the same clean state,
//! whatever the commands before it did.
//!
//! Each case is a random sequence of steps (foreground and background commands, timeouts with and
//! without a trapped TERM, self-signals, escaping children, `bash_kill` at random moments, the task
//! limit, big outputs past the memory and spill caps, vanished workdirs, concurrent calls, bad
//! arguments) run against ONE executor or ONE `dsh-host mcp` server, so that every command runs
//! after whatever the earlier ones did to the shared state. A model of what each step must answer
//! is kept next to the system under test, and after every step the invariants below are checked.
//! The sequences come from `proptest-state-machine`: seeded, reproducible, and shrunk to a minimal
//! failing sequence when an invariant breaks.
//!
//! Invariants, after every step (each a real assertion: a violation panics with its name, and
//! `self_check_*` below feeds broken results to the checkers to show that they fire):
//! - `health`: `echo health-<n>` answers exactly `health-<n>\n`, exit 0, within 2 s;
//! - `shape`: each result has the contract's shape for its operation (exit code xor signal; a
//!   timeout ends with SIGTERM or SIGKILL and no exit code; leftover counts exact: 0 for commands
//!   that start nothing, the number of escapees for escapee commands without a timeout; spill
//!   files and tails byte-exact; errors of the right kind; `kill -9 $PPID; <busy loop>; echo after` never
//!   prints `after`, in the foreground or in the background);
//! - `exactly-once`: every command appends `<cmd-id> $$` to a log file first; a command answered
//!   with a result or started as a task appears there exactly once, one answered with an error never;
//! - `survivors`: nothing a command started outlives it (leader and escapee pids, read back from
//!   files the commands write, are dead once the command or task has ended; zombies count as dead);
//! - `zombies`: no child of the host (this process in executor mode, `dsh-host` in MCP mode) stays a
//!   zombie for more than a second;
//! - `fds` / `threads`: the host's open fds stay below baseline + `FDS_PER_LIVE_TASK` per task
//!   not yet reported ended + 16 (so with no task, baseline + 16: a leak of one fd per command
//!   shows within a case), and its threads below baseline + 16;
//! - `forward-only`: task statuses only move forward (running -> completed | killed), exit facts
//!   never change once set, the task-done event / completion notice comes exactly once and agrees
//!   with the final status;
//! - `output`: `read_output` / `bash_output` never repeats or loses bytes (the concatenation of the
//!   reads is exactly the expected stream, or a later window of it after a lossy read);
//! - `task-limit`, `ids`: the limit refuses exactly when it must, with no state change (task ids stay
//!   contiguous);
//! - `host-alive`: the server process runs and answers `ping` within 2 s.
//!
//! Four combinations: the executor API and `dsh-host mcp`, each in cgroup containment (`Auto`) and
//! subreaper containment. Where no cgroup can be created, the cgroup combinations print a NOTICE
//! and skip, unless `DSH_REQUIRE_CGROUPS=1`, which turns that into a failure.
//!
//! Environment:
//! - `DSH_SEQUENCE_SEED=<u64>`: the base seed (printed by every run; random otherwise);
//! - `DSH_SEQUENCE_SOAK=<seconds>`: soak instead of the fixed CI budget: each combination keeps
//!   generating cases for that many seconds, records violations instead of stopping at the first,
//!   and prints cases, steps and violations at the end (`-- --nocapture` to see it while passing);
//! - `DSH_SEQUENCE_CASES=<n>`, `DSH_SEQUENCE_BATCH=<k>`: what a failure report names to reproduce;
//! - `DSH_SEQUENCE_SHRINK_SECS=<s>`: the shrinking budget per failure (default 60);
//! - `DSH_SEQUENCE_EXCLUDE=<name>,...`: leave out steps whose printed form contains a name (e.g.
//!   `KillParent9`), to look past a known violation while triaging;
//! - `DSH_SEQUENCE_VERBOSE=1`: print every step with its duration.
//!
//! Shrinking re-runs real processes, and some violations are races: a shorter sequence that
//! happens to pass is kept out, so a "minimal" sequence may still hold steps that are not needed.

#[path = "support/mcp_child.rs"]
mod mcp_child;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dsh_executor::{
    Config, Containment, ContainmentPreference, ExecError, Executor, LocalExecutor, Request,
    RunResult, SandboxConfig, SandboxMode, Task, TaskState, TierPreference,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestError, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// Settings

const GRACE_MS: u64 = 200;
const MAX_TASKS: usize = 4;
const MAX_OUTPUT: usize = 4000;
const MAX_SPILL: usize = 20_000;
const DEFAULT_TIMEOUT_MS: u32 = 20_000;
/// The health command's bound, and the `ping` bound.
const HEALTH_BOUND: Duration = Duration::from_secs(2);
/// Any single operation that takes longer than this hangs.
const OP_BOUND: Duration = Duration::from_secs(60);
/// The server's first answer waits for the component to load (and, on a cold cache, compile).
const STARTUP_BOUND: Duration = Duration::from_secs(300);
/// Cases per combination in the CI budget, and their length.
const CI_CASES: u32 = 4;
const STEPS_PER_CASE: std::ops::Range<usize> = 16..26;
/// Runs of a shorter sequence that must all pass before the shrinker drops a step.
const SHRINK_TRIES: usize = 3;
/// Open fds a background task may hold in the host until its end is reported. Measured on the
/// exec'd-helper executor: 10 per running task in cgroup mode (the cgroup directory,
/// `cgroup.events`, `cgroup.procs`, 4 anon inodes, 2 pipes, the helper socket), 7 in subreaper
/// mode; all released when the task ends. The bound is on growth, not on that design.
const FDS_PER_LIVE_TASK: usize = 12;
/// Slack after a command's end (and the grace) before its processes must be gone.
const DEATH_SLACK: Duration = Duration::from_secs(1);

/// The combinations run one at a time: fd and thread counts of this process are an invariant in
/// executor mode, and the machine is small.
static SERIAL: Mutex<()> = Mutex::new(());
static CASES_RUN: AtomicU64 = AtomicU64::new(0);
static STEPS_RUN: AtomicU64 = AtomicU64::new(0);
/// Steps run while shrinking a failure (not counted in `STEPS_RUN`).
static SHRINK_STEPS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The combination the proptest runner on this thread is driving.
    static COMBO: Cell<Option<Combo>> = const { Cell::new(None) };
    /// A case of this batch failed: later cases are the shrinker's.
    static SHRINKING: Cell<bool> = const { Cell::new(false) };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Executor,
    Mcp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Cgroup,
    Subreaper,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Combo {
    via: Via,
    mode: Mode,
    /// The sandbox tier commands run in (`--sandbox workspace-write`), if any.
    sandbox: Option<&'static str>,
}

impl Combo {
    fn name(self) -> &'static str {
        match (self.via, self.mode, self.sandbox) {
            (Via::Executor, Mode::Cgroup, None) => "executor_cgroup",
            (Via::Executor, Mode::Subreaper, None) => "executor_subreaper",
            (Via::Mcp, Mode::Cgroup, None) => "mcp_cgroup",
            (Via::Mcp, Mode::Subreaper, None) => "mcp_subreaper",
            (Via::Executor, _, Some(_)) => "executor_cgroup_sandboxed",
            (Via::Mcp, _, Some(_)) => "mcp_subreaper_sandboxed",
        }
    }

    fn index(self) -> u64 {
        match (self.via, self.mode, self.sandbox) {
            (Via::Executor, Mode::Cgroup, None) => 1,
            (Via::Executor, Mode::Subreaper, None) => 2,
            (Via::Mcp, Mode::Cgroup, None) => 3,
            (Via::Mcp, Mode::Subreaper, None) => 4,
            (Via::Executor, _, Some(_)) => 5,
            (Via::Mcp, _, Some(_)) => 6,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tests

#[test]
fn executor_cgroup() {
    run_combo(Combo {
        via: Via::Executor,
        mode: Mode::Cgroup,
        sandbox: None,
    });
}

#[test]
fn executor_subreaper() {
    run_combo(Combo {
        via: Via::Executor,
        mode: Mode::Subreaper,
        sandbox: None,
    });
}

#[test]
fn mcp_cgroup() {
    run_combo(Combo {
        via: Via::Mcp,
        mode: Mode::Cgroup,
        sandbox: None,
    });
}

#[test]
fn mcp_subreaper() {
    run_combo(Combo {
        via: Via::Mcp,
        mode: Mode::Subreaper,
        sandbox: None,
    });
}

/// Commands in a workspace-write sandbox, namespace tier (the sandbox must change nothing else).
#[test]
fn executor_cgroup_sandboxed() {
    run_combo(Combo {
        via: Via::Executor,
        mode: Mode::Cgroup,
        sandbox: Some("namespaces"),
    });
}

/// Commands in a workspace-write sandbox, Landlock tier, through `dsh-host mcp`.
#[test]
fn mcp_subreaper_sandboxed() {
    run_combo(Combo {
        via: Via::Mcp,
        mode: Mode::Subreaper,
        sandbox: Some("landlock"),
    });
}

// ---------------------------------------------------------------------------------------------
// Steps and their generation

/// KILL to the process group of `$PPID` (its helper's own).
const KILL_PARENT_GROUP9: &str = "kill -9 -- -$(ps -o pgid= -p $PPID | tr -d ' ')";

/// How a process escapes its command's process group or parent.
#[derive(Clone, Copy, Debug)]
enum Route {
    Setsid,
    DoubleFork,
    Nohup,
}

#[derive(Clone, Copy, Debug)]
enum Streams {
    Stdout,
    Stderr,
    Both,
}

/// A command that signals itself or its parent, run in the foreground.
#[derive(Clone, Copy, Debug)]
enum SelfSignal {
    /// `kill -9 $$`
    KillSelf9,
    /// `kill -STOP $$` with a short timeout.
    StopSelf { ms: u16 },
    /// `kill -TERM $PPID`, then carry on.
    TermParent,
    /// `kill -9 $PPID; <a builtin busy loop>; echo after`: `after` must never show (bash dies with
    /// its parent, a moment after the kill: the loop, a builtin, forks nothing and outlasts
    /// that moment).
    KillParent9,
    /// `kill -STOP $PPID`, then exit 3.
    StopParentThenExit,
    /// `kill -STOP $PPID`, then `echo after`: prompt, since the factory continues the helper.
    StopParentThenEcho,
    /// `kill 0`
    KillGroup,
    /// `kill -9 0`
    KillGroup9,
    /// TERM to the process group of `$PPID` (its helper's own: TERM is blocked there), then carry
    /// on.
    TermParentGroup,
    /// KILL to the process group of `$PPID`: as `KillParent9`.
    KillParentGroup9,
    /// KILL to the process group of the factory that forked `$PPID`, then carry on.
    KillFactoryGroup9,
}

/// A background command.
#[derive(Clone, Debug)]
enum Bg {
    /// Prints `1..=n`, one line every `pause_ms`.
    Seq {
        n: u8,
        pause_ms: u8,
    },
    /// `sleep 30`, with TERM ignored when `trap`: runs until killed.
    Long {
        trap: bool,
    },
    Exit {
        code: u8,
    },
    KillSelf9,
    KillParent9,
    TermParent,
    StopParentThenExit,
    KillGroup,
    /// KILL to the process group of `$PPID`: as `KillParent9`.
    KillParentGroup9,
    /// Starts escapees, prints `done-<id>`, then exits (or sleeps until killed when `linger`).
    Escapees {
        routes: Vec<Route>,
        linger: bool,
    },
    /// `seq 1 lines` at once: past the memory window, and for 8000 past the spill cap.
    BigSeq {
        lines: u32,
    },
}

#[derive(Clone, Debug)]
enum ConcOp {
    Echo { sleep_ms: u16 },
    Start(Bg),
    Kill { pick: u8 },
    Read { pick: u8 },
}

#[derive(Clone, Copy, Debug)]
enum BadTimeout {
    Zero,
    Negative,
    NotANumber,
    Infinite,
}

#[derive(Clone, Copy, Debug)]
enum UnknownOp {
    ReadNumber,
    KillNumber,
    ReadName,
    Blank,
}

/// One transition of a case.
#[derive(Clone, Debug)]
enum Step {
    Echo,
    Exit {
        code: u8,
    },
    Timeout {
        ms: u16,
        trap: bool,
    },
    SelfSignal(SelfSignal),
    Escapees {
        routes: Vec<Route>,
        timeout_ms: Option<u16>,
    },
    BigOutput {
        lines: u32,
        streams: Streams,
    },
    Start(Bg),
    FillTasks,
    Kill {
        pick: u8,
    },
    Read {
        pick: u8,
    },
    Concurrent(Vec<ConcOp>),
    VanishedWorkdir {
        background: bool,
    },
    BadTimeout(BadTimeout),
    Unknown(UnknownOp),
    Pause {
        ms: u16,
    },
    /// With every slot but one taken, a short task takes the last; the moment its completion is
    /// seen (its status in a read, or its task-done event / notice), another start must not be
    /// refused.
    StartAfterEnd {
        seen_by: SeenBy,
    },
}

/// How a client sees a task's completion.
#[derive(Clone, Copy, Debug)]
enum SeenBy {
    /// Its status in `read_output` / `bash_output`.
    Read,
    /// Its task-done event (executor) or completion notice (MCP).
    Event,
}

fn routes() -> impl Strategy<Value = Vec<Route>> {
    proptest::collection::vec(
        prop_oneof![
            Just(Route::Setsid),
            Just(Route::DoubleFork),
            Just(Route::Nohup)
        ],
        1..=3,
    )
}

fn short_timeout() -> impl Strategy<Value = u16> {
    200u16..=600
}

fn bg_strategy() -> impl Strategy<Value = Bg> {
    prop_oneof![
        4 => (3u8..=30, 10u8..=60).prop_map(|(n, pause_ms)| Bg::Seq { n, pause_ms }),
        3 => any::<bool>().prop_map(|trap| Bg::Long { trap }),
        1 => (0u8..=3).prop_map(|code| Bg::Exit { code }),
        1 => Just(Bg::KillSelf9),
        1 => Just(Bg::KillParent9),
        1 => Just(Bg::TermParent),
        1 => Just(Bg::StopParentThenExit),
        1 => Just(Bg::KillGroup),
        1 => Just(Bg::KillParentGroup9),
        2 => (routes(), any::<bool>()).prop_map(|(routes, linger)| Bg::Escapees { routes, linger }),
        1 => prop_oneof![Just(3000u32), Just(8000u32)].prop_map(|lines| Bg::BigSeq { lines }),
    ]
}

fn self_signal() -> impl Strategy<Value = SelfSignal> {
    prop_oneof![
        Just(SelfSignal::KillSelf9),
        short_timeout().prop_map(|ms| SelfSignal::StopSelf { ms }),
        Just(SelfSignal::TermParent),
        Just(SelfSignal::KillParent9),
        Just(SelfSignal::StopParentThenExit),
        Just(SelfSignal::KillGroup),
        Just(SelfSignal::KillGroup9),
        Just(SelfSignal::StopParentThenEcho),
        Just(SelfSignal::TermParentGroup),
        Just(SelfSignal::KillParentGroup9),
        Just(SelfSignal::KillFactoryGroup9),
    ]
}

fn conc_op() -> impl Strategy<Value = ConcOp> {
    prop_oneof![
        3 => (0u16..=300).prop_map(|sleep_ms| ConcOp::Echo { sleep_ms }),
        2 => bg_strategy().prop_map(ConcOp::Start),
        2 => any::<u8>().prop_map(|pick| ConcOp::Kill { pick }),
        1 => any::<u8>().prop_map(|pick| ConcOp::Read { pick }),
    ]
}

/// Steps, simplest first (proptest shrinks a choice towards the first arm).
fn step_strategy(tasks_started: bool) -> BoxedStrategy<Step> {
    // Kills and reads are likelier once there is something to kill or read.
    let (kill, read) = if tasks_started { (6, 4) } else { (1, 1) };
    prop_oneof![
        5 => Just(Step::Echo),
        3 => (0u8..=3).prop_map(|code| Step::Exit { code }),
        3 => (short_timeout(), any::<bool>()).prop_map(|(ms, trap)| Step::Timeout { ms, trap }),
        6 => self_signal().prop_map(Step::SelfSignal),
        3 => (routes(), proptest::option::of(600u16..=1000))
            .prop_map(|(routes, timeout_ms)| Step::Escapees { routes, timeout_ms }),
        2 => (
            prop_oneof![Just(500u32), Just(2000u32), Just(3000u32), Just(8000u32)],
            prop_oneof![Just(Streams::Stdout), Just(Streams::Stderr), Just(Streams::Both)],
        )
            .prop_map(|(lines, streams)| Step::BigOutput { lines, streams }),
        9 => bg_strategy().prop_map(Step::Start),
        1 => Just(Step::FillTasks),
        kill => any::<u8>().prop_map(|pick| Step::Kill { pick }),
        read => any::<u8>().prop_map(|pick| Step::Read { pick }),
        3 => proptest::collection::vec(conc_op(), 2..=3).prop_map(Step::Concurrent),
        2 => any::<bool>().prop_map(|background| Step::VanishedWorkdir { background }),
        1 => prop_oneof![
            Just(BadTimeout::Zero),
            Just(BadTimeout::Negative),
            Just(BadTimeout::NotANumber),
            Just(BadTimeout::Infinite),
        ]
        .prop_map(Step::BadTimeout),
        1 => prop_oneof![
            Just(UnknownOp::ReadNumber),
            Just(UnknownOp::KillNumber),
            Just(UnknownOp::ReadName),
            Just(UnknownOp::Blank),
        ]
        .prop_map(Step::Unknown),
        2 => (50u16..=400).prop_map(|ms| Step::Pause { ms }),
        2 => prop_oneof![Just(SeenBy::Read), Just(SeenBy::Event)]
            .prop_map(|seen_by| Step::StartAfterEnd { seen_by }),
    ]
    .boxed()
}

/// The reference model: what generation needs to know. The detailed model (expected texts,
/// statuses, log lines, pids) lives in [`Sut`], next to the results it predicts, because what a
/// step finds (a task that has finished meanwhile, a full task table) depends on timing.
struct Model;

#[derive(Clone, Debug, Default)]
struct ModelState {
    starts: u32,
}

impl ReferenceStateMachine for Model {
    type State = ModelState;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<ModelState> {
        Just(ModelState::default()).boxed()
    }

    fn transitions(state: &ModelState) -> BoxedStrategy<Step> {
        let mut exclude = excluded();
        if COMBO.with(Cell::get).is_some_and(|c| c.sandbox.is_some()) {
            // A sandbox scopes signals to the command's own processes: these are refused
            // (`Operation not permitted`), which tests/sandbox.rs checks; the steps' expectations
            // are those of an unsandboxed command.
            exclude.extend(
                [
                    "TermParent",
                    "KillParent9",
                    "StopParent",
                    "ParentGroup",
                    "FactoryGroup",
                ]
                .map(String::from),
            );
        }
        if exclude.is_empty() {
            return step_strategy(state.starts > 0);
        }
        step_strategy(state.starts > 0)
            .prop_filter("excluded by DSH_SEQUENCE_EXCLUDE", move |step| {
                let text = format!("{step:?}");
                !exclude.iter().any(|name| text.contains(name.as_str()))
            })
            .boxed()
    }

    fn apply(mut state: ModelState, step: &Step) -> ModelState {
        let starts = match step {
            Step::Start(_) | Step::FillTasks | Step::StartAfterEnd { .. } => 1,
            Step::Concurrent(ops) => ops.iter().filter(|o| matches!(o, ConcOp::Start(_))).count(),
            _ => 0,
        };
        state.starts += u32::try_from(starts).unwrap_or(0);
        state
    }
}

/// Step kinds left out, e.g. `DSH_SEQUENCE_EXCLUDE=KillParent9,BigSeq` (names as the step list
/// prints them), to look past a known violation while triaging.
fn excluded() -> Vec<String> {
    std::env::var("DSH_SEQUENCE_EXCLUDE")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

struct SequenceTest;

impl StateMachineTest for SequenceTest {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(_: &ModelState) -> Sut {
        let combo = COMBO
            .with(Cell::get)
            .expect("the combination is set before running");
        Sut::new(combo)
    }

    fn apply(mut sut: Sut, _: &ModelState, step: Step) -> Sut {
        sut.step(step);
        sut
    }

    fn teardown(sut: Sut, _: ModelState) {
        sut.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// Running a combination: CI budget or soak, seeds, failure reports

struct Settings {
    seed: u64,
    seed_fixed: bool,
    soak: Option<Duration>,
    cases: u32,
    batch: u64,
    shrink_secs: u32,
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(v) => Some(v),
        Err(_) => panic!("{name}={value:?} is not a valid value"),
    }
}

impl Settings {
    fn from_env() -> Settings {
        let fixed: Option<u64> = env_parse("DSH_SEQUENCE_SEED");
        let seed = fixed.unwrap_or_else(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
        });
        let soak = env_parse::<u64>("DSH_SEQUENCE_SOAK").map(Duration::from_secs);
        Settings {
            seed,
            seed_fixed: fixed.is_some(),
            soak,
            cases: env_parse("DSH_SEQUENCE_CASES").unwrap_or(if soak.is_some() {
                1
            } else {
                CI_CASES
            }),
            batch: env_parse("DSH_SEQUENCE_BATCH").unwrap_or(0),
            shrink_secs: env_parse("DSH_SEQUENCE_SHRINK_SECS").unwrap_or(60),
        }
    }
}

/// splitmix64 over the base seed, the combination and the batch.
fn batch_seed(base: u64, combo: Combo, batch: u64) -> u64 {
    let mut z = base
        ^ combo.index().wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ batch.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn run_combo(combo: Combo) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    if !containment_available(combo) {
        return;
    }
    let settings = Settings::from_env();
    eprintln!(
        "sequence [{}]: seed {}{} ({})",
        combo.name(),
        settings.seed,
        if settings.seed_fixed { " (fixed)" } else { "" },
        match settings.soak {
            Some(d) => format!("soak for {}s", d.as_secs()),
            None => format!("{} cases", settings.cases),
        }
    );
    let started = Instant::now();
    let (cases0, steps0, shrink0) = (
        CASES_RUN.load(Ordering::SeqCst),
        STEPS_RUN.load(Ordering::SeqCst),
        SHRINK_STEPS.load(Ordering::SeqCst),
    );
    let mut violations = Vec::new();
    let mut batch = settings.batch;
    loop {
        let seed = batch_seed(settings.seed, combo, batch);
        if let Err(report) = run_batch(combo, &settings, seed, batch) {
            eprintln!("{report}");
            violations.push(report);
            if settings.soak.is_none() {
                break;
            }
        }
        batch += 1;
        match settings.soak {
            Some(soak) if started.elapsed() < soak => {}
            _ => break,
        }
    }
    let cases = CASES_RUN.load(Ordering::SeqCst) - cases0;
    let steps = STEPS_RUN.load(Ordering::SeqCst) - steps0;
    let shrink = SHRINK_STEPS.load(Ordering::SeqCst) - shrink0;
    eprintln!(
        "sequence [{}]: {cases} cases, {steps} steps (+{shrink} while shrinking), violations: {}, \
         {:.1}s",
        combo.name(),
        violations.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        violations.is_empty(),
        "{} violation(s) in {}:\n{}",
        violations.len(),
        combo.name(),
        violations.join("\n")
    );
}

fn run_batch(combo: Combo, settings: &Settings, seed: u64, batch: u64) -> Result<(), String> {
    COMBO.with(|c| c.set(Some(combo)));
    SHRINKING.with(|s| s.set(false));
    let config = RunnerConfig {
        cases: settings.cases,
        failure_persistence: None,
        max_shrink_time: settings.shrink_secs.saturating_mul(1000),
        rng_seed: RngSeed::Fixed(seed),
        ..RunnerConfig::default()
    };
    let mut runner = TestRunner::new(config.clone());
    let strategy = Model::sequential_strategy(STEPS_PER_CASE);
    let result = runner.run(&strategy, |(state, steps, seen)| {
        // Many violations are races: while shrinking, a shorter sequence counts as passing only
        // when it passes several times, or the shrinker would keep steps it does not need.
        let tries = if SHRINKING.with(Cell::get) {
            SHRINK_TRIES
        } else {
            1
        };
        for _ in 0..tries {
            SequenceTest::test_sequential(
                config.clone(),
                state.clone(),
                steps.clone(),
                seen.clone(),
            );
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, (_, steps, _))) => {
            // The violation names its step; later steps never ran.
            let failed_at = reason
                .to_string()
                .split_once(", step ")
                .and_then(|(_, rest)| rest.split(':').next()?.parse::<usize>().ok())
                .unwrap_or(steps.len())
                .min(steps.len());
            let exclude = std::env::var("DSH_SEQUENCE_EXCLUDE")
                .map(|e| format!("DSH_SEQUENCE_EXCLUDE={e} "))
                .unwrap_or_default();
            let mut report = format!(
                "SEQUENCE VIOLATION in {}: {reason}\n  reproduce: DSH_SEQUENCE_SEED={} \
                 DSH_SEQUENCE_BATCH={batch} DSH_SEQUENCE_CASES={} {exclude}cargo test -p dsh-host \
                 --test sequence {} -- --nocapture\n  (batch seed {seed}); minimal sequence, {} \
                 step(s) (then teardown: remaining tasks killed, reads, shutdown):",
                combo.name(),
                settings.seed,
                settings.cases,
                combo.name(),
                failed_at
            );
            for (i, step) in steps.iter().take(failed_at).enumerate() {
                report.push_str(&format!("\n    {:>2}. {step:?}", i + 1));
            }
            Err(report)
        }
        Err(TestError::Abort(reason)) => Err(format!("{}: aborted: {reason}", combo.name())),
    }
}

/// Whether this combination can run here: subreaper always; cgroup where the host may create
/// cgroups (else a NOTICE, or a failure under `DSH_REQUIRE_CGROUPS=1`).
fn containment_available(combo: Combo) -> bool {
    if combo.mode == Mode::Subreaper {
        return true;
    }
    let unavailable = match combo.via {
        Via::Executor => {
            let rt = runtime();
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let _enter = rt.enter();
            let exec = LocalExecutor::new(Config::default(), tx).expect("default config is valid");
            let containment = exec.containment();
            rt.block_on(exec.shutdown());
            match containment {
                Containment::Cgroup { .. } => None,
                Containment::Subreaper { reason } => Some(reason),
            }
        }
        Via::Mcp => {
            let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
                .arg("doctor")
                .env("DSH_CACHE_DIR", cache_dir())
                .output()
                .expect("dsh-host doctor runs");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.contains("containment: cgroup") {
                None
            } else {
                Some(text)
            }
        }
    };
    let Some(reason) = unavailable else {
        return true;
    };
    assert!(
        std::env::var("DSH_REQUIRE_CGROUPS").as_deref() != Ok("1"),
        "DSH_REQUIRE_CGROUPS=1 but no cgroup can be created here: {reason}"
    );
    eprintln!(
        "NOTICE: {}: cgroup containment unavailable ({}); only the subreaper combinations run",
        combo.name(),
        reason.trim()
    );
    false
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

// ---------------------------------------------------------------------------------------------
// Results, as both drivers report them

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ErrKind {
    InvalidRequest,
    WorkdirUnusable,
    SpawnFailed,
    UnknownTask,
    TaskLimit,
    Aborted,
    Internal,
    Refused,
    Other,
}

#[derive(Clone, Debug, PartialEq)]
struct Failure {
    kind: ErrKind,
    text: String,
}

impl From<ExecError> for Failure {
    fn from(e: ExecError) -> Failure {
        let kind = match &e {
            ExecError::InvalidRequest(_) => ErrKind::InvalidRequest,
            ExecError::WorkdirUnusable(_) => ErrKind::WorkdirUnusable,
            ExecError::SpawnFailed(_) => ErrKind::SpawnFailed,
            ExecError::UnknownTask(_) => ErrKind::UnknownTask,
            ExecError::TaskLimit(_) => ErrKind::TaskLimit,
            ExecError::Aborted => ErrKind::Aborted,
            ExecError::Internal(_) => ErrKind::Internal,
            // No policy is in front of the executor these sequences drive.
            ExecError::Refused(_) => ErrKind::Refused,
        };
        Failure {
            kind,
            text: e.to_string(),
        }
    }
}

/// An MCP error text (`Error: ...`), classified by what the component writes for each case.
fn classify(text: &str) -> Failure {
    let kind = if text.starts_with("Error: invalid ") {
        ErrKind::InvalidRequest
    } else if text.starts_with("Error: unknown bash task") {
        ErrKind::UnknownTask
    } else if text.starts_with("Error: workdir") {
        ErrKind::WorkdirUnusable
    } else if text.contains("too many background tasks") || text.contains("limit") {
        ErrKind::TaskLimit
    } else if text == "Error: command aborted" {
        ErrKind::Aborted
    } else if text.starts_with("Error: cannot start") {
        ErrKind::SpawnFailed
    } else {
        ErrKind::Other
    };
    Failure {
        kind,
        text: text.to_string(),
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct StreamOut {
    text: String,
    truncated: bool,
    spill: Option<String>,
}

/// A foreground result.
#[derive(Clone, Debug, Default, PartialEq)]
struct Fg {
    exit_code: Option<i32>,
    signal: Option<String>,
    timed_out: bool,
    aborted: bool,
    /// The effective timeout, where the driver reports it.
    timeout_ms: Option<f64>,
    stdout: StreamOut,
    stderr: StreamOut,
    leftover: u32,
    elapsed: Duration,
}

impl Fg {
    fn from_run(r: RunResult, elapsed: Duration) -> Fg {
        let stream = |s: dsh_executor::StreamOutput| StreamOut {
            text: s.text,
            truncated: s.truncated,
            spill: s.spill_path,
        };
        Fg {
            exit_code: r.exit_code,
            signal: r.signal,
            timed_out: r.timed_out,
            aborted: r.aborted,
            timeout_ms: Some(r.timeout_ms),
            stdout: stream(r.stdout),
            stderr: stream(r.stderr),
            leftover: r.leftover_processes,
            elapsed,
        }
    }
}

/// A task's status as the status line shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Running,
    Completed(i32),
    Killed(Option<String>),
    /// Its executor is gone (never so with the executors run here).
    Lost,
}

impl Status {
    fn terminal(&self) -> bool {
        *self != Status::Running
    }

    /// The same rule as the component's status line.
    fn of(task: &Task) -> Status {
        match (&task.signal, task.state, task.exit_code) {
            (_, TaskState::Lost, _) => Status::Lost,
            (Some(signal), _, _) => Status::Killed(Some(signal.clone())),
            (None, TaskState::Running, _) => Status::Running,
            (None, TaskState::Completed, Some(code)) => Status::Completed(code),
            (None, _, _) => Status::Killed(None),
        }
    }
}

/// A read of a task's output.
#[derive(Clone, Debug, PartialEq)]
struct ReadOut {
    stdout: String,
    stderr: String,
    lossy_out: bool,
    lossy_err: bool,
    spill_out: Option<String>,
    status: Status,
    /// The executor's task record (executor mode only).
    raw: Option<Task>,
}

#[derive(Clone, Debug)]
enum TimeoutArg {
    Default,
    Ms(u32),
    Bad(BadTimeout),
}

#[derive(Clone, Debug)]
enum Op {
    Fg {
        command: String,
        workdir: Option<String>,
        timeout: TimeoutArg,
    },
    Bg {
        command: String,
        workdir: Option<String>,
    },
    Kill(String),
    Read(String),
}

#[derive(Clone, Debug)]
enum Out {
    Fg(Result<Fg, Failure>),
    Bg(Result<String, Failure>),
    Kill(Result<bool, Failure>),
    Read(Result<ReadOut, Failure>),
    /// No answer in time, or an answer that is not one of the contract's shapes.
    Broken(String),
}

// ---------------------------------------------------------------------------------------------
// Parsing the MCP texts (tool-contract.md §2-§5)

const LEFTOVER_SUFFIX: &str =
    " leftover background process(es); use run_in_background for long-lived processes]";
const TRUNCATED_PREFIX: &str = "[output truncated; full output: ";
const DROPPED_PREFIX: &str = "[some output was dropped from memory; full output: ";

/// The last line of `text` if `parse` accepts it, and the text before its newline.
fn pop_line<T>(text: &str, parse: impl Fn(&str) -> Option<T>) -> Option<(&str, T)> {
    let (head, last) = text.rsplit_once('\n')?;
    parse(last).map(|v| (head, v))
}

fn spill_path(path: &str) -> Option<String> {
    (path != "(unavailable)").then(|| path.to_string())
}

/// A stream's text with its truncation marker, if any.
fn parse_stream(part: &str) -> StreamOut {
    match pop_line(part, |l| {
        l.strip_prefix(TRUNCATED_PREFIX)
            .and_then(|r| r.strip_suffix(']'))
            .map(str::to_string)
    }) {
        Some((text, path)) => StreamOut {
            text: text.to_string(),
            truncated: true,
            spill: spill_path(&path),
        },
        None => StreamOut {
            text: part.to_string(),
            ..StreamOut::default()
        },
    }
}

fn ends_with_truncation_marker(text: &str) -> bool {
    text.rsplit('\n')
        .next()
        .is_some_and(|l| l.starts_with(TRUNCATED_PREFIX) && l.ends_with(']'))
}

/// Splits `stdout [\n] [stderr]\n stderr`. The separator newline is added only when stdout does not
/// end in one; our commands print whole lines, so it is there only after a truncation marker.
fn split_streams(body: &str) -> (&str, Option<&str>) {
    let mut from = 0;
    while let Some(i) = body[from..].find("[stderr]\n") {
        let p = from + i;
        if p == 0 || body.as_bytes()[p - 1] == b'\n' {
            let mut stdout = &body[..p];
            if stdout.len() > 1 && ends_with_truncation_marker(&stdout[..stdout.len() - 1]) {
                stdout = &stdout[..stdout.len() - 1];
            }
            return (stdout, Some(&body[p + "[stderr]\n".len()..]));
        }
        from = p + 1;
    }
    (body, None)
}

/// A foreground result text back into facts (exit code 0 when no marker says otherwise).
fn parse_fg(text: &str) -> Result<Fg, String> {
    let mut fg = Fg::default();
    let mut rest = text;
    let mut markers = false;
    if let Some((head, n)) = pop_line(rest, |l| {
        l.strip_prefix("[stopped ")
            .and_then(|r| r.strip_suffix(LEFTOVER_SUFFIX))
            .and_then(|n| n.parse::<u32>().ok())
    }) {
        fg.leftover = n;
        rest = head;
        markers = true;
    }
    if let Some((head, signal)) = pop_line(rest, |l| {
        l.strip_prefix("[killed by signal: ")
            .and_then(|r| r.strip_suffix(']'))
            .map(str::to_string)
    }) {
        fg.signal = Some(signal);
        rest = head;
        markers = true;
    } else if let Some((head, code)) = pop_line(rest, |l| {
        l.strip_prefix("[exit code: ")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|c| c.parse::<i32>().ok())
    }) {
        fg.exit_code = Some(code);
        rest = head;
        markers = true;
    }
    if let Some((head, ms)) = pop_line(rest, |l| {
        l.strip_prefix("[timed out after ")
            .and_then(|r| r.strip_suffix("ms]"))
            .and_then(|ms| ms.parse::<f64>().ok())
    }) {
        fg.timed_out = true;
        fg.timeout_ms = Some(ms);
        rest = head;
        markers = true;
    }
    if fg.signal.is_none() && fg.exit_code.is_none() {
        fg.exit_code = Some(0);
    }
    if fg.exit_code == Some(0) && text.ends_with("[exit code: 0]") {
        return Err(format!("an `[exit code: 0]` marker: {text:?}"));
    }
    // The newline before the markers belongs to the body when the body ended in one (our
    // commands print whole lines); it was added when the body was `(no output)` or ended with a
    // truncation marker.
    let owned;
    let body = if !markers || rest == "(no output)" || ends_with_truncation_marker(rest) {
        rest
    } else {
        owned = format!("{rest}\n");
        owned.as_str()
    };
    if body.is_empty() {
        return Err(format!("an empty body instead of `(no output)`: {text:?}"));
    }
    if body != "(no output)" {
        let (stdout, stderr) = split_streams(body);
        fg.stdout = parse_stream(stdout);
        if let Some(stderr) = stderr {
            fg.stderr = parse_stream(stderr);
            if fg.stderr.text.is_empty() && !fg.stderr.truncated {
                return Err(format!("an empty `[stderr]` section: {text:?}"));
            }
        }
    }
    Ok(fg)
}

fn parse_status(line: &str) -> Option<Status> {
    if line == "[status: running]" {
        return Some(Status::Running);
    }
    if line == "[status: killed]" {
        return Some(Status::Killed(None));
    }
    if line == "[status: lost: the executor is gone; the command may or may not have finished]" {
        return Some(Status::Lost);
    }
    if let Some(sig) = line
        .strip_prefix("[status: killed by ")
        .and_then(|r| r.strip_suffix(']'))
    {
        return Some(Status::Killed(Some(sig.to_string())));
    }
    line.strip_prefix("[status: completed, exit code: ")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|c| c.parse().ok())
        .map(Status::Completed)
}

/// A `bash_output` text back into the delta and the status.
fn parse_read(text: &str) -> Result<ReadOut, String> {
    let (body, status_line) = text
        .rsplit_once('\n')
        .ok_or_else(|| format!("no status line: {text:?}"))?;
    let status = parse_status(status_line).ok_or_else(|| format!("bad status line: {text:?}"))?;
    let mut read = ReadOut {
        stdout: String::new(),
        stderr: String::new(),
        lossy_out: false,
        lossy_err: false,
        spill_out: None,
        status,
        raw: None,
    };
    let mut body = body;
    if let Some((head, paths)) = pop_line(body, |l| {
        l.strip_prefix(DROPPED_PREFIX)
            .and_then(|r| r.strip_suffix(']'))
            .map(str::to_string)
    }) {
        body = head;
        // One path per lossy stream, stdout first; our only lossy tasks write to stdout.
        for path in paths.split(", ") {
            if path.ends_with("-stderr.log") {
                read.lossy_err = true;
            } else {
                read.lossy_out = true;
                read.spill_out = spill_path(path);
            }
        }
    }
    if body != "(no new output)" {
        let (stdout, stderr) = split_streams(body);
        read.stdout = stdout.to_string();
        read.stderr = stderr.unwrap_or_default().to_string();
        if stdout.is_empty() && stderr.is_none_or(str::is_empty) {
            return Err(format!(
                "an empty delta instead of `(no new output)`: {text:?}"
            ));
        }
    }
    Ok(read)
}

/// `background bash task <id> finished <status line>. Read its output with bash_output.`
fn parse_notice(text: &str) -> Option<(String, Status)> {
    let rest = text.strip_prefix("background bash task ")?;
    let (id, rest) = rest.split_once(" finished ")?;
    let status = rest.strip_suffix(". Read its output with bash_output.")?;
    Some((id.to_string(), parse_status(status)?))
}

// ---------------------------------------------------------------------------------------------
// Checkers: pure functions from a result to a verdict, so that the self-check can feed them
// broken results.

/// What a foreground step must answer.
#[derive(Clone, Debug)]
enum FgExpect {
    Exact {
        stdout: String,
        stderr: String,
        code: i32,
    },
    TimedOut {
        ms: u32,
        signals: &'static [&'static str],
        min_elapsed: Duration,
        /// The stdout is a prefix of this (the timeout may fire early in the command).
        stdout_prefix_of: String,
    },
    Signal {
        signal: &'static str,
    },
    Escapees {
        count: u32,
        stdout: String,
    },
    Big {
        lines: u32,
        streams: Streams,
    },
    Error {
        kind: ErrKind,
        /// The error text must name this (a workdir path).
        names: Option<String>,
    },
}

fn seq_text(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// The shape every foreground result has, whatever the command.
fn check_fg_general(fg: &Fg, requested_ms: Option<u32>) -> Result<(), String> {
    if fg.exit_code.is_some() == fg.signal.is_some() {
        return Err(format!(
            "exactly one of exit code and signal must be set: {fg:?}"
        ));
    }
    if fg.aborted {
        return Err("aborted although nobody aborted it".into());
    }
    if fg.timed_out {
        if fg.exit_code.is_some() {
            return Err(format!("timed out but has an exit code: {fg:?}"));
        }
        if !matches!(fg.signal.as_deref(), Some("SIGTERM" | "SIGKILL")) {
            return Err(format!("timed out but the signal is {:?}", fg.signal));
        }
    }
    if let (Some(ms), Some(effective)) = (requested_ms, fg.timeout_ms)
        && (effective - f64::from(ms)).abs() > 1e-9
    {
        return Err(format!(
            "effective timeout {effective} for a request of {ms}"
        ));
    }
    for (name, s) in [("stdout", &fg.stdout), ("stderr", &fg.stderr)] {
        if s.text.len() > MAX_OUTPUT {
            return Err(format!(
                "{name} keeps {} bytes > the cap {MAX_OUTPUT}",
                s.text.len()
            ));
        }
        if s.spill.is_some() && !s.truncated {
            return Err(format!("{name} names a spill file but is not truncated"));
        }
    }
    Ok(())
}

fn check_fg_inner(
    expect: &FgExpect,
    result: &Result<Fg, Failure>,
    requested_ms: Option<u32>,
) -> Result<(), String> {
    if let FgExpect::Error { kind, names } = expect {
        return match result {
            Err(f) if f.kind == *kind => match names {
                Some(name) if !f.text.contains(name.as_str()) => {
                    Err(format!("the error does not name {name:?}: {:?}", f.text))
                }
                _ => Ok(()),
            },
            other => Err(format!("expected a {kind:?} error, got {other:?}")),
        };
    }
    let fg = match result {
        Ok(fg) => fg,
        Err(f) => return Err(format!("expected a result, got the error {f:?}")),
    };
    check_fg_general(fg, requested_ms)?;
    let not_escapees = !matches!(expect, FgExpect::Escapees { .. });
    if not_escapees && fg.leftover != 0 && !matches!(expect, FgExpect::TimedOut { .. }) {
        return Err(format!(
            "{} leftover process(es) reported for a command that started none",
            fg.leftover
        ));
    }
    let plain = |s: &StreamOut, want: &str, name: &str| -> Result<(), String> {
        if s.text != want || s.truncated {
            Err(format!("{name}: expected {want:?} (whole), got {s:?}"))
        } else {
            Ok(())
        }
    };
    match expect {
        FgExpect::Exact {
            stdout,
            stderr,
            code,
        } => {
            plain(&fg.stdout, stdout, "stdout")?;
            plain(&fg.stderr, stderr, "stderr")?;
            if fg.exit_code != Some(*code) || fg.timed_out {
                return Err(format!("expected exit code {code}, got {fg:?}"));
            }
        }
        FgExpect::TimedOut {
            ms,
            signals,
            min_elapsed,
            stdout_prefix_of,
        } => {
            if !fg.timed_out {
                return Err(format!("expected a timeout after {ms}ms, got {fg:?}"));
            }
            if !signals.contains(&fg.signal.as_deref().unwrap_or("")) {
                return Err(format!(
                    "expected death by {signals:?}, got {:?}",
                    fg.signal
                ));
            }
            if fg.elapsed < *min_elapsed {
                return Err(format!(
                    "answered after {:?}, before the timeout (and grace) of {min_elapsed:?}",
                    fg.elapsed
                ));
            }
            let bound = *min_elapsed + Duration::from_millis(4 * GRACE_MS) + Duration::from_secs(8);
            if fg.elapsed > bound {
                return Err(format!(
                    "a timeout of {ms}ms answered only after {:?}",
                    fg.elapsed
                ));
            }
            if !stdout_prefix_of.starts_with(&fg.stdout.text) || fg.stdout.truncated {
                return Err(format!(
                    "stdout {:?} is not a prefix of {stdout_prefix_of:?}",
                    fg.stdout
                ));
            }
        }
        FgExpect::Signal { signal } => {
            if fg.signal.as_deref() != Some(*signal) || fg.timed_out {
                return Err(format!("expected death by {signal}, got {fg:?}"));
            }
            plain(&fg.stdout, "", "stdout")?;
            plain(&fg.stderr, "", "stderr")?;
        }
        FgExpect::Escapees { count, stdout } => {
            plain(&fg.stdout, stdout, "stdout")?;
            if fg.exit_code != Some(0) || fg.timed_out {
                return Err(format!("expected exit code 0, got {fg:?}"));
            }
            if fg.leftover != *count {
                return Err(format!(
                    "expected exactly {count} leftover process(es), got {}",
                    fg.leftover
                ));
            }
        }
        FgExpect::Big { lines, streams } => {
            if fg.exit_code != Some(0) {
                return Err(format!("expected exit code 0, got {fg:?}"));
            }
            let full = seq_text(*lines);
            let (out, err) = match streams {
                Streams::Stdout => (true, false),
                Streams::Stderr => (false, true),
                Streams::Both => (true, true),
            };
            for (name, s, has) in [("stdout", &fg.stdout, out), ("stderr", &fg.stderr, err)] {
                if has {
                    check_big_stream(name, s, &full)?;
                } else {
                    plain(s, "", name)?;
                }
            }
        }
        FgExpect::Error { .. } => unreachable!(),
    }
    Ok(())
}

/// Checks a foreground result; a failure message ends with a summary of the whole result.
fn check_fg(
    expect: &FgExpect,
    result: &Result<Fg, Failure>,
    requested_ms: Option<u32>,
) -> Result<(), String> {
    check_fg_inner(expect, result, requested_ms).map_err(|e| match result {
        Ok(fg) => format!("{e}\n    the result: {}", brief(fg)),
        Err(_) => e,
    })
}

fn brief(fg: &Fg) -> String {
    let cut = |s: &str| {
        if s.len() > 80 {
            format!("{:?}...", s.chars().take(80).collect::<String>())
        } else {
            format!("{s:?}")
        }
    };
    format!(
        "exit {:?}, signal {:?}, timed out {}, leftover {}, after {:?}, stdout {}{}, stderr {}{}",
        fg.exit_code,
        fg.signal,
        fg.timed_out,
        fg.leftover,
        fg.elapsed,
        cut(&fg.stdout.text),
        if fg.stdout.truncated {
            " (truncated)"
        } else {
            ""
        },
        cut(&fg.stderr.text),
        if fg.stderr.truncated {
            " (truncated)"
        } else {
            ""
        },
    )
}

/// A stream of `full` bytes against the memory cap (tail, byte-exact) and the spill cap (a
/// complete file, or none).
fn check_big_stream(name: &str, s: &StreamOut, full: &str) -> Result<(), String> {
    if full.len() <= MAX_OUTPUT {
        if s.text != full || s.truncated {
            return Err(format!(
                "{name}: expected all {} bytes, got {s:?}",
                full.len()
            ));
        }
        return Ok(());
    }
    let tail = &full[full.len() - MAX_OUTPUT..];
    if !s.truncated || s.text != tail {
        return Err(format!(
            "{name}: expected the last {MAX_OUTPUT} bytes of {} and the truncated flag; got {} bytes \
             (truncated: {}), starting {:?}",
            full.len(),
            s.text.len(),
            s.truncated,
            s.text.chars().take(40).collect::<String>()
        ));
    }
    match (&s.spill, full.len() <= MAX_SPILL) {
        (Some(path), true) => {
            let content = std::fs::read(path)
                .map_err(|e| format!("{name}: spill file {path} unreadable: {e}"))?;
            if content != full.as_bytes() {
                return Err(format!(
                    "{name}: spill file {path} holds {} bytes, not the full {}",
                    content.len(),
                    full.len()
                ));
            }
        }
        (None, true) => {
            return Err(format!(
                "{name}: {} bytes fit the spill cap, but no spill file is named",
                full.len()
            ));
        }
        (Some(path), false) => {
            return Err(format!(
                "{name}: {} bytes exceed the spill cap {MAX_SPILL}, but {path} is presented as the \
                 full output",
                full.len()
            ));
        }
        (None, false) => {}
    }
    Ok(())
}

/// Task statuses only move forward.
fn check_forward(old: &Status, new: &Status) -> Result<(), String> {
    let ok = match (old, new) {
        (Status::Running, _) => true,
        (Status::Completed(a), Status::Completed(b)) => a == b,
        (Status::Killed(None), Status::Killed(_)) => true,
        (Status::Killed(Some(a)), Status::Killed(Some(b))) => a == b,
        (Status::Lost, Status::Lost) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("status went from {old:?} to {new:?}"))
    }
}

/// The executor's raw task record: consistent, and only moving forward.
fn check_raw(old: Option<&Task>, new: &Task) -> Result<(), String> {
    let consistent = match new.state {
        TaskState::Running => new.exit_code.is_none() && new.signal.is_none(),
        TaskState::Completed => new.exit_code.is_some() && new.signal.is_none(),
        TaskState::Killed => !(new.exit_code.is_some() && new.signal.is_some()),
        TaskState::Lost => new.exit_code.is_none() && new.signal.is_none(),
    };
    if !consistent {
        return Err(format!("inconsistent task record {new:?}"));
    }
    let Some(old) = old else { return Ok(()) };
    if old.id != new.id || old.command != new.command {
        return Err(format!("task record changed identity: {old:?} -> {new:?}"));
    }
    if old.state != TaskState::Running && new.state != old.state {
        return Err(format!(
            "state went from {:?} to {:?}",
            old.state, new.state
        ));
    }
    if old.exit_code.is_some() && new.exit_code != old.exit_code {
        return Err(format!(
            "exit code changed: {:?} -> {:?}",
            old.exit_code, new.exit_code
        ));
    }
    if old.signal.is_some() && new.signal != old.signal {
        return Err(format!(
            "signal changed: {:?} -> {:?}",
            old.signal, new.signal
        ));
    }
    Ok(())
}

/// How far a task's stream has been read, in bytes of the expected stream.
#[derive(Clone, Debug, Default)]
struct Track {
    consumed: usize,
    lossy: bool,
    /// Everything read, for messages.
    seen: usize,
}

/// One read's delta of a stream whose full content is `expected`: it must continue exactly where
/// the previous read ended, or, when lossy, be a later window of at most the memory cap.
fn advance(expected: &str, track: &mut Track, delta: &str, lossy: bool) -> Result<(), String> {
    track.seen += delta.len();
    let rest = expected.get(track.consumed..).unwrap_or("");
    if lossy {
        if delta.len() > MAX_OUTPUT {
            return Err(format!("a lossy window of {} bytes > the cap", delta.len()));
        }
        let Some(at) = rest.find(delta) else {
            return Err(format!(
                "a lossy window is not a later part of the stream (read up to byte {}): {:?}",
                track.consumed,
                delta.chars().take(60).collect::<String>()
            ));
        };
        track.consumed += at + delta.len();
        track.lossy = true;
    } else {
        if rest.is_empty() && !delta.is_empty() {
            return Err(format!(
                "output beyond the expected end ({} bytes): {:?}",
                expected.len(),
                delta.chars().take(60).collect::<String>()
            ));
        }
        if !rest.starts_with(delta) {
            return Err(format!(
                "a read repeated or lost bytes: after byte {} expected {:?}, got {:?}",
                track.consumed,
                rest.chars().take(60).collect::<String>(),
                delta.chars().take(60).collect::<String>()
            ));
        }
        track.consumed += delta.len();
    }
    Ok(())
}

/// At the end of a task that completed on its own, the reads have covered the whole stream.
fn check_complete(expected: &str, track: &Track) -> Result<(), String> {
    if track.consumed == expected.len() {
        Ok(())
    } else {
        Err(format!(
            "the reads ended at byte {} of {} (lossy: {}): bytes were lost",
            track.consumed,
            expected.len(),
            track.lossy
        ))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogExpect {
    Once,
    /// A command killed by its timeout before its first line ran (a loaded machine).
    AtMostOnce,
    Never,
}

/// `<cmd-id> <pid>` lines of the log by command id.
fn parse_log(text: &str) -> Result<BTreeMap<String, Vec<i32>>, String> {
    let mut lines: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for line in text.lines() {
        let (id, pid) = line
            .split_once(' ')
            .and_then(|(id, pid)| Some((id, pid.parse::<i32>().ok()?)))
            .ok_or_else(|| format!("malformed log line {line:?}"))?;
        lines.entry(id.to_string()).or_default().push(pid);
    }
    Ok(lines)
}

/// Every command answered with a result (or started) ran exactly once; every one answered with an
/// error never ran; nothing else ran.
fn check_log(
    lines: &BTreeMap<String, Vec<i32>>,
    expect: &BTreeMap<String, LogExpect>,
) -> Result<(), String> {
    for (id, pids) in lines {
        match expect.get(id) {
            None => return Err(format!("{id} ran (pids {pids:?}) but was never answered")),
            Some(LogExpect::Never) => {
                return Err(format!(
                    "{id} was answered with an error but ran {} time(s) (pids {pids:?})",
                    pids.len()
                ));
            }
            Some(LogExpect::Once | LogExpect::AtMostOnce) if pids.len() > 1 => {
                return Err(format!("{id} ran {} times (pids {pids:?})", pids.len()));
            }
            Some(LogExpect::Once | LogExpect::AtMostOnce) => {}
        }
    }
    if let Some((id, _)) = expect
        .iter()
        .find(|(id, e)| **e == LogExpect::Once && !lines.contains_key(*id))
    {
        return Err(format!(
            "{id} was answered with a result (or started) but never ran"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// /proc

/// State, parent pid and start time of `pid`.
fn proc_stat(pid: i32) -> Option<(char, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(1)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// A process seen alive once, identified by pid and start time (so that pid reuse is no
/// survivor).
#[derive(Clone, Debug)]
struct Tracked {
    pid: i32,
    start: u64,
    what: String,
}

impl Tracked {
    /// `pid`, if it runs now.
    fn snapshot(pid: i32, what: String) -> Option<Tracked> {
        match proc_stat(pid) {
            Some((state, _, start)) if !matches!(state, 'Z' | 'X') => {
                Some(Tracked { pid, start, what })
            }
            _ => None,
        }
    }

    fn alive(&self) -> bool {
        matches!(proc_stat(self.pid), Some((state, _, start)) if start == self.start && !matches!(state, 'Z' | 'X'))
    }
}

fn zombie_children(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| matches!(proc_stat(pid), Some(('Z', ppid, _)) if ppid == parent))
        .collect()
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// fd number -> what it refers to.
fn fd_targets(pid: i32) -> BTreeMap<String, String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeMap::new();
    };
    dir.flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            (e.file_name().to_string_lossy().to_string(), target)
        })
        .collect()
}

/// The fds of `now` that were not open (to the same thing) in `base`, by kind.
fn fd_diff(base: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> String {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for (fd, target) in now {
        if base.get(fd) != Some(target) {
            let kind = target.split(":[").next().unwrap_or_default().to_string();
            *kinds.entry(kind).or_default() += 1;
        }
    }
    format!("{kinds:?}")
}

fn thread_count(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn cgroup_v2_path(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("")
        .to_string()
}

/// Pids a command wrote to `file`, one a line.
fn read_pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Drivers

enum Driver {
    Exec(ExecDriver),
    Mcp(McpDriver),
}

/// Fields drop in order: the executor before the runtime it runs on.
struct ExecDriver {
    exec: Arc<LocalExecutor>,
    events: UnboundedReceiver<Task>,
    down: bool,
    rt: tokio::runtime::Runtime,
}

impl ExecDriver {
    fn new(config: Config) -> ExecDriver {
        let rt = runtime();
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let exec = {
            let _enter = rt.enter();
            LocalExecutor::new(config, tx).expect("valid config")
        };
        ExecDriver {
            rt,
            exec,
            events,
            down: false,
        }
    }

    fn ops(&mut self, ops: Vec<Op>) -> Vec<Out> {
        let exec = self.exec.clone();
        self.rt.block_on(async move {
            let handles: Vec<_> = ops
                .into_iter()
                .map(|op| tokio::spawn(exec_op(exec.clone(), op)))
                .collect();
            let mut outs = Vec::new();
            for handle in handles {
                outs.push(
                    handle
                        .await
                        .unwrap_or_else(|e| Out::Broken(format!("the operation panicked: {e}"))),
                );
            }
            outs
        })
    }

    fn shutdown(&mut self) -> Result<(), String> {
        if std::mem::replace(&mut self.down, true) {
            return Ok(());
        }
        let exec = self.exec.clone();
        self.rt
            .block_on(async move { tokio::time::timeout(OP_BOUND, exec.shutdown()).await })
            .map_err(|_| format!("shutdown did not return within {OP_BOUND:?}"))
    }
}

async fn exec_op(exec: Arc<LocalExecutor>, op: Op) -> Out {
    let started = Instant::now();
    let resolve = |command: String, workdir: Option<String>, timeout: &TimeoutArg| {
        exec.resolve(Request {
            command,
            workdir,
            timeout_ms: match timeout {
                TimeoutArg::Default => None,
                TimeoutArg::Ms(ms) => Some(f64::from(*ms)),
                TimeoutArg::Bad(BadTimeout::Zero) => Some(0.0),
                TimeoutArg::Bad(BadTimeout::Negative) => Some(-250.0),
                TimeoutArg::Bad(BadTimeout::NotANumber) => Some(f64::NAN),
                TimeoutArg::Bad(BadTimeout::Infinite) => Some(f64::INFINITY),
            },
            owner: None,
        })
    };
    match op {
        Op::Fg {
            command,
            workdir,
            timeout,
        } => {
            let spec = match resolve(command, workdir, &timeout) {
                Ok(spec) => spec,
                Err(e) => return Out::Fg(Err(e.into())),
            };
            match tokio::time::timeout(OP_BOUND, exec.run(spec, CancellationToken::new())).await {
                Err(_) => Out::Broken(format!("run did not return within {OP_BOUND:?}")),
                Ok(Ok(r)) => Out::Fg(Ok(Fg::from_run(r, started.elapsed()))),
                Ok(Err(e)) => Out::Fg(Err(e.into())),
            }
        }
        Op::Bg { command, workdir } => {
            let spec = match resolve(command.clone(), workdir, &TimeoutArg::Default) {
                Ok(spec) => spec,
                Err(e) => return Out::Bg(Err(e.into())),
            };
            match tokio::time::timeout(OP_BOUND, exec.start(spec)).await {
                Err(_) => Out::Broken(format!("start did not return within {OP_BOUND:?}")),
                Ok(Ok(task)) if task.command != command || task.state != TaskState::Running => {
                    // A task may end before we look, but `start` reports it as started.
                    Out::Broken(format!("start returned {task:?}"))
                }
                Ok(Ok(task)) => Out::Bg(Ok(task.id)),
                Ok(Err(e)) => Out::Bg(Err(e.into())),
            }
        }
        Op::Kill(id) => Out::Kill(exec.kill(&id).map_err(Failure::from)),
        Op::Read(id) => Out::Read(
            exec.read_output(&id)
                .map(|r| ReadOut {
                    stdout: r.stdout.text,
                    stderr: r.stderr.text,
                    lossy_out: r.stdout.lossy,
                    lossy_err: r.stderr.lossy,
                    spill_out: r.stdout.spill_path,
                    status: Status::of(&r.task),
                    raw: Some(r.task),
                })
                .map_err(Failure::from),
        ),
    }
}

struct McpDriver {
    client: mcp_child::McpChild,
    /// Completion notices appended to results as extra text blocks.
    blocks: Vec<(String, Status)>,
    down: bool,
}

impl McpDriver {
    fn new(args: &[String]) -> Result<McpDriver, String> {
        let mut client = mcp_child::spawn(args, &cache_dir());
        let id = client.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "dsh-sequence", "version": "0" },
            }),
        )?;
        let response = client.response(id, STARTUP_BOUND)?;
        if response.get("result").is_none() {
            return Err(format!("initialize failed: {response}"));
        }
        client.notify("notifications/initialized", json!({}))?;
        Ok(McpDriver {
            client,
            blocks: Vec::new(),
            down: false,
        })
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.client.child.id()).expect("pid fits")
    }

    /// Notifications received so far, taken out of the stash.
    fn notifications(&mut self) -> Result<Vec<Value>, String> {
        self.client.stash_arrived()?;
        let (notes, rest): (Vec<Value>, Vec<Value>) = self
            .client
            .stash
            .drain(..)
            .partition(|m| m.get("method").is_some() && m.get("id").is_none());
        self.client.stash = rest.into();
        Ok(notes)
    }

    fn ops(&mut self, ops: Vec<Op>) -> Vec<Out> {
        let description = "Run a sequence test step";
        let mut sent = Vec::new();
        for op in &ops {
            let (name, args) = match op {
                Op::Fg {
                    command,
                    workdir,
                    timeout,
                } => {
                    let mut args = json!({ "command": command, "description": description });
                    match timeout {
                        TimeoutArg::Default => {}
                        TimeoutArg::Ms(ms) => args["timeoutMs"] = json!(ms),
                        TimeoutArg::Bad(BadTimeout::Zero) => args["timeoutMs"] = json!(0),
                        TimeoutArg::Bad(BadTimeout::Negative) => args["timeoutMs"] = json!(-250),
                        // JSON has neither NaN nor infinity: a string and a null instead.
                        TimeoutArg::Bad(BadTimeout::NotANumber) => args["timeoutMs"] = json!("NaN"),
                        TimeoutArg::Bad(BadTimeout::Infinite) => args["timeoutMs"] = Value::Null,
                    }
                    if let Some(dir) = workdir {
                        args["workdir"] = json!(dir);
                    }
                    ("bash", args)
                }
                Op::Bg { command, workdir } => {
                    let mut args = json!({
                        "command": command, "description": description, "run_in_background": true,
                    });
                    if let Some(dir) = workdir {
                        args["workdir"] = json!(dir);
                    }
                    ("bash", args)
                }
                Op::Kill(id) => ("bash_kill", json!({ "task_id": id })),
                Op::Read(id) => ("bash_output", json!({ "task_id": id })),
            };
            let id = self
                .client
                .request("tools/call", json!({ "name": name, "arguments": args }));
            sent.push((id, Instant::now()));
        }
        ops.iter()
            .zip(sent)
            .map(|(op, (id, started))| {
                let response = match id.and_then(|id| self.client.response(id, OP_BOUND)) {
                    Ok(response) => response,
                    Err(e) => return Out::Broken(e),
                };
                self.out(op, &response, started.elapsed())
                    .unwrap_or_else(Out::Broken)
            })
            .collect()
    }

    fn out(&mut self, op: &Op, response: &Value, elapsed: Duration) -> Result<Out, String> {
        let result = response
            .get("result")
            .ok_or_else(|| format!("a JSON-RPC error: {response}"))?;
        let blocks = result["content"]
            .as_array()
            .ok_or_else(|| format!("no content: {result}"))?;
        let mut texts = Vec::new();
        for block in blocks {
            match (block["type"].as_str(), block["text"].as_str()) {
                (Some("text"), Some(text)) => texts.push(text),
                _ => return Err(format!("not a text block: {block}")),
            }
        }
        let (&text, notices) = texts
            .split_first()
            .ok_or_else(|| format!("an empty result: {result}"))?;
        for notice in notices {
            self.blocks.push(
                parse_notice(notice)
                    .ok_or_else(|| format!("an extra block that is not a notice: {notice:?}"))?,
            );
        }
        let is_error = result["isError"]
            .as_bool()
            .ok_or_else(|| format!("no isError: {result}"))?;
        if is_error != text.starts_with("Error: ") {
            return Err(format!("isError {is_error} for the text {text:?}"));
        }
        let failure = || classify(text);
        Ok(match op {
            Op::Fg { .. } if is_error => Out::Fg(Err(failure())),
            Op::Fg { .. } => {
                let mut fg = parse_fg(text)?;
                fg.elapsed = elapsed;
                Out::Fg(Ok(fg))
            }
            Op::Bg { .. } if is_error => Out::Bg(Err(failure())),
            Op::Bg { .. } => Out::Bg(Ok(text
                .strip_prefix("started background task ")
                .filter(|id| id.starts_with("bash-"))
                .ok_or_else(|| format!("not a start: {text:?}"))?
                .to_string())),
            Op::Kill(_) if is_error => Out::Kill(Err(failure())),
            Op::Kill(id) => {
                if text == format!("killed background task {id}") {
                    Out::Kill(Ok(true))
                } else if text == format!("task {id} had already finished") {
                    Out::Kill(Ok(false))
                } else {
                    return Err(format!("not a kill answer: {text:?}"));
                }
            }
            Op::Read(_) if is_error => Out::Read(Err(failure())),
            Op::Read(_) => Out::Read(Ok(parse_read(text)?)),
        })
    }

    fn ping(&mut self) -> Result<(), String> {
        let id = self.client.request("ping", json!({}))?;
        let response = self.client.response(id, HEALTH_BOUND)?;
        if response.get("result") == Some(&json!({})) {
            Ok(())
        } else {
            Err(format!("ping answered {response}"))
        }
    }

    /// Close stdin: the server kills its tasks, waits for them and exits 0.
    fn shutdown(&mut self) -> Result<(), String> {
        if std::mem::replace(&mut self.down, true) {
            return Ok(());
        }
        drop(self.client.stdin.take());
        let deadline = Instant::now() + OP_BOUND;
        loop {
            match self.client.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!(
                        "dsh-host exited with {status} at the end of its input; stderr:\n{}",
                        self.client.stderr()
                    ));
                }
                Ok(None) if Instant::now() > deadline => {
                    return Err(format!(
                        "dsh-host still runs {OP_BOUND:?} after its input ended"
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("wait for dsh-host: {e}")),
            }
        }
    }
}

impl Driver {
    fn ops(&mut self, ops: Vec<Op>) -> Vec<Out> {
        match self {
            Driver::Exec(d) => d.ops(ops),
            Driver::Mcp(d) => d.ops(ops),
        }
    }

    fn op(&mut self, op: Op) -> Out {
        self.ops(vec![op]).pop().expect("one result per operation")
    }

    fn host_pid(&self) -> i32 {
        match self {
            Driver::Exec(_) => i32::try_from(std::process::id()).expect("pid fits"),
            Driver::Mcp(d) => d.pid(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The system under test and its model

/// A background task as the model knows it.
struct TaskModel {
    id: String,
    cmd_id: String,
    bg: Option<Bg>,
    pid_file: Option<PathBuf>,
    /// The full streams it writes when it runs to its end; `None` when not predictable.
    expected_out: Option<String>,
    expected_err: Option<String>,
    out: Track,
    err: Track,
    status: Status,
    raw: Option<Task>,
    /// The status (and record) of the task-done event / completion notice.
    final_status: Option<Status>,
    final_raw: Option<Task>,
    events: u32,
    blocks: u32,
    killed_by_us: bool,
    /// A kill of it is in flight in the current step.
    kill_pending: bool,
    /// A read was made after the task-done event: the output is complete.
    done_reading: bool,
    pids: Vec<Tracked>,
    started: Instant,
}

impl TaskModel {
    /// How the task ends when nobody kills it; `None` when it runs until killed.
    fn natural_end(&self) -> Option<Status> {
        match self.bg.as_ref()? {
            Bg::Seq { .. } | Bg::BigSeq { .. } | Bg::TermParent => Some(Status::Completed(0)),
            Bg::Long { .. } | Bg::Escapees { linger: true, .. } => None,
            Bg::Exit { code } => Some(Status::Completed(i32::from(*code))),
            Bg::KillSelf9 | Bg::KillParent9 | Bg::KillParentGroup9 => {
                Some(Status::Killed(Some("SIGKILL".into())))
            }
            Bg::StopParentThenExit => Some(Status::Completed(3)),
            Bg::KillGroup => Some(Status::Killed(Some("SIGTERM".into()))),
            Bg::Escapees { linger: false, .. } => Some(Status::Completed(0)),
        }
    }

    fn runs_until_killed(&self) -> bool {
        matches!(
            self.bg,
            Some(Bg::Long { .. } | Bg::Escapees { linger: true, .. })
        )
    }
}

/// What an operation of a step was for, to settle its result.
enum Pending {
    Fg {
        cmd_id: String,
        expect: FgExpect,
        requested_ms: Option<u32>,
        pid_file: Option<PathBuf>,
    },
    Start {
        cmd_id: String,
        bg: Option<Bg>,
        pid_file: Option<PathBuf>,
        workdir_gone: Option<String>,
    },
    Kill(Option<usize>),
    Read(Option<usize>),
    Unknown(ErrKind),
}

struct Sut {
    combo: Combo,
    driver: Driver,
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
    next_cmd: u32,
    next_health: u32,
    log_expect: BTreeMap<String, LogExpect>,
    tasks: Vec<TaskModel>,
    last_task_no: u64,
    /// Processes that must be gone by the deadline.
    deadlines: Vec<(Instant, Tracked)>,
    /// Every process ever seen, for the check after shutdown.
    all_pids: Vec<Tracked>,
    zombies_seen: HashMap<i32, Instant>,
    /// Tasks running (as last seen) when the current operations were issued.
    running_before: usize,
    base_fds: usize,
    base_fd_targets: BTreeMap<String, String>,
    base_threads: usize,
    step_no: usize,
    current: String,
}

fn q(path: &Path) -> String {
    format!("'{}'", path.display())
}

impl Sut {
    fn new(combo: Combo) -> Sut {
        if !SHRINKING.with(Cell::get) {
            CASES_RUN.fetch_add(1, Ordering::SeqCst);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let work = root.join("work");
        let spill = root.join("spill");
        std::fs::create_dir(&work).expect("work dir");
        std::fs::create_dir(&spill).expect("spill dir");
        let driver = match combo.via {
            Via::Executor => Driver::Exec(ExecDriver::new(Config {
                default_timeout_ms: f64::from(DEFAULT_TIMEOUT_MS),
                grace_ms: GRACE_MS as f64,
                max_output_bytes: MAX_OUTPUT as u64,
                max_spill_bytes: MAX_SPILL as u64,
                max_tasks: MAX_TASKS,
                spill_dir: Some(spill),
                cwd: Some(work),
                containment: match combo.mode {
                    Mode::Cgroup => ContainmentPreference::Auto,
                    Mode::Subreaper => ContainmentPreference::Subreaper,
                },
                sandbox: SandboxConfig {
                    mode: if combo.sandbox.is_some() {
                        SandboxMode::WorkspaceWrite
                    } else {
                        SandboxMode::Off
                    },
                    tier: match combo.sandbox {
                        Some("landlock") => TierPreference::Landlock,
                        _ => TierPreference::Namespaces,
                    },
                    ..SandboxConfig::default()
                },
                ..Config::default()
            })),
            Via::Mcp => {
                let mut args: Vec<String> = [
                    "--grace-ms",
                    &GRACE_MS.to_string(),
                    "--max-tasks",
                    &MAX_TASKS.to_string(),
                    "--max-output-bytes",
                    &MAX_OUTPUT.to_string(),
                    "--max-spill-bytes",
                    &MAX_SPILL.to_string(),
                    "--timeout-ms",
                    &DEFAULT_TIMEOUT_MS.to_string(),
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                args.extend([
                    "--spill-dir".to_string(),
                    spill.display().to_string(),
                    "--cwd".to_string(),
                    work.display().to_string(),
                ]);
                if combo.mode == Mode::Subreaper {
                    args.extend(["--containment".to_string(), "subreaper".to_string()]);
                }
                if let Some(tier) = combo.sandbox {
                    args.extend(
                        ["--sandbox", "workspace-write", "--sandbox-tier", tier].map(String::from),
                    );
                }
                Driver::Mcp(McpDriver::new(&args).unwrap_or_else(|e| {
                    panic!(
                        "violation [host-alive] ({}): dsh-host mcp did not start: {e}",
                        combo.name()
                    )
                }))
            }
        };
        if let Driver::Exec(d) = &driver {
            let containment = d.exec.containment();
            let is_cgroup = matches!(containment, Containment::Cgroup { .. });
            assert_eq!(
                is_cgroup,
                combo.mode == Mode::Cgroup,
                "{}: the executor runs with {containment}",
                combo.name()
            );
        }
        let mut sut = Sut {
            combo,
            driver,
            _dir: dir,
            log: root.join("log"),
            root,
            next_cmd: 0,
            next_health: 0,
            log_expect: BTreeMap::new(),
            tasks: Vec::new(),
            last_task_no: 0,
            deadlines: Vec::new(),
            all_pids: Vec::new(),
            zombies_seen: HashMap::new(),
            running_before: 0,
            base_fds: 0,
            base_fd_targets: BTreeMap::new(),
            base_threads: 0,
            step_no: 0,
            current: "setup".into(),
        };
        sut.check_mode();
        sut.health();
        sut.base_fds = fd_count(sut.driver.host_pid());
        sut.base_fd_targets = fd_targets(sut.driver.host_pid());
        sut.base_threads = thread_count(sut.driver.host_pid());
        sut
    }

    fn violation(&self, invariant: &str, message: impl std::fmt::Display) -> ! {
        SHRINKING.with(|s| s.set(true));
        panic!(
            "violation [{invariant}] ({}, step {}: {}): {message}",
            self.combo.name(),
            self.step_no,
            self.current
        )
    }

    /// A fresh command id, and the command that logs it first.
    fn command(&mut self, body: &str) -> (String, String) {
        self.next_cmd += 1;
        let id = format!("c{}", self.next_cmd);
        let command = format!("echo {id} $$ >> {}; {body}", q(&self.log));
        (id, command)
    }

    fn pid_file(&self, cmd_id: &str) -> PathBuf {
        self.root.join(format!("pids-{cmd_id}"))
    }

    /// The command's cgroup shows the containment in force: its own cgroup in cgroup mode, the
    /// host's in subreaper mode.
    fn check_mode(&mut self) {
        let (cmd_id, command) = self.command("grep '^0::' /proc/self/cgroup");
        let out = self.driver.op(Op::Fg {
            command,
            workdir: None,
            timeout: TimeoutArg::Default,
        });
        let Out::Fg(Ok(fg)) = out else {
            self.violation("health", format!("the first command failed: {out:?}"));
        };
        self.log_expect.insert(cmd_id, LogExpect::Once);
        let theirs = fg.stdout.text.trim().trim_start_matches("0::").to_string();
        let ours = cgroup_v2_path(&self.driver.host_pid().to_string());
        let own_cgroup = theirs != ours;
        if own_cgroup != (self.combo.mode == Mode::Cgroup) {
            self.violation(
                "shape",
                format!(
                    "mode {:?}, but the command runs in cgroup {theirs:?} and the host in {ours:?}",
                    self.combo.mode
                ),
            );
        }
    }

    // ----- steps

    fn step(&mut self, step: Step) {
        self.step_no += 1;
        self.current = format!("{step:?}");
        if SHRINKING.with(Cell::get) {
            SHRINK_STEPS.fetch_add(1, Ordering::SeqCst);
        } else {
            STEPS_RUN.fetch_add(1, Ordering::SeqCst);
        }
        let started = Instant::now();
        match step {
            Step::Echo => self.fg_step(|id| {
                (
                    format!("echo m-{id}"),
                    TimeoutArg::Default,
                    FgExpect::Exact {
                        stdout: format!("m-{id}\n"),
                        stderr: String::new(),
                        code: 0,
                    },
                )
            }),
            Step::Exit { code } => self.fg_step(|id| {
                (
                    format!("echo out-{id}; echo err-{id} >&2; exit {code}"),
                    TimeoutArg::Default,
                    FgExpect::Exact {
                        stdout: format!("out-{id}\n"),
                        stderr: format!("err-{id}\n"),
                        code: i32::from(code),
                    },
                )
            }),
            Step::Timeout { ms, trap } => self.fg_step(|_| {
                let ms = u32::from(ms);
                (
                    if trap {
                        "trap '' TERM; sleep 30"
                    } else {
                        "sleep 30"
                    }
                    .to_string(),
                    TimeoutArg::Ms(ms),
                    FgExpect::TimedOut {
                        ms,
                        signals: if trap { &["SIGKILL"] } else { &["SIGTERM"] },
                        min_elapsed: Duration::from_millis(
                            u64::from(ms) + if trap { GRACE_MS } else { 0 },
                        ),
                        stdout_prefix_of: String::new(),
                    },
                )
            }),
            Step::SelfSignal(s) => self.self_signal(s),
            Step::Escapees { routes, timeout_ms } => self.escapees(&routes, timeout_ms),
            Step::BigOutput { lines, streams } => self.fg_step(|_| {
                let body = match streams {
                    Streams::Stdout => format!("seq 1 {lines}"),
                    Streams::Stderr => format!("seq 1 {lines} >&2"),
                    Streams::Both => format!("seq 1 {lines}; seq 1 {lines} >&2"),
                };
                (body, TimeoutArg::Default, FgExpect::Big { lines, streams })
            }),
            Step::Start(bg) => {
                let (op, pending) = self.start_op(bg);
                self.run_ops(vec![(op, pending)]);
            }
            Step::FillTasks => self.fill_tasks(),
            Step::Kill { pick } => {
                let (op, pending) = self.kill_op(pick);
                self.run_ops(vec![(op, pending)]);
            }
            Step::Read { pick } => {
                let (op, pending) = self.read_op(pick);
                self.run_ops(vec![(op, pending)]);
            }
            Step::Concurrent(ops) => {
                let ops = ops
                    .into_iter()
                    .map(|op| match op {
                        ConcOp::Echo { sleep_ms } => self.fg_op(|id| {
                            (
                                format!(
                                    "sleep {}.{:03}; echo m-{id}",
                                    sleep_ms / 1000,
                                    sleep_ms % 1000
                                ),
                                TimeoutArg::Default,
                                FgExpect::Exact {
                                    stdout: format!("m-{id}\n"),
                                    stderr: String::new(),
                                    code: 0,
                                },
                            )
                        }),
                        ConcOp::Start(bg) => self.start_op(bg),
                        ConcOp::Kill { pick } => self.kill_op(pick),
                        ConcOp::Read { pick } => self.read_op(pick),
                    })
                    .collect::<Vec<_>>();
                // Two concurrent reads (or kills) of one task take effect in an order we cannot
                // know: the second becomes one of an unknown id.
                let (mut read, mut killed) = (Vec::new(), Vec::new());
                let ops = ops
                    .into_iter()
                    .map(|(op, pending)| match pending {
                        Pending::Read(Some(i)) if read.contains(&i) => {
                            (Op::Read("bash-999999".into()), Pending::Read(None))
                        }
                        Pending::Kill(Some(i)) if killed.contains(&i) => {
                            (Op::Kill("bash-999999".into()), Pending::Kill(None))
                        }
                        Pending::Read(Some(i)) => {
                            read.push(i);
                            (op, pending)
                        }
                        Pending::Kill(Some(i)) => {
                            killed.push(i);
                            (op, pending)
                        }
                        _ => (op, pending),
                    })
                    .collect();
                self.run_ops(ops);
            }
            Step::VanishedWorkdir { background } => self.vanished_workdir(background),
            Step::BadTimeout(bad) => self.fg_step(|id| {
                (
                    format!("echo m-{id}"),
                    TimeoutArg::Bad(bad),
                    FgExpect::Error {
                        kind: ErrKind::InvalidRequest,
                        names: None,
                    },
                )
            }),
            Step::Unknown(op) => {
                let (op, kind) = match (op, self.combo.via) {
                    (UnknownOp::ReadNumber, _) => {
                        (Op::Read("bash-999999".into()), ErrKind::UnknownTask)
                    }
                    (UnknownOp::KillNumber, _) => {
                        (Op::Kill("bash-999999".into()), ErrKind::UnknownTask)
                    }
                    (UnknownOp::ReadName, _) => (Op::Read("nope".into()), ErrKind::UnknownTask),
                    (UnknownOp::Blank, Via::Executor) => {
                        (Op::Kill(String::new()), ErrKind::UnknownTask)
                    }
                    (UnknownOp::Blank, Via::Mcp) => {
                        (Op::Kill("  ".into()), ErrKind::InvalidRequest)
                    }
                };
                self.run_ops(vec![(op, Pending::Unknown(kind))]);
            }
            Step::Pause { ms } => std::thread::sleep(Duration::from_millis(u64::from(ms))),
            Step::StartAfterEnd { seen_by } => self.start_after_end(seen_by),
        }
        let ran = started.elapsed();
        self.check();
        if std::env::var_os("DSH_SEQUENCE_VERBOSE").is_some() {
            eprintln!(
                "  [{}] step {}: {} ({ran:.2?}, checks {:.2?}; {} tasks, {} running)",
                self.combo.name(),
                self.step_no,
                self.current,
                started.elapsed() - ran,
                self.tasks.len(),
                self.running_seen()
            );
        }
    }

    fn fg_op(
        &mut self,
        make: impl FnOnce(&str) -> (String, TimeoutArg, FgExpect),
    ) -> (Op, Pending) {
        self.next_cmd += 1;
        let id = format!("c{}", self.next_cmd);
        let (body, timeout, expect) = make(&id);
        let command = format!("echo {id} $$ >> {}; {body}", q(&self.log));
        let requested_ms = match timeout {
            TimeoutArg::Ms(ms) => Some(ms),
            TimeoutArg::Default => Some(DEFAULT_TIMEOUT_MS),
            TimeoutArg::Bad(_) => None,
        };
        (
            Op::Fg {
                command,
                workdir: None,
                timeout,
            },
            Pending::Fg {
                cmd_id: id,
                expect,
                requested_ms,
                pid_file: None,
            },
        )
    }

    fn fg_step(&mut self, make: impl FnOnce(&str) -> (String, TimeoutArg, FgExpect)) {
        let op = self.fg_op(make);
        self.run_ops(vec![op]);
    }

    fn self_signal(&mut self, s: SelfSignal) {
        let (body, timeout, expect) = match s {
            SelfSignal::KillSelf9 => (
                "kill -9 $$; echo never",
                TimeoutArg::Default,
                FgExpect::Signal { signal: "SIGKILL" },
            ),
            SelfSignal::StopSelf { ms } => (
                "kill -STOP $$; echo never",
                TimeoutArg::Ms(u32::from(ms)),
                FgExpect::TimedOut {
                    ms: u32::from(ms),
                    signals: &["SIGTERM", "SIGKILL"],
                    min_elapsed: Duration::from_millis(u64::from(ms)),
                    stdout_prefix_of: String::new(),
                },
            ),
            SelfSignal::TermParent => (
                "kill -TERM $PPID; sleep 0.2; echo alive",
                TimeoutArg::Default,
                FgExpect::Exact {
                    stdout: "alive\n".into(),
                    stderr: String::new(),
                    code: 0,
                },
            ),
            SelfSignal::KillParent9 => (
                "kill -9 $PPID; for i in {1..300000}; do :; done; echo after",
                TimeoutArg::Default,
                FgExpect::Signal { signal: "SIGKILL" },
            ),
            SelfSignal::StopParentThenExit => (
                "kill -STOP $PPID; exit 3",
                TimeoutArg::Default,
                FgExpect::Exact {
                    stdout: String::new(),
                    stderr: String::new(),
                    code: 3,
                },
            ),
            SelfSignal::KillGroup => (
                "kill 0; echo never",
                TimeoutArg::Default,
                FgExpect::Signal { signal: "SIGTERM" },
            ),
            SelfSignal::KillGroup9 => (
                "kill -9 0; echo never",
                TimeoutArg::Default,
                FgExpect::Signal { signal: "SIGKILL" },
            ),
            SelfSignal::StopParentThenEcho => (
                "kill -STOP $PPID; echo after",
                TimeoutArg::Default,
                FgExpect::Exact {
                    stdout: "after\n".into(),
                    stderr: String::new(),
                    code: 0,
                },
            ),
            SelfSignal::TermParentGroup => (
                "kill -TERM -- -$(ps -o pgid= -p $PPID | tr -d ' '); sleep 0.2; echo alive",
                TimeoutArg::Default,
                FgExpect::Exact {
                    stdout: "alive\n".into(),
                    stderr: String::new(),
                    code: 0,
                },
            ),
            SelfSignal::KillParentGroup9 => (
                "kill -9 -- -$(ps -o pgid= -p $PPID | tr -d ' '); for i in {1..300000}; do :; \
                 done; echo after",
                TimeoutArg::Default,
                FgExpect::Signal { signal: "SIGKILL" },
            ),
            SelfSignal::KillFactoryGroup9 => (
                "f=$(ps -o ppid= -p $PPID | tr -d ' '); kill -9 -- -$(ps -o pgid= -p $f | tr -d \
                 ' '); sleep 0.2; echo alive",
                TimeoutArg::Default,
                FgExpect::Exact {
                    stdout: "alive\n".into(),
                    stderr: String::new(),
                    code: 0,
                },
            ),
        };
        self.fg_step(|_| (body.to_string(), timeout, expect));
    }

    /// Lines that start escapees recording their pids in `pid_file`, and wait until all have.
    fn escapee_script(routes: &[Route], pid_file: &Path) -> String {
        let inner = format!(
            "sh -c 'echo $$ >> \"{}\"; exec sleep 30'",
            pid_file.display()
        );
        let mut script = format!("touch {}\n", q(pid_file));
        for route in routes {
            script.push_str(&match route {
                Route::Setsid => format!("setsid {inner} &\n"),
                Route::DoubleFork => format!("( ({inner} &) & )\n"),
                Route::Nohup => format!("nohup {inner} >/dev/null 2>&1 &\n"),
            });
        }
        script.push_str(&format!(
            "n=0; while [ \"$(wc -l < {})\" -lt {} ] && [ $n -lt 250 ]; do sleep 0.02; n=$((n+1)); done; sleep 0.1\n",
            q(pid_file),
            routes.len()
        ));
        script
    }

    fn escapees(&mut self, routes: &[Route], timeout_ms: Option<u16>) {
        self.next_cmd += 1;
        let cmd_id = format!("c{}", self.next_cmd);
        let pid_file = self.pid_file(&cmd_id);
        let mut body = Self::escapee_script(routes, &pid_file);
        body.push_str(&format!("echo done-{cmd_id}"));
        let (timeout, expect, requested_ms) = match timeout_ms {
            None => (
                TimeoutArg::Default,
                FgExpect::Escapees {
                    count: u32::try_from(routes.len()).expect("few routes"),
                    stdout: format!("done-{cmd_id}\n"),
                },
                DEFAULT_TIMEOUT_MS,
            ),
            Some(ms) => {
                body.push_str("; sleep 30");
                (
                    TimeoutArg::Ms(u32::from(ms)),
                    FgExpect::TimedOut {
                        ms: u32::from(ms),
                        signals: &["SIGTERM", "SIGKILL"],
                        min_elapsed: Duration::from_millis(u64::from(ms)),
                        stdout_prefix_of: format!("done-{cmd_id}\n"),
                    },
                    u32::from(ms),
                )
            }
        };
        let op = Op::Fg {
            command: format!("echo {cmd_id} $$ >> {}; {body}", q(&self.log)),
            workdir: None,
            timeout,
        };
        let pending = Pending::Fg {
            cmd_id,
            expect,
            requested_ms: Some(requested_ms),
            pid_file: Some(pid_file),
        };
        self.run_ops(vec![(op, pending)]);
    }

    fn bg_body(bg: &Bg, cmd_id: &str, pid_file: &Path) -> (String, Option<String>, Option<String>) {
        let none = Some(String::new());
        match bg {
            Bg::Seq { n, pause_ms } => (
                format!("for i in $(seq 1 {n}); do echo $i; sleep 0.{pause_ms:03}; done"),
                Some(seq_text(u32::from(*n))),
                none,
            ),
            Bg::Long { trap: true } => ("trap '' TERM; sleep 30".into(), none.clone(), none),
            Bg::Long { trap: false } => ("sleep 30".into(), none.clone(), none),
            Bg::Exit { code } => (
                format!("echo out-{cmd_id}; echo err-{cmd_id} >&2; exit {code}"),
                Some(format!("out-{cmd_id}\n")),
                Some(format!("err-{cmd_id}\n")),
            ),
            Bg::KillSelf9 => ("kill -9 $$; echo never".into(), none.clone(), none),
            Bg::KillParent9 => (
                "kill -9 $PPID; for i in {1..300000}; do :; done; echo after".into(),
                none.clone(),
                none,
            ),
            Bg::TermParent => (
                "kill -TERM $PPID; sleep 0.2; echo alive".into(),
                Some("alive\n".into()),
                none,
            ),
            Bg::StopParentThenExit => ("kill -STOP $PPID; exit 3".into(), none.clone(), none),
            Bg::KillParentGroup9 => (
                format!("{KILL_PARENT_GROUP9}; for i in {{1..300000}}; do :; done; echo after"),
                none.clone(),
                none,
            ),
            Bg::KillGroup => ("kill 0; echo never".into(), none.clone(), none),
            Bg::Escapees { routes, linger } => {
                let mut body = Self::escapee_script(routes, pid_file);
                body.push_str(&format!("echo done-{cmd_id}"));
                if *linger {
                    body.push_str("; sleep 30");
                }
                (body, Some(format!("done-{cmd_id}\n")), none)
            }
            Bg::BigSeq { lines } => (format!("seq 1 {lines}"), Some(seq_text(*lines)), none),
        }
    }

    fn start_op(&mut self, bg: Bg) -> (Op, Pending) {
        self.next_cmd += 1;
        let cmd_id = format!("c{}", self.next_cmd);
        let pid_file = self.pid_file(&cmd_id);
        let (body, _, _) = Self::bg_body(&bg, &cmd_id, &pid_file);
        let uses_pid_file = matches!(bg, Bg::Escapees { .. });
        (
            Op::Bg {
                command: format!("echo {cmd_id} $$ >> {}; {body}", q(&self.log)),
                workdir: None,
            },
            Pending::Start {
                cmd_id,
                bg: Some(bg),
                pid_file: uses_pid_file.then_some(pid_file),
                workdir_gone: None,
            },
        )
    }

    /// A running task if there is one (a finished one for picks with the high bit set), else an
    /// unknown id.
    fn pick(&self, pick: u8) -> Option<usize> {
        let running: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| !self.tasks[i].status.terminal())
            .collect();
        if !running.is_empty() && pick & 0x80 == 0 {
            return Some(running[usize::from(pick) % running.len()]);
        }
        (!self.tasks.is_empty()).then(|| usize::from(pick) % self.tasks.len())
    }

    fn kill_op(&mut self, pick: u8) -> (Op, Pending) {
        match self.pick(pick) {
            Some(i) => (Op::Kill(self.tasks[i].id.clone()), Pending::Kill(Some(i))),
            None => (Op::Kill("bash-999999".into()), Pending::Kill(None)),
        }
    }

    fn read_op(&mut self, pick: u8) -> (Op, Pending) {
        match self.pick(pick) {
            Some(i) => (Op::Read(self.tasks[i].id.clone()), Pending::Read(Some(i))),
            None => (Op::Read("bash-999999".into()), Pending::Read(None)),
        }
    }

    /// Start long tasks until the limit refuses one: it must, within `MAX_TASKS + 1` starts.
    fn fill_tasks(&mut self) {
        for _ in 0..=MAX_TASKS {
            let before = self.tasks.len();
            let op = self.start_op(Bg::Long { trap: false });
            self.run_ops(vec![op]);
            if self.tasks.len() == before {
                // Refused: `settle_start` checked that the limit was reached.
                return;
            }
        }
        self.violation(
            "task-limit",
            format!(
                "{} long tasks started without the limit ({MAX_TASKS}) refusing one",
                MAX_TASKS + 1
            ),
        );
    }

    /// Tasks running as the client last saw them.
    fn running_seen(&self) -> usize {
        self.tasks.iter().filter(|t| !t.status.terminal()).count()
    }

    /// [`Step::StartAfterEnd`]: long tasks take every slot but one (running tasks are killed
    /// first where none is free), a short task takes the last; the moment its completion is seen
    /// as `seen_by` says, one more task is started, which the limit must not refuse:
    /// `settle_start` holds a refusal against the running count the client was told. The long
    /// tasks this step started are killed at its end.
    fn start_after_end(&mut self, seen_by: SeenBy) {
        while self.running_seen() >= MAX_TASKS {
            let Some(i) = self.tasks.iter().position(|t| !t.status.terminal()) else {
                break;
            };
            let kill = (Op::Kill(self.tasks[i].id.clone()), Pending::Kill(Some(i)));
            self.run_ops(vec![kill]);
        }
        let mut fillers = Vec::new();
        while self.running_seen() < MAX_TASKS - 1 {
            let before = self.tasks.len();
            let start = self.start_op(Bg::Long { trap: false });
            self.run_ops(vec![start]);
            if self.tasks.len() == before {
                // Refused, which `settle_start` has judged.
                return;
            }
            fillers.push(before);
        }
        let short = self.tasks.len();
        let start = self.start_op(Bg::Exit { code: 0 });
        self.run_ops(vec![start]);
        if self.tasks.len() == short {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = match seen_by {
                SeenBy::Read => {
                    let read = (
                        Op::Read(self.tasks[short].id.clone()),
                        Pending::Read(Some(short)),
                    );
                    self.run_ops(vec![read]);
                    self.tasks[short].status.terminal()
                }
                SeenBy::Event => {
                    self.drain_events();
                    self.tasks[short].events > 0
                }
            };
            if seen {
                break;
            }
            if Instant::now() > deadline {
                self.violation(
                    "forward-only",
                    format!(
                        "the completion of {} (`exit 0`) was not seen ({seen_by:?}) within 20 s",
                        self.tasks[short].id
                    ),
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // At once: the slot of a task the client has seen complete is free.
        let start = self.start_op(Bg::Exit { code: 0 });
        self.run_ops(vec![start]);
        for i in fillers {
            if !self.tasks[i].status.terminal() {
                let kill = (Op::Kill(self.tasks[i].id.clone()), Pending::Kill(Some(i)));
                self.run_ops(vec![kill]);
            }
        }
    }

    fn vanished_workdir(&mut self, background: bool) {
        let gone = self.root.join(format!("gone-{}", self.next_cmd + 1));
        std::fs::create_dir(&gone).expect("mkdir");
        std::fs::remove_dir(&gone).expect("rmdir");
        let gone = gone.display().to_string();
        if background {
            let (op, pending) = self.start_op(Bg::Exit { code: 0 });
            let (Op::Bg { command, .. }, Pending::Start { cmd_id, .. }) = (op, pending) else {
                unreachable!()
            };
            self.run_ops(vec![(
                Op::Bg {
                    command,
                    workdir: Some(gone.clone()),
                },
                Pending::Start {
                    cmd_id,
                    bg: None,
                    pid_file: None,
                    workdir_gone: Some(gone),
                },
            )]);
        } else {
            let (op, pending) = self.fg_op(|id| {
                (
                    format!("echo m-{id}"),
                    TimeoutArg::Default,
                    FgExpect::Error {
                        kind: ErrKind::WorkdirUnusable,
                        names: Some(gone.clone()),
                    },
                )
            });
            let Op::Fg {
                command, timeout, ..
            } = op
            else {
                unreachable!()
            };
            self.run_ops(vec![(
                Op::Fg {
                    command,
                    workdir: Some(gone.clone()),
                    timeout,
                },
                pending,
            )]);
        }
    }

    /// Runs the operations (concurrently when several) and settles each result.
    fn run_ops(&mut self, ops: Vec<(Op, Pending)>) {
        let starts = ops
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Start { .. }))
            .count();
        let kills = ops
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Kill(_)))
            .count();
        let (ops, pendings): (Vec<Op>, Vec<Pending>) = ops.into_iter().unzip();
        self.running_before = self.running_seen();
        for pending in &pendings {
            if let Pending::Kill(Some(i)) = pending {
                self.tasks[*i].kill_pending = true;
            }
        }
        let outs = self.driver.ops(ops);
        let first_new = self.tasks.len();
        // Reads first: what they saw may be older than what settling a kill looks up afterwards.
        let (reads, others): (Vec<_>, Vec<_>) = pendings
            .into_iter()
            .zip(outs)
            .partition(|(pending, _)| matches!(pending, Pending::Read(_)));
        for (pending, out) in reads.into_iter().chain(others) {
            self.settle(pending, out, starts.saturating_sub(1), kills);
        }
        // Ids count up from 1, one per started task, never reused, none taken by a refusal.
        let mut new_ids: Vec<u64> = self.tasks[first_new..]
            .iter()
            .map(|t| t.id.trim_start_matches("bash-").parse().unwrap_or(0))
            .collect();
        new_ids.sort_unstable();
        let want: Vec<u64> = (1..=new_ids.len() as u64)
            .map(|k| self.last_task_no + k)
            .collect();
        if new_ids != want {
            self.violation(
                "ids",
                format!(
                    "after task bash-{} the new ids are {new_ids:?}, expected {want:?}",
                    self.last_task_no
                ),
            );
        }
        self.last_task_no += new_ids.len() as u64;
    }

    /// The processes started by a command that has ended must be gone within `within`.
    fn expect_dead(&mut self, pids: Vec<Tracked>, within: Duration) {
        let deadline = Instant::now() + within;
        self.deadlines
            .extend(pids.into_iter().map(|t| (deadline, t)));
    }

    /// The command's log line, waiting up to `wait` for it.
    fn log_pids(&self, cmd_id: &str, wait: Duration) -> Vec<i32> {
        let deadline = Instant::now() + wait;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines = parse_log(&text).unwrap_or_else(|e| self.violation("exactly-once", e));
            if let Some(pids) = lines.get(cmd_id) {
                return pids.clone();
            }
            if Instant::now() >= deadline {
                return Vec::new();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn track(&mut self, pid: i32, what: String) -> Option<Tracked> {
        let t = Tracked::snapshot(pid, what)?;
        self.all_pids.push(t.clone());
        Some(t)
    }

    fn settle(&mut self, pending: Pending, out: Out, other_starts: usize, kills: usize) {
        if let Out::Broken(e) = &out {
            self.violation("shape", e);
        }
        match pending {
            Pending::Fg {
                cmd_id,
                expect,
                requested_ms,
                pid_file,
            } => {
                let Out::Fg(result) = out else {
                    self.violation("shape", format!("{out:?}"))
                };
                if std::env::var_os("DSH_SEQUENCE_VERBOSE").is_some() {
                    match &result {
                        Ok(fg) => eprintln!("    {cmd_id}: {}", brief(fg)),
                        Err(f) => eprintln!("    {cmd_id}: {f:?}"),
                    }
                }
                if let Err(e) = check_fg(&expect, &result, requested_ms) {
                    self.violation("shape", format!("{cmd_id}: {e}"));
                }
                if result.is_err() {
                    self.log_expect.insert(cmd_id, LogExpect::Never);
                    return;
                }
                let mut ended: Vec<Tracked> = Vec::new();
                let pids = self.log_pids(&cmd_id, Duration::ZERO);
                let timed_out = matches!(&result, Ok(fg) if fg.timed_out);
                if pids.is_empty() && timed_out {
                    // Killed by its timeout before its first line: a slow start, not a violation.
                    self.log_expect.insert(cmd_id, LogExpect::AtMostOnce);
                    return;
                }
                self.log_expect.insert(cmd_id.clone(), LogExpect::Once);
                if pids.len() != 1 {
                    self.violation(
                        "exactly-once",
                        format!(
                            "{cmd_id} was answered with a result but ran {} time(s) (pids {pids:?})",
                            pids.len()
                        ),
                    );
                }
                ended.extend(self.track(pids[0], format!("{cmd_id}'s bash")));
                if let Some(file) = pid_file {
                    for pid in read_pids(&file) {
                        ended.extend(self.track(pid, format!("an escapee of {cmd_id}")));
                    }
                }
                // The result comes after the tree is stopped: what it started is gone now.
                self.expect_dead(ended, DEATH_SLACK);
                self.check_deadlines(false);
            }
            Pending::Start {
                cmd_id,
                bg,
                pid_file,
                workdir_gone,
            } => self.settle_start(cmd_id, bg, pid_file, workdir_gone, out, other_starts, kills),
            Pending::Kill(target) => {
                let Out::Kill(result) = out else {
                    self.violation("shape", format!("{out:?}"))
                };
                let Some(i) = target else {
                    if !matches!(&result, Err(f) if f.kind == ErrKind::UnknownTask) {
                        self.violation(
                            "shape",
                            format!("a kill of an unknown id answered {result:?}"),
                        );
                    }
                    return;
                };
                let id = self.tasks[i].id.clone();
                match result {
                    Ok(true) => {
                        self.tasks[i].killed_by_us = true;
                        self.tasks[i].kill_pending = false;
                        let status = self.fresh_status(i);
                        if !matches!(status, Status::Killed(_)) {
                            self.violation(
                                "forward-only",
                                format!("{id} was killed but its status is {status:?}"),
                            );
                        }
                    }
                    Ok(false) => {
                        self.tasks[i].kill_pending = false;
                        let status = self.fresh_status(i);
                        if !status.terminal() {
                            self.violation(
                                "shape",
                                format!("a kill of {id} answered `already finished` but it runs"),
                            );
                        }
                    }
                    Err(f) => {
                        self.violation("shape", format!("a kill of the known task {id}: {f:?}"))
                    }
                }
            }
            Pending::Read(target) => {
                let Out::Read(result) = out else {
                    self.violation("shape", format!("{out:?}"))
                };
                match target {
                    Some(i) => self.settle_read(i, result),
                    None => {
                        if !matches!(&result, Err(f) if f.kind == ErrKind::UnknownTask) {
                            self.violation(
                                "shape",
                                format!("a read of an unknown id answered {result:?}"),
                            );
                        }
                    }
                }
            }
            Pending::Unknown(kind) => {
                let failure = match &out {
                    Out::Read(Err(f)) | Out::Kill(Err(f)) => f,
                    other => {
                        self.violation("shape", format!("expected a {kind:?} error, got {other:?}"))
                    }
                };
                if failure.kind != kind {
                    self.violation(
                        "shape",
                        format!("expected a {kind:?} error, got {failure:?}"),
                    );
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn settle_start(
        &mut self,
        cmd_id: String,
        bg: Option<Bg>,
        pid_file: Option<PathBuf>,
        workdir_gone: Option<String>,
        out: Out,
        other_starts: usize,
        kills: usize,
    ) {
        let Out::Bg(result) = out else {
            self.violation("shape", format!("{out:?}"))
        };
        // A kill in the same step may have come after this start: count what ran before it.
        let running = self.running_seen().max(self.running_before);
        let stuck = self
            .tasks
            .iter()
            .filter(|t| !t.status.terminal() && t.runs_until_killed() && !t.killed_by_us)
            .count();
        match result {
            Err(f) if f.kind == ErrKind::TaskLimit => {
                self.log_expect.insert(cmd_id, LogExpect::Never);
                if running + other_starts < MAX_TASKS {
                    self.violation(
                        "task-limit",
                        format!(
                            "refused with only {running} running (+{other_starts} starting): {}",
                            f.text
                        ),
                    );
                }
            }
            Err(f) if workdir_gone.is_some() && f.kind == ErrKind::WorkdirUnusable => {
                self.log_expect.insert(cmd_id, LogExpect::Never);
                let gone = workdir_gone.unwrap_or_default();
                if !f.text.contains(&gone) {
                    self.violation(
                        "shape",
                        format!("the error does not name {gone:?}: {}", f.text),
                    );
                }
            }
            Err(f) => self.violation("shape", format!("start of {cmd_id} failed: {f:?}")),
            Ok(id) => {
                if stuck >= MAX_TASKS && kills == 0 {
                    // Unless one of them died (which `observe` reports as such), the limit failed.
                    for i in 0..self.tasks.len() {
                        if !self.tasks[i].status.terminal() {
                            self.fresh_status(i);
                        }
                    }
                    self.violation(
                        "task-limit",
                        format!("{id} started while {stuck} tasks that cannot end on their own were running"),
                    );
                }
                let (expected_out, expected_err, log, wait) = match &bg {
                    Some(bg) => {
                        let (_, out, err) = Self::bg_body(bg, &cmd_id, &self.pid_file(&cmd_id));
                        (out, err, LogExpect::Once, Duration::from_secs(5))
                    }
                    // A start in a vanished workdir may report a task that then fails to spawn:
                    // it must never run, and it ends killed with `spawn failed` on stderr.
                    None => (Some(String::new()), None, LogExpect::Never, Duration::ZERO),
                };
                self.log_expect.insert(cmd_id.clone(), log);
                let mut task = TaskModel {
                    id: id.clone(),
                    cmd_id: cmd_id.clone(),
                    bg,
                    pid_file,
                    expected_out,
                    expected_err,
                    out: Track::default(),
                    err: Track::default(),
                    status: Status::Running,
                    raw: None,
                    final_status: None,
                    final_raw: None,
                    events: 0,
                    blocks: 0,
                    killed_by_us: false,
                    kill_pending: false,
                    done_reading: false,
                    pids: Vec::new(),
                    started: Instant::now(),
                };
                if log == LogExpect::Once {
                    let pids = self.log_pids(&cmd_id, wait);
                    if pids.len() != 1 {
                        let status = self.peek_status(&id);
                        self.violation(
                            "exactly-once",
                            format!(
                                "{id} ({cmd_id}) was reported started, but its command ran {} time(s) within {wait:?} (pids {pids:?}); status now {status:?}",
                                pids.len()
                            ),
                        );
                    }
                    task.pids
                        .extend(self.track(pids[0], format!("{id}'s bash")));
                }
                self.tasks.push(task);
            }
        }
    }

    /// What the host says of a task now, for a message (no checks).
    fn peek_status(&mut self, id: &str) -> String {
        match self.driver.op(Op::Read(id.to_string())) {
            Out::Read(Ok(read)) => format!("{:?}, stdout {:?}", read.status, read.stdout),
            other => format!("{other:?}"),
        }
    }

    /// The task's status now (executor: its record; MCP: a read).
    fn fresh_status(&mut self, i: usize) -> Status {
        let id = self.tasks[i].id.clone();
        match &mut self.driver {
            Driver::Exec(d) => match d.exec.get(&id) {
                Ok(task) => {
                    self.observe(i, Status::of(&task), Some(task));
                }
                Err(e) => self.violation("forward-only", format!("get({id}) failed: {e:?}")),
            },
            Driver::Mcp(_) => {
                let out = self.driver.op(Op::Read(id));
                let Out::Read(result) = out else {
                    self.violation("shape", format!("{out:?}"))
                };
                self.settle_read(i, result);
            }
        }
        self.tasks[i].status.clone()
    }

    /// A status (and record) seen for task `i`: only forward, agreeing with its end event.
    fn observe(&mut self, i: usize, status: Status, raw: Option<Task>) {
        let t = &self.tasks[i];
        if let Err(e) = check_forward(&t.status, &status) {
            self.violation("forward-only", format!("{}: {e}", t.id));
        }
        if let Some(raw) = &raw
            && let Err(e) = check_raw(t.raw.as_ref(), raw)
        {
            self.violation("forward-only", format!("{}: {e}", t.id));
        }
        if let Some(end) = &t.final_status
            && *end != status
        {
            self.violation(
                "forward-only",
                format!(
                    "{} ended as {end:?} (its task-done event) but now reads {status:?}",
                    t.id
                ),
            );
        }
        if let (Some(end), Some(raw)) = (&t.final_raw, &raw)
            && end != raw
        {
            self.violation(
                "forward-only",
                format!(
                    "{} ended as {end:?} (its task-done event) but now is {raw:?}",
                    t.id
                ),
            );
        }
        if status.terminal() && t.runs_until_killed() && !t.killed_by_us && !t.kill_pending {
            self.violation(
                "forward-only",
                format!(
                    "{} runs until killed and nobody killed it, but it ended: {status:?}",
                    t.id
                ),
            );
        }
        let t = &mut self.tasks[i];
        t.status = status;
        if raw.is_some() {
            t.raw = raw;
        }
    }

    fn settle_read(&mut self, i: usize, result: Result<ReadOut, Failure>) {
        let read = match result {
            Ok(read) => read,
            Err(f) => self.violation(
                "output",
                format!("a read of {} failed: {f:?}", self.tasks[i].id),
            ),
        };
        let had_event = self.tasks[i].events > 0;
        self.observe(i, read.status.clone(), read.raw.clone());
        let t = &mut self.tasks[i];
        let id = t.id.clone();
        let mut problems = Vec::new();
        if let Some(expected) = &t.expected_out {
            if let Err(e) = advance(expected, &mut t.out, &read.stdout, read.lossy_out) {
                problems.push(format!("stdout: {e}"));
            }
            if let Some(path) = &read.spill_out {
                match std::fs::read(path) {
                    Ok(content) if expected.as_bytes().starts_with(&content) && content.len() <= MAX_SPILL => {}
                    Ok(content) => problems.push(format!(
                        "the spill file {path} ({} bytes) is not a prefix of the stream within the cap",
                        content.len()
                    )),
                    Err(e) => problems.push(format!("the spill file {path}: {e}")),
                }
            }
        }
        if let Some(expected) = &t.expected_err {
            if let Err(e) = advance(expected, &mut t.err, &read.stderr, read.lossy_err) {
                problems.push(format!("stderr: {e}"));
            }
        } else {
            t.err.seen += read.stderr.len();
            if t.err.seen == read.stderr.len()
                && !read.stderr.is_empty()
                && !read.stderr.starts_with("spawn failed")
            {
                problems.push(format!("stderr of a failed spawn: {:?}", read.stderr));
            }
        }
        if had_event {
            t.done_reading = true;
        }
        if let Some(p) = problems.first() {
            self.violation("output", format!("{id}: {p}"));
        }
    }

    // ----- invariants after every step

    fn check(&mut self) {
        self.drain_events();
        self.poll_tasks();
        self.drain_events();
        self.check_log();
        self.check_deadlines(false);
        self.health();
        self.check_host();
        self.check_zombies();
        self.check_resources();
    }

    fn drain_events(&mut self) {
        let mut events: Vec<(String, Status, Option<Task>)> = Vec::new();
        let mut blocks = Vec::new();
        match &mut self.driver {
            Driver::Exec(d) => {
                while let Ok(task) = d.events.try_recv() {
                    events.push((task.id.clone(), Status::of(&task), Some(task)));
                }
            }
            Driver::Mcp(d) => {
                blocks = std::mem::take(&mut d.blocks);
                let notes = match d.notifications() {
                    Ok(notes) => notes,
                    Err(e) => self.violation("host-alive", e),
                };
                for note in notes {
                    if note["method"] != "notifications/message" {
                        continue;
                    }
                    let data = note["params"]["data"].as_str().unwrap_or_default();
                    match parse_notice(data) {
                        Some((id, status)) if note["params"]["logger"] == "tool-bash" => {
                            events.push((id, status, None));
                        }
                        _ => self.violation("shape", format!("an unexpected notification {note}")),
                    }
                }
            }
        }
        for (id, status, raw) in events {
            let Some(i) = self.tasks.iter().position(|t| t.id == id) else {
                self.violation(
                    "forward-only",
                    format!("a task-done event for unknown task {id}"),
                );
            };
            if !status.terminal() {
                self.violation(
                    "forward-only",
                    format!("a task-done event for {id} with status {status:?}"),
                );
            }
            self.observe(i, status.clone(), raw.clone());
            let t = &mut self.tasks[i];
            t.events += 1;
            if t.events > 1 {
                self.violation(
                    "forward-only",
                    format!("{id}: a second task-done event ({status:?})"),
                );
            }
            t.final_status = Some(status);
            t.final_raw = raw;
            let mut pids = t.pids.clone();
            if let Some(file) = t.pid_file.clone() {
                for pid in read_pids(&file) {
                    if !pids.iter().any(|p| p.pid == pid) {
                        pids.extend(self.track(pid, format!("an escapee of {id}")));
                    }
                }
            }
            self.expect_dead(pids, Duration::from_millis(GRACE_MS) + DEATH_SLACK);
        }
        for (id, status) in blocks {
            let Some(i) = self.tasks.iter().position(|t| t.id == id) else {
                self.violation(
                    "forward-only",
                    format!("a notice block for unknown task {id}"),
                );
            };
            self.tasks[i].blocks += 1;
            let count = self.tasks[i].blocks;
            if count > 1 || !status.terminal() {
                self.violation(
                    "forward-only",
                    format!("{id}: notice block #{count} with status {status:?}"),
                );
            }
        }
    }

    /// Statuses of all tasks (executor: the list) and a read of every task whose output may
    /// still grow.
    fn poll_tasks(&mut self) {
        if let Driver::Exec(d) = &self.driver {
            let list = d.exec.list();
            let running = list
                .iter()
                .filter(|t| t.state == TaskState::Running)
                .count();
            if running > MAX_TASKS {
                self.violation(
                    "task-limit",
                    format!("{running} tasks running, limit {MAX_TASKS}"),
                );
            }
            if let Some(t) = list
                .iter()
                .find(|t| !self.tasks.iter().any(|m| m.id == t.id))
            {
                self.violation(
                    "ids",
                    format!("the executor lists a task we never started: {t:?}"),
                );
            }
            for i in 0..self.tasks.len() {
                let id = self.tasks[i].id.clone();
                match list.iter().find(|t| t.id == id) {
                    Some(task) => self.observe(i, Status::of(task), Some(task.clone())),
                    None => self.violation("forward-only", format!("{id} is no longer listed")),
                }
            }
        }
        for i in 0..self.tasks.len() {
            if self.tasks[i].done_reading {
                continue;
            }
            // Remember the escapees while they run, so that pid reuse cannot mask a survivor.
            if let Some(file) = self.tasks[i].pid_file.clone() {
                for pid in read_pids(&file) {
                    if !self.tasks[i].pids.iter().any(|p| p.pid == pid) {
                        let what = format!("an escapee of {}", self.tasks[i].id);
                        if let Some(t) = self.track(pid, what) {
                            self.tasks[i].pids.push(t);
                        }
                    }
                }
            }
            let out = self.driver.op(Op::Read(self.tasks[i].id.clone()));
            let Out::Read(result) = out else {
                self.violation("shape", format!("{out:?}"))
            };
            self.settle_read(i, result);
        }
        let running = self.running_seen();
        if running > MAX_TASKS {
            self.violation(
                "task-limit",
                format!("{running} tasks read as running, limit {MAX_TASKS}"),
            );
        }
    }

    fn check_log(&self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines = parse_log(&text).unwrap_or_else(|e| self.violation("exactly-once", e));
        if let Err(e) = check_log(&lines, &self.log_expect) {
            self.violation("exactly-once", e);
        }
    }

    /// Processes past their deadline must be gone; with `all`, waits for every deadline.
    fn check_deadlines(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deadlines)
            .into_iter()
            .partition(|(deadline, _)| all || *deadline <= now);
        self.deadlines = later;
        for (deadline, tracked) in due {
            // A process being killed right now may take a moment: poll until its deadline.
            while tracked.alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if tracked.alive() {
                self.violation(
                    "survivors",
                    format!(
                        "{} (pid {}) is still alive after its command ended",
                        tracked.what, tracked.pid
                    ),
                );
            }
        }
    }

    fn health(&mut self) {
        self.next_health += 1;
        let n = self.next_health;
        let (cmd_id, command) = self.command(&format!("echo health-{n}"));
        let out = self.driver.op(Op::Fg {
            command,
            workdir: None,
            timeout: TimeoutArg::Default,
        });
        let result = match out {
            Out::Fg(result) => result,
            other => self.violation("health", format!("{other:?}")),
        };
        let expect = FgExpect::Exact {
            stdout: format!("health-{n}\n"),
            stderr: String::new(),
            code: 0,
        };
        if let Err(e) = check_fg(&expect, &result, Some(DEFAULT_TIMEOUT_MS)) {
            self.violation("health", format!("{cmd_id}: {e}"));
        }
        let elapsed = result.as_ref().map(|fg| fg.elapsed).unwrap_or_default();
        if elapsed > HEALTH_BOUND {
            self.violation("health", format!("{cmd_id} took {elapsed:?}"));
        }
        self.log_expect.insert(cmd_id.clone(), LogExpect::Once);
        let pids = self.log_pids(&cmd_id, Duration::ZERO);
        if pids.len() != 1 {
            self.violation(
                "exactly-once",
                format!("{cmd_id} ran {} time(s)", pids.len()),
            );
        }
        let ended: Vec<Tracked> = self
            .track(pids[0], format!("{cmd_id}'s bash"))
            .into_iter()
            .collect();
        self.expect_dead(ended, DEATH_SLACK);
    }

    fn check_host(&mut self) {
        if let Driver::Mcp(d) = &mut self.driver {
            match d.client.child.try_wait() {
                Ok(None) => {}
                other => {
                    let stderr = d.client.stderr();
                    self.violation(
                        "host-alive",
                        format!("dsh-host exited: {other:?}; stderr:\n{stderr}"),
                    );
                }
            }
            let started = Instant::now();
            if let Err(e) = d.ping() {
                self.violation("host-alive", e);
            }
            if started.elapsed() > HEALTH_BOUND {
                self.violation("host-alive", format!("ping took {:?}", started.elapsed()));
            }
        }
    }

    /// No child of the host stays a zombie for more than a second.
    fn check_zombies(&mut self) {
        let host = self.driver.host_pid();
        let deadline = Instant::now() + Duration::from_millis(1500);
        loop {
            let zombies = zombie_children(host);
            let now = Instant::now();
            self.zombies_seen.retain(|pid, _| zombies.contains(pid));
            if zombies.is_empty() {
                return;
            }
            for pid in &zombies {
                let since = *self.zombies_seen.entry(*pid).or_insert(now);
                if now.duration_since(since) > Duration::from_secs(1) {
                    self.violation(
                        "zombies",
                        format!(
                            "pid {pid} ({}), a child of the host {host}, has been a zombie for \
                             over 1 s",
                            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                                .unwrap_or_default()
                                .trim()
                        ),
                    );
                }
            }
            if now > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn check_resources(&self) {
        let host = self.driver.host_pid();
        // A task holds its resources until its end is reported (a killed one is still being
        // stopped until then).
        let live = self.tasks.iter().filter(|t| t.events == 0).count();
        let fds = fd_count(host);
        let fd_bound = self.base_fds + FDS_PER_LIVE_TASK * live + 16;
        if fds > fd_bound {
            self.violation(
                "fds",
                format!(
                    "{fds} open fds in the host > {fd_bound} (baseline {} + {FDS_PER_LIVE_TASK} x \
                     {live} live tasks \
                     + 16); beyond the baseline: {}",
                    self.base_fds,
                    fd_diff(&self.base_fd_targets, &fd_targets(host))
                ),
            );
        }
        let threads = thread_count(host);
        if threads > self.base_threads + 16 {
            self.violation(
                "threads",
                format!(
                    "{threads} threads in the host > baseline {} + 16",
                    self.base_threads
                ),
            );
        }
    }

    // ----- the end of a case

    fn finish(mut self) {
        self.step_no += 1;
        self.current = "teardown".into();
        // Tasks that end on their own do, in time.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.drain_events();
            self.poll_tasks();
            let waiting: Vec<String> = self
                .tasks
                .iter()
                .filter(|t| !t.status.terminal() && !t.runs_until_killed() && !t.killed_by_us)
                .map(|t| {
                    format!(
                        "{} ({}: {:?}, started {:?} ago)",
                        t.id,
                        t.cmd_id,
                        t.bg,
                        t.started.elapsed()
                    )
                })
                .collect();
            if waiting.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                self.violation(
                    "forward-only",
                    format!("tasks that end on their own still run: {waiting:?}"),
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Kill the rest, and every task's end is reported exactly once.
        for i in 0..self.tasks.len() {
            if !self.tasks[i].status.terminal() {
                let id = self.tasks[i].id.clone();
                let out = self.driver.op(Op::Kill(id));
                self.settle(Pending::Kill(Some(i)), out, 0, 1);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.tasks.iter().any(|t| t.events == 0) {
            if Instant::now() > deadline {
                let missing: Vec<&str> = self
                    .tasks
                    .iter()
                    .filter(|t| t.events == 0)
                    .map(|t| t.id.as_str())
                    .collect();
                self.violation(
                    "forward-only",
                    format!("no task-done event for {missing:?}"),
                );
            }
            std::thread::sleep(Duration::from_millis(50));
            self.drain_events();
        }
        // One more call carries the last notice blocks; then reads after the end.
        self.health();
        self.poll_tasks();
        self.drain_events();
        for i in 0..self.tasks.len() {
            let out = self.driver.op(Op::Read(self.tasks[i].id.clone()));
            let Out::Read(result) = out else {
                self.violation("shape", format!("{out:?}"))
            };
            self.settle_read(i, result);
        }
        self.drain_events();
        for t in &self.tasks {
            if self.combo.via == Via::Mcp && t.blocks != 1 {
                self.violation(
                    "forward-only",
                    format!("{}: {} notice blocks, expected 1", t.id, t.blocks),
                );
            }
            let status = &t.status;
            if t.killed_by_us {
                let want = match &t.bg {
                    Some(Bg::Long { trap: false } | Bg::Escapees { linger: true, .. }) => {
                        Some("SIGTERM")
                    }
                    Some(Bg::Long { trap: true }) => Some("SIGKILL"),
                    _ => None,
                };
                let ok = match (status, want) {
                    (Status::Killed(signal), Some(want)) => signal.as_deref() == Some(want),
                    (Status::Killed(_), None) => true,
                    // Killed by us after it had finished on its own: kill answered false.
                    (_, _) => false,
                };
                if !ok {
                    self.violation(
                        "shape",
                        format!("{} was killed ({:?}) and ended {status:?}", t.id, t.bg),
                    );
                }
                continue;
            }
            let natural = t.natural_end();
            if t.bg.is_none() {
                // A start in a vanished workdir that reported a task: a spawn failure.
                if !matches!(status, Status::Killed(_)) || t.err.seen == 0 {
                    self.violation(
                        "shape",
                        format!(
                            "{}: a failed spawn ended {status:?} without `spawn failed`",
                            t.id
                        ),
                    );
                }
                continue;
            }
            if natural.as_ref() != Some(status) {
                self.violation(
                    "shape",
                    format!(
                        "{} ({:?}) ended {status:?}, expected {natural:?}",
                        t.id, t.bg
                    ),
                );
            }
            for (name, expected, track) in [
                ("stdout", &t.expected_out, &t.out),
                ("stderr", &t.expected_err, &t.err),
            ] {
                if let Some(expected) = expected
                    && let Err(e) = check_complete(expected, track)
                {
                    self.violation("output", format!("{} {name}: {e}", t.id));
                }
            }
        }
        self.check_deadlines(true);
        self.check_log();
        self.check_zombies();
        self.check_resources();
        // Shutdown kills what runs and waits; nothing the host started outlives it.
        let result = match &mut self.driver {
            Driver::Exec(d) => d.shutdown(),
            Driver::Mcp(d) => d.shutdown(),
        };
        if let Err(e) = result {
            self.violation("host-alive", e);
        }
        let all = std::mem::take(&mut self.all_pids);
        self.expect_dead(all, DEATH_SLACK);
        self.check_deadlines(true);
        if self.combo.via == Via::Executor {
            self.check_zombies();
        }
    }
}

impl Drop for Sut {
    fn drop(&mut self) {
        // After a violation: stop everything this case started, whatever state it is in.
        match &mut self.driver {
            Driver::Exec(d) => {
                let _ = d.shutdown();
            }
            Driver::Mcp(d) => {
                d.down = true;
                let _ = d.client.child.kill();
                let _ = d.client.child.wait();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Self-check: the checkers catch broken results (so that a passing run means something).

fn exited(code: i32, stdout: &str) -> Fg {
    Fg {
        exit_code: Some(code),
        timeout_ms: Some(f64::from(DEFAULT_TIMEOUT_MS)),
        stdout: StreamOut {
            text: stdout.into(),
            ..StreamOut::default()
        },
        ..Fg::default()
    }
}

#[test]
fn self_check_foreground_checker_catches_broken_results() {
    let echo = FgExpect::Exact {
        stdout: "m-c1\n".into(),
        stderr: String::new(),
        code: 0,
    };
    let ms = Some(DEFAULT_TIMEOUT_MS);
    assert_eq!(check_fg(&echo, &Ok(exited(0, "m-c1\n")), ms), Ok(()));
    // The cgroup bug of issue 9: every command killed at birth.
    let killed_at_birth = Fg {
        exit_code: None,
        signal: Some("SIGKILL".into()),
        ..exited(0, "")
    };
    assert!(check_fg(&echo, &Ok(killed_at_birth), ms).is_err());
    assert!(check_fg(&echo, &Ok(exited(0, "m-c1\nm-c1\n")), ms).is_err());
    assert!(check_fg(&echo, &Ok(exited(1, "m-c1\n")), ms).is_err());
    // A false leftover marker.
    let leftover = Fg {
        leftover: 1,
        ..exited(0, "m-c1\n")
    };
    assert!(check_fg(&echo, &Ok(leftover), ms).is_err());
    // Both an exit code and a signal; an error where a result is due.
    let both = Fg {
        signal: Some("SIGTERM".into()),
        ..exited(0, "m-c1\n")
    };
    assert!(check_fg(&echo, &Ok(both), ms).is_err());
    let spawner_gone = Failure {
        kind: ErrKind::SpawnFailed,
        text: "the command spawner went away".into(),
    };
    assert!(check_fg(&echo, &Err(spawner_gone), ms).is_err());
    // `kill -9 $PPID; <busy loop>; echo after` must not print `after`.
    let parent = FgExpect::Signal { signal: "SIGKILL" };
    let after = Fg {
        exit_code: None,
        signal: Some("SIGKILL".into()),
        ..exited(0, "after\n")
    };
    assert!(check_fg(&parent, &Ok(after), ms).is_err());
    // A timeout that reports an exit code, or comes too early.
    let timeout = FgExpect::TimedOut {
        ms: 300,
        signals: &["SIGKILL"],
        min_elapsed: Duration::from_millis(500),
        stdout_prefix_of: String::new(),
    };
    let good = Fg {
        exit_code: None,
        signal: Some("SIGKILL".into()),
        timed_out: true,
        timeout_ms: Some(300.0),
        elapsed: Duration::from_millis(600),
        ..Fg::default()
    };
    assert_eq!(check_fg(&timeout, &Ok(good.clone()), Some(300)), Ok(()));
    // Ended too soon, by the wrong signal, or not by a signal at all.
    for broken in [
        Fg {
            elapsed: Duration::from_millis(100),
            ..good.clone()
        },
        Fg {
            signal: Some("SIGTERM".into()),
            ..good.clone()
        },
        Fg {
            exit_code: Some(0),
            signal: None,
            ..good
        },
    ] {
        assert!(
            check_fg(&timeout, &Ok(broken.clone()), Some(300)).is_err(),
            "{broken:?}"
        );
    }
    // Escapee counts are exact.
    let esc = FgExpect::Escapees {
        count: 2,
        stdout: "done\n".into(),
    };
    assert_eq!(
        check_fg(
            &esc,
            &Ok(Fg {
                leftover: 2,
                ..exited(0, "done\n")
            }),
            ms
        ),
        Ok(())
    );
    assert!(
        check_fg(
            &esc,
            &Ok(Fg {
                leftover: 3,
                ..exited(0, "done\n")
            }),
            ms
        )
        .is_err()
    );
    // Big outputs: the tail byte-exact, and a capped spill file never presented as full.
    let big = FgExpect::Big {
        lines: 8000,
        streams: Streams::Stdout,
    };
    let full = seq_text(8000);
    let tail = Fg {
        stdout: StreamOut {
            text: full[full.len() - MAX_OUTPUT..].into(),
            truncated: true,
            spill: None,
        },
        ..exited(0, "")
    };
    assert_eq!(check_fg(&big, &Ok(tail.clone()), ms), Ok(()));
    let mut shifted = tail.clone();
    shifted.stdout.text = full[full.len() - MAX_OUTPUT - 1..full.len() - 1].into();
    assert!(check_fg(&big, &Ok(shifted), ms).is_err());
    let mut presented = tail;
    presented.stdout.spill = Some("/tmp/x".into());
    assert!(check_fg(&big, &Ok(presented), ms).is_err());
    // Errors of the wrong kind, or results where an error is due.
    let gone = FgExpect::Error {
        kind: ErrKind::WorkdirUnusable,
        names: Some("/tmp/gone-3".into()),
    };
    assert!(check_fg(&gone, &Ok(exited(0, "")), ms).is_err());
    let unnamed = Failure {
        kind: ErrKind::WorkdirUnusable,
        text: "workdir is not usable".into(),
    };
    assert!(check_fg(&gone, &Err(unnamed), ms).is_err());
}

#[test]
fn self_check_task_checkers_catch_broken_sequences() {
    // Statuses only move forward.
    assert_eq!(
        check_forward(&Status::Running, &Status::Completed(0)),
        Ok(())
    );
    assert_eq!(
        check_forward(
            &Status::Killed(None),
            &Status::Killed(Some("SIGTERM".into()))
        ),
        Ok(())
    );
    assert!(check_forward(&Status::Completed(0), &Status::Running).is_err());
    assert!(check_forward(&Status::Completed(0), &Status::Completed(1)).is_err());
    assert!(
        check_forward(
            &Status::Killed(Some("SIGKILL".into())),
            &Status::Completed(0)
        )
        .is_err()
    );
    assert!(
        check_forward(
            &Status::Killed(Some("SIGKILL".into())),
            &Status::Killed(Some("SIGTERM".into()))
        )
        .is_err()
    );
    let task = |state, exit_code, signal: Option<&str>| Task {
        id: "bash-1".into(),
        command: "x".into(),
        owner: None,
        state,
        exit_code,
        signal: signal.map(str::to_string),
        relocated: None,
    };
    let done = task(TaskState::Completed, Some(0), None);
    assert_eq!(
        check_raw(Some(&task(TaskState::Running, None, None)), &done),
        Ok(())
    );
    assert!(check_raw(Some(&done), &task(TaskState::Running, None, None)).is_err());
    assert!(check_raw(Some(&done), &task(TaskState::Completed, Some(1), None)).is_err());
    assert!(check_raw(None, &task(TaskState::Completed, None, None)).is_err());
    assert!(check_raw(None, &task(TaskState::Running, None, Some("SIGKILL"))).is_err());

    // Reads never repeat or lose bytes.
    let expected = seq_text(5);
    let mut track = Track::default();
    assert_eq!(advance(&expected, &mut track, "1\n2", false), Ok(()));
    assert_eq!(advance(&expected, &mut track, "\n3\n", false), Ok(()));
    assert!(advance(&expected, &mut track.clone(), "3\n", false).is_err()); // repeated
    assert!(advance(&expected, &mut track.clone(), "5\n", false).is_err()); // lost 4
    assert!(check_complete(&expected, &track).is_err());
    assert_eq!(advance(&expected, &mut track, "4\n5\n", false), Ok(()));
    assert_eq!(check_complete(&expected, &track), Ok(()));
    assert_eq!(advance(&expected, &mut track, "", false), Ok(()));
    assert!(advance(&expected, &mut track.clone(), "after\n", false).is_err()); // beyond the end
    let mut lossy = Track::default();
    assert_eq!(advance(&expected, &mut lossy, "4\n", true), Ok(()));
    assert!(advance(&expected, &mut lossy.clone(), "2\n", true).is_err()); // a window going back
    assert!(check_complete(&expected, &lossy).is_err());

    // Exactly once, and never after an error.
    let expect: BTreeMap<String, LogExpect> = [
        ("c1".to_string(), LogExpect::Once),
        ("c2".to_string(), LogExpect::Never),
    ]
    .into();
    assert_eq!(check_log(&parse_log("c1 10\n").unwrap(), &expect), Ok(()));
    assert!(check_log(&parse_log("c1 10\nc1 11\n").unwrap(), &expect).is_err());
    assert!(check_log(&parse_log("c1 10\nc2 12\n").unwrap(), &expect).is_err());
    assert!(check_log(&parse_log("").unwrap(), &expect).is_err());
    assert!(check_log(&parse_log("c1 10\nc9 13\n").unwrap(), &expect).is_err());
    assert!(parse_log("c1\n").is_err());
}

#[test]
fn self_check_mcp_texts_parse_back_into_facts() {
    let fg = parse_fg("(no output)\n[timed out after 300ms]\n[killed by signal: SIGKILL]").unwrap();
    assert_eq!(
        (
            fg.timed_out,
            fg.timeout_ms,
            fg.signal.as_deref(),
            fg.exit_code,
            fg.stdout.text.as_str()
        ),
        (true, Some(300.0), Some("SIGKILL"), None, "")
    );
    let fg = parse_fg("out-c1\n[stderr]\nerr-c1\n[exit code: 3]").unwrap();
    assert_eq!(
        (
            fg.stdout.text.as_str(),
            fg.stderr.text.as_str(),
            fg.exit_code
        ),
        ("out-c1\n", "err-c1\n", Some(3))
    );
    let fg = parse_fg(
        "done\n[stopped 2 leftover background process(es); use run_in_background for long-lived processes]",
    )
    .unwrap();
    assert_eq!(
        (fg.stdout.text.as_str(), fg.leftover, fg.exit_code),
        ("done\n", 2, Some(0))
    );
    let fg = parse_fg("7\n8\n[output truncated; full output: /s/o.log]\n[stderr]\n9\n[output truncated; full output: (unavailable)]").unwrap();
    assert_eq!(
        fg.stdout,
        StreamOut {
            text: "7\n8".into(),
            truncated: true,
            spill: Some("/s/o.log".into())
        }
    );
    assert_eq!(
        fg.stderr,
        StreamOut {
            text: "9".into(),
            truncated: true,
            spill: None
        }
    );
    assert_eq!(parse_fg("hi\n").unwrap().stdout.text, "hi\n");
    assert!(parse_fg("").is_err());

    let read = parse_read("1\n2\n\n[status: running]").unwrap();
    assert_eq!(
        (read.stdout.as_str(), read.status),
        ("1\n2\n", Status::Running)
    );
    let read = parse_read("(no new output)\n[status: killed by SIGTERM]").unwrap();
    assert_eq!(
        (read.stdout.as_str(), read.status),
        ("", Status::Killed(Some("SIGTERM".into())))
    );
    let read = parse_read("9\n[some output was dropped from memory; full output: /s/x-stdout.log]\n[status: completed, exit code: 0]").unwrap();
    assert_eq!(
        (read.lossy_out, read.spill_out.as_deref(), read.status),
        (true, Some("/s/x-stdout.log"), Status::Completed(0))
    );
    assert!(parse_read("[status: sleeping]").is_err());
    assert_eq!(
        parse_notice(
            "background bash task bash-2 finished [status: killed]. Read its output with bash_output."
        ),
        Some(("bash-2".to_string(), Status::Killed(None)))
    );
    assert_eq!(
        classify("Error: unknown bash task \"bash-9\"").kind,
        ErrKind::UnknownTask
    );
}
