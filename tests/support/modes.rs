//! The two containment modes the executor tests run each scenario in, and whether cgroup mode
//! can run on this machine (checked independently of the executor).
//!
//! Shared through `#[path]`, with `#[macro_use]` for `both_modes!`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use dsh_executor::{Config, Containment, ContainmentPreference, LocalExecutor, Task};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Where this variable is `1` (`.ci/run` sets it), cgroups must be available: a cgroup-mode test
/// fails instead of skipping.
pub const REQUIRE_CGROUPS_ENV: &str = "DSH_REQUIRE_CGROUPS";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A cgroup v2 per command (`Auto`, on a machine where cgroups can be created).
    Cgroup,
    /// Subreaper tracking only (forced).
    Subreaper,
}

impl Mode {
    pub fn preference(self) -> ContainmentPreference {
        match self {
            Mode::Cgroup => ContainmentPreference::Auto,
            Mode::Subreaper => ContainmentPreference::Subreaper,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Cgroup => "cgroup",
            Mode::Subreaper => "subreaper",
        }
    }

    pub fn from_name(value: &str) -> Mode {
        match value {
            "cgroup" => Mode::Cgroup,
            "subreaper" => Mode::Subreaper,
            other => panic!("unknown mode {other:?}"),
        }
    }

    /// Whether a test in this mode cannot run here, so that it returns early: cgroup mode on a
    /// machine where this process may create no cgroup v2. Says so on stderr; panics instead
    /// where `DSH_REQUIRE_CGROUPS=1` demands cgroups.
    pub fn unavailable(self) -> bool {
        if self == Mode::Subreaper {
            return false;
        }
        let Err(why) = cgroups_available() else {
            return false;
        };
        if std::env::var_os(REQUIRE_CGROUPS_ENV).is_some_and(|v| v == "1") {
            panic!(
                "{REQUIRE_CGROUPS_ENV}=1 but no cgroup v2 can be created here ({why}): \
                 cgroup-mode tests may not be skipped on this machine"
            );
        }
        eprintln!("NOTICE: no cgroup v2 can be created here; skipping a cgroup-mode test ({why})");
        true
    }
}

/// An executor built from `config` in `mode` (its containment set here, and checked to be the
/// one the executor reports), with its task-done events.
pub fn executor_in(mode: Mode, config: Config) -> (Arc<LocalExecutor>, UnboundedReceiver<Task>) {
    let (tx, events) = unbounded_channel();
    let config = Config {
        containment: mode.preference(),
        ..config
    };
    let exec = LocalExecutor::new(config, tx).expect("valid config");
    match (mode, exec.containment()) {
        (Mode::Cgroup, Containment::Cgroup { .. })
        | (Mode::Subreaper, Containment::Subreaper { .. }) => {}
        (mode, other) => panic!("{mode:?} mode expected, got {other} ({other:?})"),
    }
    (exec, events)
}

/// Runs `$scenario(mode)` as two tests, `$scenario::cgroup` and `$scenario::subreaper`
/// (`sync:` for scenarios that are plain functions).
macro_rules! both_modes {
    (sync: $($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn cgroup() {
                super::$scenario(super::Mode::Cgroup)
            }
            #[test]
            fn subreaper() {
                super::$scenario(super::Mode::Subreaper)
            }
        }
    )*};
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cgroup() {
                super::$scenario(super::Mode::Cgroup).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn subreaper() {
                super::$scenario(super::Mode::Subreaper).await
            }
        }
    )*};
}

/// The test process's own cgroup v2: its directory and its path as `/proc/self/cgroup` shows it.
pub fn own_cgroup_dir() -> Option<(PathBuf, String)> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split_whitespace().collect();
        (right.starts_with("cgroup2 ") && fields[3] == "/").then(|| PathBuf::from(fields[4]))
    })?;
    Some((mount.join(own.trim_start_matches('/')), own))
}

/// Whether this process may create a cgroup v2 with `cgroup.kill` under its own cgroup, or why
/// not. When it may, the executor must use cgroups in `Auto` mode; when it may not, the
/// cgroup-mode tests do not apply.
pub fn cgroups_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE
        .get_or_init(|| {
            let (dir, _) = own_cgroup_dir().ok_or(
                "no cgroup v2 hierarchy holds this process (/proc/self/cgroup, mountinfo)",
            )?;
            let probe = dir.join(format!("dsh-containment-test-{}", std::process::id()));
            let result = match std::fs::create_dir(&probe) {
                Err(e) => Err(format!("cannot create {}: {e}", probe.display())),
                Ok(()) if !probe.join("cgroup.kill").exists() => {
                    Err(format!("{} has no cgroup.kill", probe.display()))
                }
                Ok(()) => Ok(()),
            };
            let _ = std::fs::remove_dir(&probe);
            result
        })
        .clone()
}
