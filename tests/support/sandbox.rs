//! Running `dsh-host call` under a sandbox, as root or as an unprivileged user, in a scratch
//! workspace with a HOME of its own that holds planted secrets.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged user the tests run as (`nobody` on Debian).
pub const NOBODY: u32 = 65534;

/// Who runs the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    Root,
    /// Through `setpriv --reuid --regid --clear-groups`.
    Nobody,
}

impl User {
    pub const ALL: [User; 2] = [User::Root, User::Nobody];

    pub fn uid(self) -> u32 {
        match self {
            User::Root => 0,
            User::Nobody => NOBODY,
        }
    }
}

/// The sandbox tiers (`--sandbox-tier`).
pub const TIERS: [&str; 2] = ["namespaces", "landlock"];

/// A scratch world: `home` (with `~/.ssh/id_ed25519` planted), `work` (the workspace, `--cwd`)
/// and `outside` (a directory no sandbox may write), all owned by `user`.
pub struct World {
    _dir: tempfile::TempDir,
    pub user: User,
    pub home: PathBuf,
    pub work: PathBuf,
    pub outside: PathBuf,
    cache: PathBuf,
}

pub const SECRET: &str = "PLANTED-PRIVATE-KEY";

/// The variables that name a proxy for the host itself.
pub const PROXY_VARIABLES: [&str; 8] = [
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

impl World {
    pub fn new(user: User) -> World {
        // Never under /tmp, which a workspace-write sandbox makes writable (so "outside" would
        // not be): the target dir's temporary area, or /var/tmp for a checkout under /tmp.
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let base = if target.starts_with("/tmp") {
            PathBuf::from("/var/tmp/dsh-sandbox-test-worlds")
        } else {
            target.join("sandbox-worlds")
        };
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tempfile::tempdir_in(&base).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        let outside = dir.path().join("outside");
        let cache = dir.path().join("cache");
        for d in [&home, &work, &outside, &cache, &home.join(".ssh")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".ssh/id_ed25519"), SECRET).unwrap();
        std::fs::write(outside.join("keep.txt"), "original\n").unwrap();
        // The shared compiled-component cache, copied so that each world starts warm.
        let shared = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
        if let Ok(entries) = std::fs::read_dir(&shared) {
            for entry in entries.flatten() {
                let _ = std::fs::copy(entry.path(), cache.join(entry.file_name()));
            }
        }
        let uid = user.uid();
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{uid}"))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "chown of the scratch world");
        World {
            _dir: dir,
            user,
            home,
            work,
            outside,
            cache,
        }
    }

    /// `dsh-host` with this world's HOME, cache and workspace, as its user.
    pub fn host(&self, args: &[&str]) -> Command {
        let exe = env!("CARGO_BIN_EXE_dsh-host");
        let mut cmd = match self.user {
            User::Root => Command::new(exe),
            User::Nobody => {
                let meta = std::fs::metadata(exe).unwrap();
                assert!(
                    meta.mode() & 0o001 != 0,
                    "{exe} must be executable by others for the unprivileged tests"
                );
                let mut cmd = Command::new("setpriv");
                cmd.args([
                    format!("--reuid={NOBODY}"),
                    format!("--regid={NOBODY}"),
                    "--clear-groups".to_string(),
                    exe.to_string(),
                ]);
                cmd
            }
        };
        cmd.args(args)
            .arg("--cwd")
            .arg(&self.work)
            .current_dir(&self.work)
            .env("HOME", &self.home)
            // No git a command runs finds a repository above the scratch world (the checkout's).
            .env(
                "GIT_CEILING_DIRECTORIES",
                self.work.parent().expect("the world's directory"),
            )
            .env("DSH_CACHE_DIR", &self.cache)
            .env_remove("DSH_LOG")
            .env_remove("XDG_CACHE_HOME");
        // The proxies of the test's environment, which the sandbox proxy would go through.
        for name in PROXY_VARIABLES {
            cmd.env_remove(name);
        }
        cmd
    }

    /// One `bash` call with `flags`; the result text and whether it was an error.
    pub fn call(&self, flags: &[&str], command: &str) -> Called {
        self.call_with(flags, command, serde_json::json!({}))
    }
}

impl World {
    /// [`World::call`] with more tool arguments (`workdir`, say) merged into the call's.
    pub fn call_with(&self, flags: &[&str], command: &str, extra: serde_json::Value) -> Called {
        let mut args = serde_json::json!({"command": command, "description": "sandbox test"});
        if let (Some(args), Some(extra)) = (args.as_object_mut(), extra.as_object()) {
            args.extend(extra.clone());
        }
        let args = args.to_string();
        let mut all = vec!["call", "bash", &args];
        all.extend_from_slice(flags);
        let out = self.host(&all).output().expect("dsh-host runs");
        Called {
            text: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
        }
    }
}

/// What a call printed.
#[derive(Debug)]
pub struct Called {
    pub text: String,
    pub stderr: String,
    pub code: Option<i32>,
}

impl Called {
    /// The call ran (exit status 0 or 1 with a result), else a panic naming the host's error.
    pub fn ran(self) -> Called {
        assert!(self.code == Some(0), "the call did not run: {self:?}");
        self
    }
}

/// The flags of one sandbox mode in one tier.
pub fn flags<'a>(mode: &'a str, tier: &'a str) -> Vec<&'a str> {
    vec!["--sandbox", mode, "--sandbox-tier", tier]
}

/// Whether `path` still holds `text`.
pub fn holds(path: &Path, text: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t == text)
}

/// Every attack that got through, reported together at the end of a test.
#[derive(Default)]
pub struct Findings(Vec<String>);

impl Findings {
    pub fn check(&mut self, held: bool, who: &str, attack: &str, called: &Called) {
        if !held {
            self.0.push(format!(
                "[{who}] {attack}\n    result: {}\n    host stderr: {}",
                called.text.trim_end().replace('\n', "\n            "),
                called.stderr.trim_end()
            ));
        }
    }

    pub fn done(self) {
        assert!(
            self.0.is_empty(),
            "{} attack(s) got through:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// `dsh-host mcp` on stdio, initialized.
pub struct Mcp {
    pub child: std::process::Child,
    pub stdin: Option<std::process::ChildStdin>,
    lines: std::io::BufReader<std::process::ChildStdout>,
    id: u64,
}

impl Mcp {
    pub fn start(world: &World, args: &[&str]) -> Mcp {
        let mut all = vec!["mcp"];
        all.extend_from_slice(args);
        Mcp::from_command(world.host(&all))
    }

    /// The server `command` (`dsh-host mcp …`) starts.
    pub fn from_command(mut command: Command) -> Mcp {
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            child,
            stdin: Some(stdin),
            lines,
            id: 0,
        };
        mcp.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}),
        );
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        writeln!(mcp.stdin.as_ref().unwrap(), "{note}").unwrap();
        mcp
    }

    pub fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.id += 1;
        let msg = serde_json::json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.stdin.as_ref().unwrap(), "{msg}").unwrap();
        loop {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut self.lines, &mut line).unwrap();
            assert!(!line.is_empty(), "the server ended");
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            if value["id"] == self.id {
                return value;
            }
        }
    }

    /// One tool call's text.
    pub fn tool(&mut self, name: &str, arguments: serde_json::Value) -> String {
        let out = self.request(
            "tools/call",
            serde_json::json!({"name": name, "arguments": arguments}),
        );
        out["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn bash(&mut self, command: &str) -> String {
        self.tool(
            "bash",
            serde_json::json!({"command": command, "description": "x"}),
        )
    }
}

impl Drop for Mcp {
    /// Ends the server as a client does, by closing its stdin: a clean shutdown.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A world whose component cache is warm: compiling it in every world would cost seconds each.
pub fn world(user: User) -> World {
    static WARM: std::sync::Once = std::sync::Once::new();
    WARM.call_once(|| {
        let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
        std::fs::create_dir_all(&cache).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
            .args(["call", "bash", r#"{"command":"true","description":"warm"}"#])
            .env("DSH_CACHE_DIR", &cache)
            .env_remove("DSH_LOG")
            .output()
            .unwrap();
        assert!(out.status.success(), "warming the cache: {out:?}");
    });
    World::new(user)
}

/// Starts `argv` as the user `argv[1]` in a user namespace that may hold no further user
/// namespace (`max_user_namespaces` 0); unprivileged there, it can make no mount or network
/// namespace either. The parent writes the child's maps (only a process outside may map more
/// than its own user).
pub const WITHOUT_NAMESPACES: &str = r#"
import ctypes, os, sys
uid = int(sys.argv[1]); argv = sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0: os._exit(90)
    os.write(w, b"x"); os.read(r2, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as f: f.write("0")
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
    os.execvp(argv[0], argv)
os.read(r, 1)
for m in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{m}", "w") as f: f.write(f"0 0 1\n{uid} {uid} 1\n")
os.write(w2, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// `dsh-host args` as the world's user where namespaces are unavailable for real.
pub fn without_namespaces(world: &World, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(WITHOUT_NAMESPACES)
        .arg(world.user.uid().to_string())
        .arg(env!("CARGO_BIN_EXE_dsh-host"))
        .args(args)
        .arg("--cwd")
        .arg(&world.work)
        .current_dir(&world.work);
    with_env_of(&mut cmd, &world.host(args));
    cmd.output().unwrap()
}

/// Gives `cmd` the environment `template` sets (the world's HOME, cache, ...).
pub fn with_env_of(cmd: &mut Command, template: &Command) {
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
}

/// `direct` run through `prefix` (a program and its arguments, which end by running the rest):
/// same arguments, environment and directory.
pub fn wrapped<S: AsRef<std::ffi::OsStr>>(prefix: &[S], direct: &Command) -> Command {
    let mut cmd = Command::new(prefix[0].as_ref());
    cmd.args(&prefix[1..])
        .arg(direct.get_program())
        .args(direct.get_args());
    with_env_of(&mut cmd, direct);
    if let Some(dir) = direct.get_current_dir() {
        cmd.current_dir(dir);
    }
    cmd
}

/// `direct` run in namespaces of its own (`unshare` with `flags`, every mount private there)
/// through `program` (a program and its arguments, which end by running the rest).
pub fn unshared(flags: &[&str], program: &[&std::ffi::OsStr], direct: &Command) -> Command {
    use std::ffi::OsStr;
    let mut prefix = vec![OsStr::new("unshare")];
    prefix.extend(flags.iter().map(OsStr::new));
    prefix.extend([OsStr::new("--propagation"), OsStr::new("private")]);
    prefix.extend_from_slice(program);
    wrapped(&prefix, direct)
}
