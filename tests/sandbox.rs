//! The sandbox, black-box through `dsh-host call`.

#[path = "support/sandbox.rs"]
mod sandbox;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox::{
    Mcp, SECRET, TIERS, User, World, flags, holds, unshared, without_namespaces, wrapped,
};

const MODES: [&str; 2] = ["read-only", "workspace-write"];

/// The result's `[sandbox: …]` line: its last, when there is one.
fn sandbox_line(text: &str) -> Option<&str> {
    text.lines()
        .last()
        .filter(|l| l.starts_with("[sandbox: ") && l.ends_with(']'))
}

/// Asserts that `text` ends with a sandbox line naming `denial`.
#[track_caller]
fn reported(text: &str, denial: &str) {
    let line = sandbox_line(text).unwrap_or_else(|| panic!("no sandbox line: {text}"));
    assert!(line.contains(denial), "{denial:?} not in {line:?}: {text}");
}

fn real(path: &std::path::Path) -> String {
    std::fs::canonicalize(path).unwrap().display().to_string()
}

/// Every (user, mode, tier) combination.
fn each(mut case: impl FnMut(User, &str, &str)) {
    for user in User::ALL {
        for mode in MODES {
            for tier in TIERS {
                case(user, mode, tier);
            }
        }
    }
}

#[test]
fn writes_outside_the_roots_fail_and_inside_work() {
    each(|user, mode, tier| {
        let world = World::new(user);
        let keep = world.outside.join("keep.txt");
        let made = world.work.join("made.txt");
        let command = format!(
            "echo changed > '{}'; echo made > '{}'; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
             echo dev > /dev/null && echo devnull-ok",
            keep.display(),
            made.display()
        );
        let out = world.call(&flags(mode, tier), &command).ran();
        let case = format!("{user:?} {mode} {tier}: {}", out.text);
        assert!(holds(&keep, "original\n"), "{case}");
        // EACCES from Landlock, or EROFS where the namespace tier made the filesystem read-only.
        assert!(
            out.text
                .contains(&format!("{}: Permission denied", keep.display()))
                || out
                    .text
                    .contains(&format!("{}: Read-only file system", keep.display())),
            "{case}"
        );
        assert!(
            out.text.contains("t\ndevnull-ok\n"),
            "TMPDIR and /dev/null: {case}"
        );
        reported(
            &out.text,
            &format!(
                "write to {} denied (outside the writable roots)",
                real(&keep)
            ),
        );
        match mode {
            "workspace-write" => assert!(holds(&made, "made\n"), "{case}"),
            _ => assert!(!made.exists(), "{case}"),
        }
        // The same command unsandboxed changes the file: the check above can fail.
        if mode == "read-only" && tier == "namespaces" {
            world.call(&[], &command).ran();
            assert!(holds(&keep, "changed\n"), "{user:?} unsandboxed");
        }
    });
}

#[test]
fn a_planted_secret_is_unreadable_with_eacces() {
    each(|user, mode, tier| {
        let world = World::new(user);
        let out = world
            .call(
                &flags(mode, tier),
                "cat ~/.ssh/id_ed25519; python3 -c 'open(\"'$HOME'/.ssh/id_ed25519\").read()' 2>&1 \
                 | tail -1; cat /etc/hostname >/dev/null && echo other-reads-ok",
            )
            .ran();
        let case = format!("{user:?} {mode} {tier}: {}", out.text);
        assert!(!out.text.contains(SECRET), "{case}");
        assert!(
            out.text.contains("id_ed25519: Permission denied"),
            "EACCES, not a masked error: {case}"
        );
        assert!(out.text.contains("PermissionError"), "{case}");
        assert!(out.text.contains("other-reads-ok"), "{case}");
        reported(
            &out.text,
            &format!(
                "read of {}/.ssh/id_ed25519 denied (a denied path)",
                real(&world.home)
            ),
        );
    });
    // Unsandboxed, the planted key is read: the test can fail.
    let world = World::new(User::Nobody);
    assert!(
        world
            .call(&[], "cat ~/.ssh/id_ed25519")
            .ran()
            .text
            .contains(SECRET)
    );
}

#[test]
fn an_extra_denied_path_is_unreadable() {
    for tier in TIERS {
        let world = World::new(User::Root);
        let file = world.outside.join("keep.txt");
        let path = file.display().to_string();
        let mut f = flags("read-only", tier);
        f.extend(["--sandbox-deny-read", &path]);
        let out = world.call(&f, &format!("cat '{path}'")).ran();
        assert!(
            out.text.contains("Permission denied"),
            "{tier}: {}",
            out.text
        );
        assert!(!out.text.contains("original"), "{tier}: {}", out.text);
        let out = world
            .call(&flags("read-only", tier), &format!("cat '{path}'"))
            .ran();
        assert!(out.text.contains("original"), "{tier}: {}", out.text);
    }
}

/// A workspace holding a repository with one commit and a sample hook.
fn repository(world: &World) {
    let git = |args: &str| {
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "git -c safe.directory='*' -c user.email=t@t -c user.name=t {args} >/dev/null && chown -R {u}:{u} .",
                u = world.user.uid()
            ))
            .current_dir(&world.work)
            .status()
            .unwrap();
        assert!(status.success(), "git {args}");
    };
    git("init -q .");
    std::fs::write(world.work.join(".gitmodules"), "").unwrap();
    git("add .gitmodules");
    git("commit -qm first");
}

#[test]
fn git_hooks_and_config_stay_protected_while_a_commit_works() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            repository(&world);
            let hook = world.work.join(".git/hooks/pre-commit");
            let config = world.work.join(".git/config");
            let config_before = std::fs::read_to_string(&config).unwrap();
            let out = world
                .call(
                    &flags("workspace-write", tier),
                    "printf '#!/bin/sh\\ntrue\\n' > .git/hooks/pre-commit; \
                     chmod +x .git/hooks/pre-commit; echo '[core]' >> .git/config; \
                     echo '[submodule]' >> .gitmodules; \
                     echo work > file.txt && git add file.txt && \
                     git -c user.email=t@t -c user.name=t commit -qm second && echo committed; \
                     git log --oneline | wc -l",
                )
                .ran();
            let case = format!("{user:?} {tier}: {}", out.text);
            assert!(out.text.contains("committed\n2\n"), "{case}");
            assert!(!hook.exists(), "{case}");
            assert_eq!(
                std::fs::read_to_string(&config).unwrap(),
                config_before,
                "{case}"
            );
            assert_eq!(
                std::fs::read_to_string(world.work.join(".gitmodules")).unwrap(),
                "",
                "{case}"
            );
            if tier == "namespaces" {
                // Bound read-only: the write itself fails.
                assert!(out.text.contains("Read-only file system"), "{case}");
                reported(
                    &out.text,
                    &format!(
                        "write to {}/.git/hooks/pre-commit denied (a protected git path)",
                        real(&world.work)
                    ),
                );
            } else {
                // Written, and put back after the command.
                reported(&out.text, "undone (a protected git path)");
            }
        }
    }
    // Unsandboxed, the hook is written: the checks above can fail.
    let world = World::new(User::Root);
    repository(&world);
    world.call(&[], "echo x > .git/hooks/pre-commit").ran();
    assert!(world.work.join(".git/hooks/pre-commit").exists());
}

#[test]
fn git_init_add_commit_works_in_a_fresh_workspace() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            let out = world
                .call(
                    &flags("workspace-write", tier),
                    "git init -q . && echo a > a && git add a && \
                     git -c user.email=t@t -c user.name=t commit -qm one && git log --oneline | wc -l",
                )
                .ran();
            assert!(out.text.starts_with("1\n"), "{user:?} {tier}: {}", out.text);
        }
    }
}

#[test]
fn a_workdir_symlink_to_etc_does_not_widen_writes() {
    for tier in TIERS {
        let world = World::new(User::Root);
        std::os::unix::fs::symlink("/etc", world.work.join("etc-link")).unwrap();
        std::os::unix::fs::symlink(&world.outside, world.work.join("out-link")).unwrap();
        let out = world
            .call(
                &flags("workspace-write", tier),
                "echo x > etc-link/dsh-sandbox-probe; echo x > out-link/keep.txt; \
                 cd etc-link && echo x > dsh-sandbox-probe2",
            )
            .ran();
        let case = format!("{tier}: {}", out.text);
        assert!(
            !std::path::Path::new("/etc/dsh-sandbox-probe").exists(),
            "{case}"
        );
        assert!(
            !std::path::Path::new("/etc/dsh-sandbox-probe2").exists(),
            "{case}"
        );
        assert!(
            holds(&world.outside.join("keep.txt"), "original\n"),
            "{case}"
        );
        let denied = out.text.matches("Permission denied").count()
            + out.text.matches("Read-only file system").count();
        assert_eq!(denied, 3, "{case}");
        reported(
            &out.text,
            "write to /etc/dsh-sandbox-probe denied (outside the writable roots)",
        );
    }
}

const CONNECT: &str = "python3 -c 'import socket; socket.create_connection((\"127.0.0.2\", 9), timeout=2)' 2>&1 | tail -1";

#[test]
fn network_off_refuses_every_connection() {
    // A listener of the test's own: nothing may reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    each(|user, mode, tier| {
        let world = World::new(user);
        let command = format!(
            "{CONNECT}; python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), \
             timeout=2)' 2>&1 | tail -1"
        );
        let out = world.call(&flags(mode, tier), &command).ran();
        assert_eq!(
            out.text
                .matches("PermissionError: [Errno 13] Permission denied")
                .count(),
            2,
            "{user:?} {mode} {tier}: {}",
            out.text
        );
        reported(&out.text, "AF_INET socket denied (the network is off)");
    });
    assert!(listener.accept().is_err(), "a sandboxed command connected");
    // With the network on, the connection arrives: the test can fail.
    let world = World::new(User::Nobody);
    let mut f = flags("read-only", "landlock");
    f.extend(["--sandbox-network", "on"]);
    world
        .call(
            &f,
            &format!(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
            ),
        )
        .ran();
    let deadline = Instant::now() + Duration::from_secs(5);
    while listener.accept().is_err() {
        assert!(
            Instant::now() < deadline,
            "no connection with the network on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn loopback_lets_a_command_reach_its_own_server_only() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let host_port = listener.local_addr().unwrap().port();
    for user in User::ALL {
        let world = World::new(user);
        let mut f = flags("workspace-write", "namespaces");
        f.extend(["--sandbox-network", "loopback"]);
        let out = world
            .call(
                &f,
                &format!(
                    "python3 -m http.server 18123 --bind 127.0.0.1 >/dev/null 2>&1 & \
                     for i in $(seq 50); do python3 -c 'import socket; \
                     socket.create_connection((\"127.0.0.1\", 18123))' 2>/dev/null && break; \
                     sleep 0.1; done; python3 -c 'import urllib.request; \
                     print(urllib.request.urlopen(\"http://127.0.0.1:18123/\").status)'; \
                     python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", \
                     {host_port}), timeout=2)' 2>&1 | tail -1; \
                     python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 9), \
                     timeout=2)' 2>&1 | tail -1; kill %1"
                ),
            )
            .ran();
        let case = format!("{user:?}: {}", out.text);
        assert!(out.text.starts_with("200\n"), "{case}");
        assert!(
            out.text.contains("ConnectionRefusedError"),
            "the host's port: {case}"
        );
        assert!(out.text.contains("Network is unreachable"), "{case}");
        // Only the address beyond loopback is named.
        assert_eq!(
            sandbox_line(&out.text),
            Some("[sandbox: connect to 192.0.2.1:9 denied (only loopback is reachable)]"),
            "{case}"
        );
    }
    assert!(
        listener.accept().is_err(),
        "a loopback-sandboxed command reached the host"
    );
}

#[test]
fn no_line_or_change_for_commands_that_only_mention_a_denial() {
    for tier in TIERS {
        let world = World::new(User::Nobody);
        let out = world
            .call(
                &flags("workspace-write", tier),
                "echo 'Permission denied: sandbox'; mkdir locked && chmod 000 locked && ls locked; exit 1",
            )
            .ran();
        assert_eq!(
            out.text,
            "Permission denied: sandbox\n[stderr]\nls: cannot open directory 'locked': Permission \
             denied\n[exit code: 1]\n",
            "{tier}"
        );
    }
}

#[test]
fn timeouts_and_escapees_still_take_the_whole_tree() {
    for tier in TIERS {
        let world = World::new(User::Root);
        let marker = format!("dsh-sbx-{}-{tier}", std::process::id());
        let args = serde_json::json!({
            "command": format!(
                "setsid sh -c 'exec -a {marker}-a sleep 300' & (sh -c 'exec -a {marker}-b sleep 300' &) ; sleep 300"
            ),
            "description": "escapees",
            "timeoutMs": 1500,
        })
        .to_string();
        let mut all = vec!["call", "bash", &args];
        let f = flags("workspace-write", tier);
        all.extend_from_slice(&f);
        let out = world.host(&all).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("timed out"), "{tier}: {text}");
        let left = Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "{tier}: left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}

#[test]
fn a_sandboxed_command_cannot_poison_the_next() {
    for tier in TIERS {
        let world = World::new(User::Root);
        let mut mcp = Mcp::start(
            &world,
            &["--sandbox", "workspace-write", "--sandbox-tier", tier],
        );
        // The first command tries to leave something for the next: a file in its TMPDIR, its
        // parent stopped, the parent's limits and nice value.
        mcp.bash(
            "echo left > \"$TMPDIR/left\"; echo \"$TMPDIR\" > tmpdir.txt; kill -STOP $PPID; \
             prlimit --pid $PPID --nofile=5:5; renice -n 10 -p $PPID",
        );
        let first_tmp = std::fs::read_to_string(world.work.join("tmpdir.txt")).unwrap();
        let next = mcp.bash("echo \"$TMPDIR\"; ls -A \"$TMPDIR\"; ulimit -n; nice");
        let case = format!("{tier}: {next}");
        assert_ne!(next.lines().next().unwrap(), first_tmp.trim(), "{case}");
        // Removed by its helper right after the command's end was reported.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::path::Path::new(first_tmp.trim()).exists() {
            assert!(
                Instant::now() < deadline,
                "the first TMPDIR is left: {case}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut lines = next.lines().skip(1);
        assert_ne!(lines.next(), Some("5"), "{case}");
        assert_eq!(lines.next(), Some("0"), "{case}");
    }
}

#[test]
fn without_namespaces_loopback_and_the_namespace_tier_refuse_and_off_still_runs() {
    let world = World::new(User::Nobody);
    let call = serde_json::json!({"command": "echo ran", "description": "x"}).to_string();
    let refused = |args: &[&str], needle: &str| {
        let mut all = vec!["call", "bash", &call];
        all.extend_from_slice(args);
        let out = without_namespaces(&world, &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing ran");
    };
    refused(
        &[
            "--sandbox",
            "workspace-write",
            "--sandbox-network",
            "loopback",
        ],
        "--sandbox-network loopback needs a network namespace per command, and namespaces are \
         unavailable: unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET): No space left on device \
         (os error 28) (--sandbox-network off or on works without)",
    );
    refused(
        &["--sandbox", "read-only", "--sandbox-tier", "namespaces"],
        "--sandbox-tier namespaces needs user, mount and network namespaces",
    );
    // Auto falls back to the Landlock tier, and says so.
    let out = without_namespaces(&world, &["doctor", "--sandbox", "workspace-write"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sandbox tier: landlock"), "{text}");
    for args in [&["--sandbox", "off"][..], &["--sandbox", "workspace-write"]] {
        let mut all = vec!["call", "bash", &call];
        all.extend_from_slice(args);
        let out = without_namespaces(&world, &all);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n", "{args:?}");
    }
    // Outside that namespace, the same loopback request starts: the refusal above is the
    // machine's, not the flags'.
    let mut f = flags("workspace-write", "auto");
    f.extend(["--sandbox-network", "loopback"]);
    assert_eq!(world.call(&f, "echo ran").ran().text, "ran\n");
}

#[test]
fn bad_sandbox_flags_are_clear_errors() {
    let world = World::new(User::Root);
    for (args, needle) in [
        (
            &["--sandbox", "read-only", "--sandbox-allow-write", "/tmp"][..],
            "--sandbox-allow-write /tmp needs --sandbox workspace-write",
        ),
        (
            &[
                "--sandbox",
                "workspace-write",
                "--sandbox-allow-write",
                "/no/such/dir",
            ],
            "--sandbox-allow-write /no/such/dir: No such file or directory",
        ),
        (
            &["--sandbox", "read-only", "--sandbox-deny-read", "relative"],
            "--sandbox-deny-read relative: expected an absolute path",
        ),
        (
            &["--sandbox", "sideways"],
            "invalid value 'sideways' for '--sandbox <SANDBOX>'",
        ),
    ] {
        let call = serde_json::json!({"command": "echo ran", "description": "x"}).to_string();
        let mut all = vec!["call", "bash", &call];
        all.extend_from_slice(args);
        // Temporary bases already there: left by hosts that were killed (no clean-up), whose
        // pid this host may now have.
        let bases = || -> std::collections::BTreeSet<std::ffi::OsString> {
            std::fs::read_dir("/var/tmp/dsh-sandbox-0")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name())
                .collect()
        };
        let before = bases();
        let child = world
            .host(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // A refusal leaves nothing behind: no temporary base of that host.
        let left: Vec<_> = bases()
            .difference(&before)
            .filter(|name| name.to_string_lossy().starts_with(&format!("{pid}-")))
            .cloned()
            .collect();
        assert!(left.is_empty(), "{args:?}: {left:?}");
    }
}

#[test]
fn doctor_shows_mode_tier_roots_denied_reads_and_network() {
    let world = World::new(User::Root);
    let out = world
        .host(&[
            "doctor",
            "--sandbox",
            "workspace-write",
            "--sandbox-network",
            "loopback",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let work = std::fs::canonicalize(&world.work).unwrap();
    for needle in [
        "sandbox: workspace-write\n".to_string(),
        "sandbox tier: namespaces".to_string(),
        format!("  {}\n  /tmp\n", work.display()),
        format!("  {}/.ssh\n", world.home.display()),
        "sandbox network: loopback\n".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle:?} in {text}");
    }
    let out = world.host(&["doctor"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("sandbox: off"));
}

#[test]
fn a_sandboxed_command_cannot_kill_the_host_by_pid() {
    for tier in TIERS {
        let world = World::new(User::Nobody);
        let mut mcp = Mcp::start(&world, &["--sandbox", "read-only", "--sandbox-tier", tier]);
        let host = mcp.child.id();
        // The host found the way any command can: from $PPID (the helper) up, and by its pid.
        let out = mcp.bash(&format!(
            "kill -9 $PPID; a=$?; kill -9 -- -$(ps -o pgid= -p $PPID | tr -d ' '); b=$?; \
             f=$(ps -o ppid= -p $PPID | tr -d ' '); kill -9 -- -$(ps -o pgid= -p $f | tr -d ' '); \
             c=$?; kill -9 $(ps -o ppid= -p $f) {host}; echo $a$b$c$?"
        ));
        assert!(out.starts_with("1111\n"), "{tier}: {out}");
        assert_eq!(mcp.bash("echo alive"), "alive\n", "{tier}");
    }
    // Unsandboxed, the same kill ends the host: the test can fail.
    let world = World::new(User::Nobody);
    let mut mcp = Mcp::start(&world, &[]);
    let host = mcp.child.id();
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params":
        {"name": "bash", "arguments": {"command": format!("kill -9 {host}"), "description": "x"}}});
    writeln!(mcp.stdin.as_ref().unwrap(), "{call}").unwrap();
    assert!(
        mcp.child.wait().unwrap().code().is_none(),
        "killed by a signal"
    );
}

#[test]
fn a_replaced_git_directory_neither_keeps_a_hook_nor_redirects_the_restore() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            repository(&world);
            let outside = world.outside.display().to_string();
            for attack in [
                // The git directory renamed and a new one made, with a hook.
                "mv .git .git-old && mkdir -p .git/hooks && cp -r .git-old/. .git/ 2>/dev/null; \
                 printf '#!/bin/sh\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit"
                    .to_string(),
                // The git directory swapped for a symlink to a directory outside the roots.
                format!("mv .git .git-old2; ln -s '{outside}' .git"),
                // A hooks directory where there was none.
                "rm -rf .git/hooks; mkdir .git/hooks && echo x > .git/hooks/post-checkout"
                    .to_string(),
            ] {
                world.call(&flags("workspace-write", tier), &attack).ran();
                let case = format!("{user:?} {tier}: {attack}");
                let git = world.work.join(".git");
                let meta = std::fs::symlink_metadata(&git).unwrap();
                assert!(meta.is_dir(), "{case}: .git is a {:?}", meta.file_type());
                assert!(!git.join("hooks/pre-commit").exists(), "{case}");
                assert!(!git.join("hooks/post-checkout").exists(), "{case}");
                // Nothing was written outside the roots, by the command or by a restore.
                let mut names: Vec<_> = std::fs::read_dir(&world.outside)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                names.sort();
                assert_eq!(names, ["keep.txt"], "{case}");
            }
        }
    }
}

/// Tries to add a rule granting every read to any Landlock ruleset it can get a descriptor
/// of: its own descriptors, and those of its helper (`argv[1]`) and the helper's parent, the
/// factory that holds the read layer every command of the host shares.
const WIDEN: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
root = os.open("/", os.O_PATH)
helper = int(sys.argv[1])
factory = int(open(f"/proc/{helper}/stat").read().rsplit(")", 1)[1].split()[1])
fds = list(range(3, 256))
for pid in (helper, factory):
    for n in range(0, 256):
        try:
            fds.append(os.open(f"/proc/{pid}/fd/{n}", os.O_PATH))
        except OSError:
            pass
widened = 0
for fd in fds:
    attr = Attr(1 << 2, root)  # LANDLOCK_ACCESS_FS_READ_FILE beneath /
    if libc.syscall(445, fd, 1, ctypes.byref(attr), 0) == 0:
        widened += 1
print("widened", widened)
"#;

#[test]
fn one_commands_tmpdir_and_the_shared_read_rules_stay_out_of_anothers_reach() {
    for user in [User::Root, User::Nobody] {
        for tier in TIERS {
            let world = World::new(user);
            let case = format!("{user:?} {tier}");
            let mut mcp = Mcp::start(
                &world,
                &["--sandbox", "workspace-write", "--sandbox-tier", tier],
            );
            // A background command of the same session holds a file in its TMPDIR.
            mcp.request(
                "tools/call",
                serde_json::json!({"name": "bash", "arguments": {
                    "command": format!(
                        "echo {SECRET} > \"$TMPDIR/held\" && echo \"$TMPDIR\" > held.txt; sleep 6"
                    ),
                    "description": "x", "run_in_background": true}}),
            );
            let marker = world.work.join("held.txt");
            let deadline = Instant::now() + Duration::from_secs(10);
            let held = loop {
                let text = std::fs::read_to_string(&marker).unwrap_or_default();
                if text.ends_with('\n') {
                    break text.trim().to_string();
                }
                assert!(Instant::now() < deadline, "{case}: the holder never wrote");
                std::thread::sleep(Duration::from_millis(20));
            };
            let file = std::path::Path::new(&held).join("held");
            // Ground truth: the file is there, with the secret.
            assert_eq!(
                std::fs::read_to_string(&file).unwrap().trim(),
                SECRET,
                "{case}"
            );
            let out = mcp.bash(&format!("cat '{}'", file.display()));
            assert!(!out.contains(SECRET), "{case}: {out}");
            assert!(out.contains("Permission denied"), "{case}: {out}");
            let out = mcp.bash(&format!("python3 -c '{WIDEN}' $PPID"));
            assert!(out.contains("widened 0"), "{case}: {out}");
            // And the next command is as confined as ever.
            let out = mcp.bash("cat ~/.ssh/id_ed25519");
            assert!(!out.contains(SECRET), "{case}: {out}");
            assert!(out.contains("Permission denied"), "{case}: {out}");
        }
    }
}

#[test]
fn moves_between_directories_work_inside_the_roots() {
    for tier in TIERS {
        let world = World::new(User::Nobody);
        let out = world
            .call(
                &flags("workspace-write", tier),
                "mkdir a b && touch a/x && python3 -c 'import os; os.rename(\"a/x\", \"b/y\")' && \
                 ln b/y a/z && echo moved",
            )
            .ran();
        assert_eq!(out.text, "moved\n", "{tier}");
        assert!(world.work.join("b/y").exists() && world.work.join("a/z").exists());
    }
}

/// `keyctl`'s system call number.
#[cfg(target_arch = "x86_64")]
const KEYCTL: u32 = 250;
#[cfg(target_arch = "aarch64")]
const KEYCTL: u32 = 219;

#[test]
fn block_devices_keyrings_and_agent_sockets_are_out_of_reach() {
    let world = World::new(User::Root);
    // A socket of the test's own where an SSH agent's would be.
    let sock = world.outside.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\")' 2>&1 \
         | tail -1",
        sock.display()
    );
    let command = format!(
        "echo \"agent=$SSH_AUTH_SOCK\"; d=$(find /dev -type b | head -1); head -c1 \"$d\" \
         >/dev/null && echo read-a-disk; python3 -c 'import ctypes; \
         print(\"keyctl\", ctypes.CDLL(None, use_errno=True).syscall({KEYCTL}, 0, -3) == -1)'; \
         {connect}"
    );
    let run = |flags: &[&str]| {
        let mut cmd = world.host(&[
            "call",
            "bash",
            &serde_json::json!({"command": command, "description": "x"}).to_string(),
        ]);
        cmd.args(flags).env("SSH_AUTH_SOCK", &sock);
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let out = run(&flags("workspace-write", "namespaces"));
    assert!(out.starts_with("agent=\n"), "{out}");
    assert!(!out.contains("read-a-disk"), "{out}");
    assert!(out.contains("keyctl True"), "{out}");
    assert!(
        out.contains("ConnectionRefusedError"),
        "the agent socket is hidden: {out}"
    );
    assert!(
        listener.accept().is_err(),
        "the sandboxed command reached the socket"
    );
    // Unsandboxed, all of it works: the test can fail.
    let out = run(&[]);
    assert!(
        out.contains("read-a-disk") && out.contains("keyctl False"),
        "{out}"
    );
    assert!(listener.accept().is_ok(), "{out}");
}

/// The read rules grant every entry of each directory on the way to a denied path one by one:
/// the shared layer's along the home, each command's along the directory of the private
/// `TMPDIR`s (`/var/tmp`, which anyone may fill; here the host's temporary directory, with
/// `/var/tmp` made read-only). Directories of more entries than the host may hold descriptors
/// still give a command its sandbox, every entry readable and the secret not.
#[test]
fn directories_of_more_entries_than_descriptors_on_the_way_are_sandboxed_whole() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            for i in 0..1500 {
                std::fs::write(world.home.join(format!("f{i}")), format!("entry {i}\n")).unwrap();
            }
            let crowd = world.outside.join("crowd");
            std::fs::create_dir(&crowd).unwrap();
            for i in 0..1100 {
                std::fs::write(crowd.join(format!("e{i}")), format!("crowd {i}\n")).unwrap();
            }
            let uid = user.uid();
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{uid}"))
                .arg(&world.home)
                .arg(&crowd)
                .status()
                .unwrap();
            assert!(status.success());
            let args = serde_json::json!({
                "command": format!(
                    "cat ~/f* | wc -l; cat '{}'/e* | wc -l; echo \"tmp=$TMPDIR\"; \
                     cat ~/.ssh/id_ed25519",
                    crowd.display()
                ),
                "description": "sandbox test",
            })
            .to_string();
            let mut direct = world.host(&[
                "call",
                "bash",
                &args,
                "--sandbox",
                "read-only",
                "--sandbox-tier",
                tier,
            ]);
            direct.env("TMPDIR", &crowd);
            // The world itself stays writable where it lies under /var/tmp (a checkout under
            // /tmp puts it there).
            let scratch = world.home.parent().unwrap();
            let script = "mount --bind /var/tmp /var/tmp && mount -o remount,bind,ro /var/tmp && \
                          mount --bind \"$0\" \"$0\" && mount -o remount,bind,rw \"$0\" && \
                          exec prlimit --nofile=256:256 -- \"$@\"";
            let program = [
                "sh".as_ref(),
                "-c".as_ref(),
                script.as_ref(),
                scratch.as_os_str(),
            ];
            let out = unshared(&["-m"], &program, &direct).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let case = format!(
                "{user:?} {tier}: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(0), "{case}");
            assert!(
                text.starts_with(&format!(
                    "1500\n1100\ntmp={}/dsh-sandbox-{uid}/",
                    real(&crowd)
                )),
                "{case}"
            );
            assert!(!text.contains(SECRET), "{case}");
            reported(
                &text,
                &format!(
                    "read of {}/.ssh/id_ed25519 denied (a denied path)",
                    real(&world.home)
                ),
            );
        }
    }
}

/// A command that may write its home (`--sandbox-allow-write ~`) fills it with more entries
/// than the host may hold descriptors: the next command of the same host gets its sandbox all
/// the same, reads what the first made and not the secret beside it.
#[test]
fn a_command_that_crowds_the_home_leaves_the_next_its_sandbox() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            let home = world.home.display().to_string();
            let direct = world.host(&[
                "mcp",
                "--sandbox",
                "workspace-write",
                "--sandbox-tier",
                tier,
                "--sandbox-allow-write",
                &home,
            ]);
            let mut mcp =
                Mcp::from_command(wrapped(&["prlimit", "--nofile=256:256", "--"], &direct));
            let made = mcp.bash("for i in $(seq 1500); do : > ~/p$i; done; ls ~ | wc -l");
            let case = format!("{user:?} {tier}");
            assert!(made.starts_with("1500\n"), "{case}: {made}");
            let next =
                mcp.bash("ls ~/p* | wc -l; echo x > ~/p1499 && cat ~/p1499; cat ~/.ssh/id_ed25519");
            assert!(next.starts_with("1500\nx\n"), "{case}: {next}");
            assert!(!next.contains(SECRET), "{case}: {next}");
            reported(
                &next,
                &format!(
                    "read of {}/.ssh/id_ed25519 denied (a denied path)",
                    real(&world.home)
                ),
            );
        }
    }
}

#[test]
fn without_home_the_users_own_secrets_are_still_denied() {
    let world = World::new(User::Root);
    let out = world
        .host(&["doctor", "--sandbox", "read-only"])
        .env_remove("HOME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  /root/.ssh\n"), "{text}");
}

/// Landlock grants reading a directory that holds a denied path entry by entry, so what a
/// command makes there is unreadable until the next command: the model is told exactly that
/// (a read, a read-write open, an open that makes the file and reads it), the next command of
/// the same host reads it, and what keeps a grant (a file that existed, moved under a new
/// directory) or is refused by its own mode carries no line.
#[test]
fn an_entry_made_beside_a_denied_path_is_reported_and_readable_from_the_next_command() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            let home = world.home.display().to_string();
            let mut flags = flags("workspace-write", tier);
            flags.extend(["--sandbox-allow-write", &home]);
            std::fs::write(world.home.join("before.txt"), "before\n").unwrap();
            let mut mcp = Mcp::start(&world, &flags);
            let out = mcp.bash(
                "cat ~/before.txt; echo hi > ~/notes; cat ~/notes; mkdir ~/proj && \
                 echo x > ~/proj/f && cat ~/proj/f; exec 3<>~/notes; exec 4<>~/made; \
                 mv ~/before.txt ~/proj/ && cat ~/proj/before.txt",
            );
            let case = format!("{user:?} {tier}: {out}");
            assert!(out.starts_with("before\n"), "{case}");
            assert!(out.contains("notes: Permission denied"), "{case}");
            assert!(out.contains("made: Permission denied"), "{case}");
            // A granted file keeps its grant under a new directory.
            assert!(out.contains("\nbefore\n"), "{case}");
            let home = real(&world.home);
            let denied = |path: &str| {
                format!(
                    "read of {home}/{path} denied (created after this command's sandbox was set \
                     up; readable from the next command)"
                )
            };
            assert_eq!(
                sandbox_line(&out),
                Some(
                    format!(
                        "[sandbox: {}; {}; {}]",
                        denied("notes"),
                        denied("proj/f"),
                        denied("made")
                    )
                    .as_str()
                ),
                "{case}"
            );
            // Made: the writes went through.
            assert!(holds(&world.home.join("notes"), "hi\n"), "{case}");
            let out = mcp.bash("cat ~/notes ~/proj/f ~/proj/before.txt ~/made");
            assert_eq!(out, "hi\nx\nbefore\n", "{user:?} {tier}");
            if user == User::Nobody {
                // Refused by its own mode as much as by the sandbox: not the sandbox's doing.
                let out = mcp.bash("(umask 777; echo > ~/closed); cat ~/closed");
                assert!(out.contains("closed: Permission denied"), "{tier}: {out}");
                assert_eq!(sandbox_line(&out), None, "{tier}: {out}");
            }
        }
    }
}

#[test]
fn files_made_between_commands_are_judged_afresh() {
    for tier in TIERS {
        let world = World::new(User::Root);
        let mut mcp = Mcp::start(&world, &["--sandbox", "read-only", "--sandbox-tier", tier]);
        assert_eq!(mcp.bash("echo first"), "first\n");
        // Made by the operator while the host runs: a plain file beside the denied ones, and a
        // secret where none was.
        std::fs::write(world.home.join("notes.txt"), "plain\n").unwrap();
        std::fs::create_dir_all(world.home.join(".aws")).unwrap();
        std::fs::write(world.home.join(".aws/credentials"), SECRET).unwrap();
        let out = mcp.bash("cat ~/notes.txt; cat ~/.aws/credentials");
        assert!(out.starts_with("plain\n"), "{tier}: {out}");
        assert!(!out.contains(SECRET), "{tier}: {out}");
        assert!(
            out.contains("credentials: Permission denied"),
            "{tier}: {out}"
        );
    }
}

/// An MCP client is told the sandbox in the server's instructions: the mode, the writable roots
/// as the host resolved them, the planted HOME's denied reads and the network; without a
/// sandbox, no word of one.
#[test]
fn mcp_instructions_state_the_sandbox_in_force() {
    let world = World::new(User::Root);
    let initialize = |flags: &[&str]| -> String {
        let mut args = vec!["mcp"];
        args.extend_from_slice(flags);
        let mut child = world
            .host(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let request = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}},
        });
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{request}").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        drop(stdin);
        let _ = child.wait();
        let answer: serde_json::Value = serde_json::from_str(&line).expect("an answer");
        answer["result"]["instructions"]
            .as_str()
            .unwrap_or_else(|| panic!("no instructions: {answer}"))
            .to_string()
    };
    let plain = initialize(&["--sandbox", "off"]);
    assert!(!plain.contains("sandbox"), "{plain}");
    for tier in TIERS {
        let text = initialize(&flags("workspace-write", tier));
        let paragraph = text
            .strip_prefix(&format!("{plain}\n\n"))
            .unwrap_or_else(|| panic!("{tier}: not the plain text and a paragraph: {text}"));
        let lines: Vec<&str> = paragraph.lines().collect();
        assert_eq!(lines.len(), 4, "{tier}: {paragraph}");
        assert_eq!(
            lines[0],
            format!(
                "Commands run in a sandbox (workspace-write): they can write only under {}, /tmp \
                 and their own $TMPDIR; git hooks and configuration there stay read-only, and \
                 git init, add and commit work.",
                real(&world.work)
            ),
            "{tier}"
        );
        assert!(
            lines[1].starts_with("They cannot read: ")
                && lines[1].contains(&format!("{}/.ssh", real(&world.home))),
            "{tier}: {}",
            lines[1]
        );
        assert_eq!(
            lines[2], "The network is off: no sockets but Unix sockets.",
            "{tier}"
        );
        assert!(lines[3].starts_with("A denied operation fails"), "{tier}");
    }
    let text = initialize(&[
        "--sandbox",
        "read-only",
        "--sandbox-tier",
        "namespaces",
        "--sandbox-network",
        "loopback",
    ]);
    assert!(
        text.contains(
            "\nCommands run in a sandbox (read-only): they can write only to their own $TMPDIR \
             and to devices such as /dev/null.\n"
        ) && text.contains("\nThe network is limited to each command's own loopback interface"),
        "{text}"
    );
}

/// Calls that fail before the sandbox is asked (a missing source, an existing target, a
/// symbolic link not followed, a directory opened to write, a file its owner made unreadable)
/// fail as they would unsandboxed, with no line: the host names only what the sandbox denied.
#[test]
fn no_line_for_what_fails_before_the_sandbox() {
    for user in User::ALL {
        for tier in TIERS {
            let world = World::new(user);
            let outside = world.outside.display().to_string();
            let command = format!(
                "mv missing '{outside}/x'; ln missing '{outside}/y'; mv -n made '{outside}/keep.txt'; \
                 python3 -c 'import os; os.open(\"/etc/mtab\", os.O_WRONLY | os.O_NOFOLLOW)' 2>&1 | tail -1; \
                 python3 -c 'import os; os.open(\"{outside}\", os.O_WRONLY)' 2>&1 | tail -1; \
                 {cat}; exit 3",
                // As root the owner's mode does not stop a read: then the sandbox does.
                cat = if user == User::Root {
                    "true"
                } else {
                    "cat ~/.ssh/id_ed25519"
                },
            );
            let command = format!("touch made; {command}");
            let key = world.home.join(".ssh/id_ed25519");
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o000))
                .unwrap();
            let out = world.call(&flags("workspace-write", tier), &command).ran();
            let case = format!("{user:?} {tier}: {}", out.text);
            assert_eq!(sandbox_line(out.text.trim_end()), None, "{case}");
            assert!(out.text.ends_with("[exit code: 3]\n"), "{case}");
            assert!(out.text.contains("No such file or directory"), "{case}");
            assert!(
                out.text.contains("Too many levels of symbolic links"),
                "{case}"
            );
            assert!(out.text.contains("Is a directory"), "{case}");
            assert!(
                holds(&world.outside.join("keep.txt"), "original\n"),
                "{case}"
            );
        }
    }
}

/// In `loopback`, the unspecified address reaches the command's own loopback: a connection to
/// `0.0.0.0` is no denial.
#[test]
fn loopback_counts_the_unspecified_address_as_local() {
    let world = World::new(User::Nobody);
    let mut f = flags("workspace-write", "namespaces");
    f.extend(["--sandbox-network", "loopback"]);
    let out = world
        .call(
            &f,
            "python3 -c 'import socket; socket.create_connection((\"0.0.0.0\", 9), timeout=2)' \
             2>&1 | tail -1; python3 -c 'import socket; socket.create_connection((\"::\", 9), \
             timeout=2)' 2>&1 | tail -1",
        )
        .ran();
    assert_eq!(
        out.text.matches("ConnectionRefusedError").count(),
        2,
        "{}",
        out.text
    );
    assert_eq!(sandbox_line(&out.text), None, "{}", out.text);
}

/// The descriptors that carry the sandbox's notifications (the helper's listener and the pair it
/// came through) never reach the command: bash holds only its stdio, in every tier, call after
/// call.
#[test]
fn a_sandboxed_command_holds_only_its_stdio() {
    for tier in TIERS {
        let world = World::new(User::Nobody);
        for _ in 0..3 {
            let out = world
                .call(&flags("workspace-write", tier), "ls /proc/$$/fd; true") // `; true`: bash does not exec ls in its place
                .ran();
            assert_eq!(out.text, "0\n1\n2\n", "{tier}");
        }
    }
}

/// A repository nested in the workspace is protected from the command after the one that made
/// it, and so is one the user made between commands: the helper looks for nested repositories
/// while it waits, and looks again where a directory it read has changed since.
#[test]
fn repositories_made_between_commands_are_protected_in_the_next() {
    let git = |dir: &std::path::Path| {
        let ok = Command::new("git")
            .args(["init", "-q"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git init {}", dir.display());
    };
    for tier in TIERS {
        let world = World::new(User::Root);
        std::fs::create_dir_all(world.work.join("a")).unwrap();
        git(&world.work.join("old"));
        // Long enough that the workspace's directories count as settled when the helper first
        // reads them: what tells it of the new repositories is their change since.
        std::thread::sleep(Duration::from_millis(2100));
        let mut mcp = Mcp::start(&world, &flags("workspace-write", tier));
        let out = mcp.bash("git init -q a/late && echo made");
        assert_eq!(out, "made\n", "{tier}");
        git(&world.work.join("users"));
        let out = mcp.bash(
            "for r in old a/late users; do echo evil > $r/.git/hooks/pre-commit; \
             git -C $r config core.hooksPath /evil; done; echo tried",
        );
        assert!(out.starts_with("tried\n"), "{tier}: {out}");
        for repo in ["old", "a/late", "users"] {
            let git_dir = world.work.join(repo).join(".git");
            assert!(
                !git_dir.join("hooks/pre-commit").exists(),
                "{tier}: {repo}: {out}"
            );
            let config = std::fs::read_to_string(git_dir.join("config")).unwrap();
            assert!(!config.contains("hooksPath"), "{tier}: {repo}: {config}");
        }
    }
}
