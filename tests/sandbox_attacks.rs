//! The sandbox's bypasses, tried: each attack must fail, judged by ground truth.

#[path = "support/sandbox.rs"]
mod sandbox;

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandbox::{Called, Findings, NOBODY, SECRET, TIERS, User, World, flags, world};

/// The system's Python, reachable by every user (a pyenv shim under /root is not).
const PY: &str = "/usr/bin/python3";

const OFF: [&str; 2] = ["--sandbox", "off"];

fn ww(tier: &str) -> Vec<&str> {
    flags("workspace-write", tier)
}

fn who(user: User, tier: &str) -> String {
    format!("{user:?}/{tier}")
}

/// A Python program run from a here-document (quoting-free).
fn py(code: &str) -> String {
    format!("{PY} - <<'PYEOF'\n{code}\nPYEOF\n")
}

/// A control: the same action unconfined (or inside the roots) must have its effect, so that a
/// sandbox that stopped nothing would be caught.
fn control(held: bool, who: &str, what: &str, called: &Called) {
    assert!(held, "[{who}] control failed: {what}: {called:?}");
}

/// `program` run as `user`, outside any sandbox.
fn as_user(user: User, program: &str) -> Command {
    match user {
        User::Root => Command::new(program),
        User::Nobody => {
            let mut cmd = Command::new("setpriv");
            cmd.args([
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".to_string(),
                program.to_string(),
            ]);
            cmd
        }
    }
}

/// Gives `path` (recursively) to the world's user.
fn give(w: &World, path: &Path) {
    let uid = w.user.uid();
    let ok = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", path.display());
}

/// Writes `text` to `path` (creating its directory), owned by the world's user.
fn plant(w: &World, path: &Path, text: &str) {
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(path, text).unwrap();
    give(w, dir);
}

/// A directory tree: each entry's relative path, kind, mode and content (symlinks by target).
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                walk(root, &path, out);
                format!("dir {mode:o}")
            } else if meta.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                format!("file {mode:o} {:?}", String::from_utf8_lossy(&bytes))
            } else {
                format!("special {mode:o}")
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A regular file under `dir` that holds the planted secret.
fn copy_of_secret(dir: &Path) -> Option<PathBuf> {
    tree(dir).into_iter().find_map(|(rel, what)| {
        (what.starts_with("file") && what.contains(SECRET)).then(|| dir.join(rel))
    })
}

/// `outside` back to its one file, `keep.txt` ("original\n"); its tree, to compare with.
fn reset_outside(w: &World) -> BTreeMap<PathBuf, String> {
    let _ = Command::new("chmod")
        .args(["-R", "u+rwx"])
        .arg(&w.outside)
        .status();
    std::fs::remove_dir_all(&w.outside).unwrap();
    std::fs::create_dir(&w.outside).unwrap();
    std::fs::write(w.outside.join("keep.txt"), "original\n").unwrap();
    give(w, &w.outside);
    tree(&w.outside)
}

#[test]
fn secrets_stay_unreadable_through_aliases_links_and_copies() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let home = w.home.display().to_string();
            let ssh = format!("{home}/.ssh");
            let key = format!("{ssh}/id_ed25519");
            let c = w.call(&OFF, &format!("cat {key}"));
            control(
                c.text.contains(SECRET),
                &who,
                "unconfined cat of the key",
                &c,
            );
            let attacks: Vec<(&str, String)> = vec![
                ("cat of the key", format!("cat {key}")),
                (
                    "workspace symlink to the key",
                    format!("ln -s {key} k1; cat k1"),
                ),
                (
                    "workspace symlink to ~/.ssh",
                    format!("ln -s {ssh} s1; cat s1/id_ed25519"),
                ),
                (
                    "hard link of the key into the workspace",
                    format!("ln {key} k2; cat k2"),
                ),
                ("/proc/self/root alias", format!("cat /proc/self/root{key}")),
                (
                    "cd into ~/.ssh",
                    format!("cd {ssh} && cat id_ed25519 ./id_ed25519"),
                ),
                (
                    "/proc/self/cwd alias",
                    format!("cd {ssh}; cat /proc/self/cwd/id_ed25519"),
                ),
                (
                    "dot-dot path",
                    format!("cat {home}/.ssh/../.ssh/./id_ed25519"),
                ),
                ("redirected descriptor", format!("exec 3< {key}; cat <&3")),
                ("cp into the workspace", format!("cp {key} k3; cat k3")),
                (
                    "cp -r of ~/.ssh",
                    format!("cp -r {ssh} s2; cat s2/id_ed25519"),
                ),
                (
                    "tar of ~/.ssh",
                    format!("tar -C {home} -cf - .ssh | tar -xOf -"),
                ),
                ("grep -r", format!("grep -r . {ssh}")),
                ("python open()", py(&format!("print(open('{key}').read())"))),
                (
                    "python openat() from a directory descriptor",
                    py(&format!(
                        "import os\n\
                         d = os.open('{ssh}', os.O_RDONLY | os.O_DIRECTORY)\n\
                         print(os.read(os.open('id_ed25519', os.O_RDONLY, dir_fd=d), 100))"
                    )),
                ),
                (
                    // A path descriptor opens no file (and is not handed to the helper):
                    // reopened through /proc, it is the key's open all the same.
                    "O_PATH descriptor reopened through /proc/self/fd",
                    py(&format!(
                        "import os\n\
                         fd = os.open('{key}', os.O_PATH)\n\
                         print(open(f'/proc/self/fd/{{fd}}').read())"
                    )),
                ),
                (
                    "open_by_handle_at (root's CAP_DAC_READ_SEARCH)",
                    py(&format!(
                        "import ctypes, os\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         class FH(ctypes.Structure):\n    \
                             _fields_ = [('n', ctypes.c_uint), ('t', ctypes.c_int), \
                                         ('h', ctypes.c_ubyte * 128)]\n\
                         fh = FH(); fh.n = 128; mid = ctypes.c_int()\n\
                         print('name_to_handle_at', libc.name_to_handle_at(-100, b'{key}', \
                             ctypes.byref(fh), ctypes.byref(mid), 0), ctypes.get_errno())\n\
                         m = os.open('{home}', os.O_PATH)\n\
                         fd = libc.open_by_handle_at(m, ctypes.byref(fh), os.O_RDONLY)\n\
                         print('open_by_handle_at', fd, ctypes.get_errno())\n\
                         print(os.read(fd, 100) if fd >= 0 else '')"
                    )),
                ),
            ];
            for (attack, command) in &attacks {
                let c = w.call(&ww(tier), command).ran();
                let copy = copy_of_secret(&w.work);
                found.check(!c.text.contains(SECRET) && copy.is_none(), &who, attack, &c);
                if let Some(copy) = copy {
                    let _ = std::fs::remove_file(copy);
                }
            }
            let c = w
                .call(&flags("read-only", tier), &format!("cat {key}"))
                .ran();
            found.check(
                !c.text.contains(SECRET),
                &who,
                "read-only cat of the key",
                &c,
            );
        }
    }
    found.done();
}

#[test]
fn secrets_stay_unreadable_where_home_is_writable() {
    // With ~ itself a writable root, ~/.ssh can be renamed: the key must stay denied under its
    // new name.
    let mut found = Findings::default();
    // Each attack's name and its command for a home directory.
    type Attack = (&'static str, fn(&str) -> String);
    let attacks: [Attack; 3] = [
        ("mv ~/.ssh ~/moved, then cat", |h| {
            format!("mv {h}/.ssh {h}/moved; cat {h}/moved/id_ed25519")
        }),
        ("mv the key to ~/k, then cat", |h| {
            format!("mv {h}/.ssh/id_ed25519 {h}/k; cat {h}/k")
        }),
        ("~/.ssh renamed and replaced by a symlink", |h| {
            format!(
                "mv {h}/.ssh {h}/old && ln -s {h}/old {h}/.ssh; \
                 cat {h}/.ssh/id_ed25519 {h}/old/id_ed25519"
            )
        }),
    ];
    for user in User::ALL {
        for tier in TIERS {
            let who = who(user, tier);
            for (attack, command) in &attacks {
                let w = world(user);
                let home = w.home.display().to_string();
                let mut allow = ww(tier);
                allow.extend(["--sandbox-allow-write", home.as_str()]);
                let c = w.call(&allow, &command(&home)).ran();
                found.check(!c.text.contains(SECRET), &who, attack, &c);
            }
        }
    }
    found.done();
}

#[test]
fn secrets_planted_late_and_extra_denied_paths_stay_unreadable() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            // Planted after the world (and each call is a fresh host): the rules are made per
            // command, not once.
            let late = [
                ".aws/credentials",
                ".config/gh/hosts.yml",
                ".git-credentials",
                ".docker/config.json",
                ".cache/dsh-host/state",
            ];
            for rel in late {
                plant(&w, &w.home.join(rel), SECRET);
            }
            let command: String = late
                .iter()
                .map(|rel| format!("cat {}/{rel}; ", w.home.display()))
                .collect();
            let c = w.call(&OFF, &command);
            control(c.text.contains(SECRET), &who, "unconfined late secrets", &c);
            let c = w.call(&ww(tier), &command).ran();
            found.check(
                !c.text.contains(SECRET),
                &who,
                "secrets planted after start",
                &c,
            );

            // --sandbox-deny-read: a file, a directory, and a directory named through a symlink.
            plant(&w, &w.outside.join("private.txt"), SECRET);
            plant(&w, &w.outside.join("vault/a/b.txt"), SECRET);
            plant(&w, &w.outside.join("linked/c.txt"), SECRET);
            let link = w.work.join("to-linked");
            std::os::unix::fs::symlink(w.outside.join("linked"), &link).unwrap();
            let o = w.outside.display().to_string();
            let cases = [
                (format!("{o}/private.txt"), format!("cat {o}/private.txt")),
                (
                    format!("{o}/vault"),
                    format!("cat {o}/vault/a/b.txt; grep -r . {o}/vault"),
                ),
                (
                    link.display().to_string(),
                    format!("cat {o}/linked/c.txt to-linked/c.txt"),
                ),
            ];
            for (denied, command) in &cases {
                let c = w.call(&ww(tier), command).ran();
                control(
                    c.text.contains(SECRET),
                    &who,
                    "readable without the flag",
                    &c,
                );
                let mut fl = ww(tier);
                fl.extend(["--sandbox-deny-read", denied.as_str()]);
                let c = w.call(&fl, command).ran();
                found.check(
                    !c.text.contains(SECRET),
                    &who,
                    &format!("--sandbox-deny-read {denied}"),
                    &c,
                );
            }

            // The host's --config file.
            let config = w.outside.join("dsh.toml");
            plant(&w, &config, &format!("# {SECRET}\n"));
            let conf = config.display().to_string();
            let mut fl = ww(tier);
            fl.extend(["--config", conf.as_str()]);
            let c = w.call(&fl, &format!("cat {conf}")).ran();
            found.check(
                !c.text.contains(SECRET),
                &who,
                "the host's --config file",
                &c,
            );
        }
    }
    found.done();
}

#[test]
fn another_hosts_private_tmpdir_stays_private() {
    // Two sessions of one user (two hosts): one's command keeps a file in its TMPDIR while the
    // other's looks for it.
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let args = serde_json::json!({
                "command": format!("echo {SECRET} > \"$TMPDIR/held\"; sleep 4"),
                "description": "holder",
            })
            .to_string();
            let mut holder_flags = vec!["call", "bash", args.as_str()];
            holder_flags.extend(ww(tier));
            let holder = w.host(&holder_flags).stdout(Stdio::null()).spawn().unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            let look = "cat /var/tmp/dsh-sandbox-*/*/tmp-*/held /tmp/dsh-sandbox-*/*/tmp-*/held";
            let c = w.call(&OFF, look);
            control(
                c.text.contains(SECRET),
                &who,
                "unconfined read of the other TMPDIR",
                &c,
            );
            let c = w.call(&ww(tier), look).ran();
            found.check(
                !c.text.contains(SECRET),
                &who,
                "another host's command's TMPDIR",
                &c,
            );
            let _ = holder.wait_with_output();
        }
    }
    found.done();
}

#[test]
fn writes_outside_the_roots_change_nothing() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let o = w.outside.display().to_string();
            let before = reset_outside(&w);
            let c = w.call(&OFF, &format!("echo pwned > {o}/keep.txt"));
            control(
                tree(&w.outside) != before,
                &who,
                "unconfined write outside",
                &c,
            );
            reset_outside(&w);
            let c = w.call(&ww(tier), "echo ok > inside.txt").ran();
            control(
                std::fs::read_to_string(w.work.join("inside.txt")).is_ok_and(|t| t == "ok\n"),
                &who,
                "a write inside the workspace",
                &c,
            );
            let attacks: Vec<(&str, String)> = vec![
                ("overwrite", format!("echo pwned > {o}/keep.txt")),
                ("append", format!("echo pwned >> {o}/keep.txt")),
                (
                    "read-write descriptor",
                    format!("exec 3<> {o}/keep.txt; echo pwned >&3"),
                ),
                ("truncate -s0", format!("truncate -s0 {o}/keep.txt")),
                (
                    "python os.truncate",
                    py(&format!("import os\nos.truncate('{o}/keep.txt', 0)")),
                ),
                ("sed -i", format!("sed -i s/original/pwned/ {o}/keep.txt")),
                ("rename in place", format!("mv {o}/keep.txt {o}/moved.txt")),
                (
                    "move into the workspace",
                    format!("mv {o}/keep.txt stolen.txt"),
                ),
                ("rm", format!("rm -f {o}/keep.txt")),
                ("new file", format!("echo pwned > {o}/new.txt")),
                ("mkdir", format!("mkdir {o}/d")),
                ("symlink creation", format!("ln -s /etc/passwd {o}/link")),
                ("hard link creation", format!("ln {o}/keep.txt {o}/hard")),
                ("mkfifo", format!("mkfifo {o}/fifo")),
                (
                    "workspace symlink to the outside directory",
                    format!("ln -s {o} out; echo pwned > out/keep.txt; echo x > out/new.txt"),
                ),
                (
                    "workspace symlink to the outside file",
                    format!("ln -s {o}/keep.txt lk; echo pwned > lk"),
                ),
                (
                    "/proc/self/cwd with cwd outside",
                    format!(
                        "cd {o} && echo pwned > /proc/self/cwd/keep.txt; echo x > /proc/self/cwd/y"
                    ),
                ),
                (
                    "move a workspace file over the outside one",
                    format!("echo pwned > w.txt; mv -f w.txt {o}/keep.txt"),
                ),
                (
                    "python os.rename over the outside file",
                    py(&format!(
                        "import os\nopen('w2.txt', 'w').write('pwned')\n\
                         os.rename('w2.txt', '{o}/keep.txt')"
                    )),
                ),
            ];
            for (attack, command) in &attacks {
                let c = w.call(&ww(tier), command).ran();
                found.check(tree(&w.outside) == before, &who, attack, &c);
                reset_outside(&w);
            }
            // A workdir argument outside the workspace: the roots stay the --cwd tree's.
            let command = "echo pwned > keep.txt; echo x > new.txt; pwd";
            let c = w
                .call_with(&ww(tier), command, serde_json::json!({"workdir": o}))
                .ran();
            control(
                c.text.contains(&o),
                &who,
                "the command ran in the workdir",
                &c,
            );
            found.check(
                tree(&w.outside) == before,
                &who,
                "workdir argument outside",
                &c,
            );
            reset_outside(&w);
        }
    }
    found.done();
}

/// An outside file's metadata as the test sees it: mode, owner, modification time, xattrs.
fn metadata_of(path: &Path) -> String {
    let meta = std::fs::metadata(path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = [0u8; 256];
    // SAFETY: a valid path and buffer.
    let n = unsafe { libc::listxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    let names = String::from_utf8_lossy(&names[..n.max(0) as usize]).into_owned();
    format!(
        "mode {:o} uid {} gid {} mtime {} xattrs {names:?}",
        meta.mode(),
        meta.uid(),
        meta.gid(),
        meta.mtime()
    )
}

#[test]
fn metadata_of_outside_files_stays() {
    // Mode, owner, times and extended attributes are changes too: chmod a+w would let anyone
    // rewrite the file later, outside any sandbox.
    //
    // The namespace tier only: Landlock does not mediate these, and only that tier's read-only
    // filesystems outside the roots refuse them. The Landlock tier's gap is stated where its
    // limits are (docs/sandbox.md and `dsh-host doctor`).
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in ["namespaces"] {
            let w = world(user);
            let who = who(user, tier);
            let o = w.outside.display().to_string();
            let keep = w.outside.join("keep.txt");
            reset_outside(&w);
            let before = metadata_of(&keep);
            let c = w.call(&OFF, &format!("chmod 666 {o}/keep.txt"));
            control(metadata_of(&keep) != before, &who, "unconfined chmod", &c);
            let mut attacks: Vec<(&str, String)> = vec![
                ("chmod 666", format!("chmod 666 {o}/keep.txt")),
                ("chmod of the directory", format!("chmod 777 {o}")),
                (
                    "touch -d (times)",
                    format!("touch -d 2001-01-01 {o}/keep.txt"),
                ),
                (
                    "setxattr",
                    py(&format!(
                        "import os\nos.setxattr('{o}/keep.txt', 'user.x', b'1')"
                    )),
                ),
            ];
            if user == User::Root {
                attacks.push((
                    "chown (root)",
                    format!("chown {NOBODY}:{NOBODY} {o}/keep.txt"),
                ));
            }
            for (attack, command) in &attacks {
                reset_outside(&w);
                let before = (metadata_of(&keep), metadata_of(&w.outside));
                let c = w.call(&ww(tier), command).ran();
                let after = (metadata_of(&keep), metadata_of(&w.outside));
                found.check(after == before, &who, attack, &c);
            }
            reset_outside(&w);
        }
    }
    found.done();
}

#[test]
fn read_only_mode_writes_only_its_tmpdir() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let ro = flags("read-only", tier);
            let tmp_name = format!(
                "/tmp/dsh-attack-{}-{}-{tier}",
                std::process::id(),
                user.uid()
            );
            let c = w
                .call(&ro, "echo ok > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"")
                .ran();
            control(c.text.starts_with("ok"), &who, "a write to TMPDIR", &c);
            let before = tree(&w.work);
            let attacks = [
                (
                    "workspace write",
                    "echo pwned > a.txt; mkdir d; ln -s x l".to_string(),
                ),
                ("/tmp write", format!("echo pwned > {tmp_name}")),
                (
                    "move from TMPDIR into the workspace",
                    "echo pwned > \"$TMPDIR/m\"; mv \"$TMPDIR/m\" m.txt".to_string(),
                ),
            ];
            for (attack, command) in &attacks {
                let c = w.call(&ro, command).ran();
                found.check(
                    tree(&w.work) == before && !Path::new(&tmp_name).exists(),
                    &who,
                    attack,
                    &c,
                );
                let _ = std::fs::remove_file(&tmp_name);
            }
        }
    }
    found.done();
}

#[test]
fn lifting_the_sandbox_is_refused() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let o = w.outside.display().to_string();
            let wk = w.work.display().to_string();
            std::fs::create_dir_all(w.work.join("x")).unwrap();
            give(&w, &w.work.join("x"));
            let before = reset_outside(&w);
            let bind = format!("mount --bind {o} {wk}/x && echo pwned > {wk}/x/keep.txt");
            // Unconfined and as root, the bind mount through a private namespace works: the
            // attack itself is real.
            if user == User::Root {
                let c = w.call(&OFF, &format!("unshare -m sh -c '{bind}'"));
                control(
                    tree(&w.outside) != before,
                    &who,
                    "unconfined bind mount",
                    &c,
                );
                reset_outside(&w);
            }
            let clone_code = |flags: &str| {
                format!(
                    "import ctypes, os\n\
                     libc = ctypes.CDLL(None, use_errno=True)\n\
                     libc.syscall.restype = ctypes.c_long\n\
                     pid = libc.syscall(56, {flags}, 0, 0, 0, 0)\n\
                     if pid == 0:\n    \
                         open('{wk}/clone-child', 'w').write('ran')\n    \
                         os._exit(0)\n\
                     print('clone', pid, ctypes.get_errno())\n\
                     if pid > 0: os.waitpid(pid, 0)"
                )
            };
            // CLONE_NEWUSER | SIGCHLD.
            let c = w.call(&ww(tier), &py(&clone_code("0x10000000 | 17"))).ran();
            found.check(
                !w.work.join("clone-child").exists(),
                &who,
                "raw clone(CLONE_NEWUSER) through ctypes",
                &c,
            );
            let _ = std::fs::remove_file(w.work.join("clone-child"));
            // A plain fork the same way does run its child: the probe works.
            let c = w.call(&ww(tier), &py(&clone_code("17"))).ran();
            control(
                w.work.join("clone-child").exists(),
                &who,
                "raw clone(SIGCHLD)",
                &c,
            );

            let write = format!("echo pwned > {o}/keep.txt");
            let attacks: Vec<(&str, String, &str)> = vec![
                (
                    "unshare -U -r",
                    format!("unshare -U -r sh -c '{write}'"),
                    "",
                ),
                (
                    "unshare -U -r -m + bind mount",
                    format!("unshare -U -r -m sh -c '{bind}'"),
                    "",
                ),
                ("mount --bind outside into the workspace", bind.clone(), ""),
                (
                    "mount tmpfs over a workspace directory",
                    format!("mount -t tmpfs none {wk}/x; echo y > {wk}/x/f"),
                    "",
                ),
                (
                    "nsenter into pid 1's namespaces",
                    format!("nsenter -t 1 -a sh -c '{write}'"),
                    "",
                ),
                (
                    "setpriv to root",
                    format!("setpriv --reuid=0 --regid=0 --clear-groups sh -c '{write}'"),
                    "",
                ),
                (
                    "su to root",
                    format!("su -c '{write}' root < /dev/null"),
                    "",
                ),
                (
                    "python unshare(CLONE_NEWUSER | CLONE_NEWNS)",
                    py(&format!(
                        "import ctypes, os\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         print('unshare', libc.unshare(0x10000000 | 0x20000), ctypes.get_errno())\n\
                         os.system('{bind}')"
                    )),
                    "unshare -1 1",
                ),
                (
                    "clone3 with CLONE_NEWUSER",
                    py(&format!(
                        "import ctypes, os\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         libc.syscall.restype = ctypes.c_long\n\
                         args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)\n\
                         pid = libc.syscall(435, args, 88)\n\
                         if pid == 0:\n    \
                             open('{wk}/clone-child', 'w').write('ran')\n    \
                             os._exit(0)\n\
                         print('clone3', pid, ctypes.get_errno())"
                    )),
                    "clone3 -1 38",
                ),
                (
                    "io_uring_setup",
                    py("import ctypes\n\
                        libc = ctypes.CDLL(None, use_errno=True)\n\
                        p = ctypes.create_string_buffer(120)\n\
                        print('io_uring', libc.syscall(425, 4, p), ctypes.get_errno())"),
                    "io_uring -1 1",
                ),
                (
                    "x32 unshare",
                    py("import ctypes\n\
                        libc = ctypes.CDLL(None, use_errno=True)\n\
                        print('x32', libc.syscall(0x40000000 | 272, 0x10000000), \
                              ctypes.get_errno())"),
                    "x32 -1 38",
                ),
                (
                    "bpf",
                    py("import ctypes\n\
                        libc = ctypes.CDLL(None, use_errno=True)\n\
                        a = ctypes.create_string_buffer(128)\n\
                        print('bpf', libc.syscall(321, 0, a, 128), ctypes.get_errno())"),
                    "bpf -1 1",
                ),
            ];
            // No capability but the kept ones in any set, of the command or of what it starts.
            let caps = "sh -c 'grep -E \"^Cap(Inh|Prm|Eff|Bnd|Amb)\" /proc/self/status'";
            if user == User::Root {
                let c = w.call(&OFF, caps);
                control(
                    capability_sets(&c.text)
                        .iter()
                        .any(|(_, set)| set & !KEPT_CAPS != 0),
                    &who,
                    "unconfined root holds more capabilities",
                    &c,
                );
            }
            let c = w.call(&ww(tier), caps).ran();
            let sets = capability_sets(&c.text);
            // A user without capabilities cannot drop from its bounding set, and needs not: with
            // no new privileges, nothing it runs gains one (in the namespace tier it holds the
            // capabilities of its user namespace, and drops them as root does).
            let bounded =
                |name: &str| !(name == "CapBnd" && user == User::Nobody && tier == "landlock");
            found.check(
                sets.len() == 5
                    && sets
                        .iter()
                        .all(|(name, set)| set & !KEPT_CAPS == 0 || !bounded(name)),
                &who,
                "capabilities beyond the kept ones",
                &c,
            );
            for (attack, command, expect) in &attacks {
                let _ = std::fs::remove_file(w.work.join("clone-child"));
                let c = w.call(&ww(tier), command).ran();
                let mount_missed = attack.contains("tmpfs") && !w.work.join("x/f").exists();
                found.check(
                    tree(&w.outside) == before
                        && !w.work.join("clone-child").exists()
                        && !mount_missed
                        && c.text.contains(expect),
                    &who,
                    attack,
                    &c,
                );
                let _ = std::fs::remove_file(w.work.join("x/f"));
                reset_outside(&w);
            }
        }
    }
    found.done();
}

/// The capabilities a sandboxed root keeps: `CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
/// `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`, `CAP_SETGID`, `CAP_SETUID`,
/// `CAP_NET_BIND_SERVICE`, `CAP_IPC_LOCK`.
const KEPT_CAPS: u64 = 0x44df;

/// The capability sets `/proc/self/status` printed (`CapBnd:\t000001ffffffffff`).
fn capability_sets(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let (name, hex) = line.split_once(':')?;
            let set = u64::from_str_radix(hex.trim(), 16).ok()?;
            name.starts_with("Cap").then(|| (name.to_string(), set))
        })
        .collect()
}

/// Connections and datagrams from the sandbox land on listeners of the test process.
struct Listeners {
    tcp: TcpListener,
    udp: UdpSocket,
    unix: UnixListener,
    abstract_name: String,
}

impl Listeners {
    fn new(tag: &str) -> Listeners {
        let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let abstract_name = format!("dsh-attack-{}-{tag}", std::process::id());
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let unix = UnixListener::bind_addr(&addr).unwrap();
        unix.set_nonblocking(true).unwrap();
        Listeners {
            tcp,
            udp,
            unix,
            abstract_name,
        }
    }

    /// Whether anything arrived since the last look (and takes it).
    fn reached(&self) -> bool {
        let mut any = false;
        while self.tcp.accept().is_ok() {
            any = true;
        }
        let mut buf = [0u8; 64];
        while self.udp.recv_from(&mut buf).is_ok() {
            any = true;
        }
        while self.unix.accept().is_ok() {
            any = true;
        }
        any
    }

    fn attacks(&self) -> Vec<(&'static str, String)> {
        let tcp = self.tcp.local_addr().unwrap().port();
        let udp = self.udp.local_addr().unwrap().port();
        let connect = |host: &str| {
            py(&format!(
                "import socket\n\
                 s = socket.create_connection(('{host}', {tcp}), timeout=3)\n\
                 s.sendall(b'x'); print('CONNECTED')"
            ))
        };
        vec![
            ("TCP connect to 127.0.0.1", connect("127.0.0.1")),
            ("TCP connect to 127.0.0.2", connect("127.0.0.2")),
            (
                "bash /dev/tcp",
                format!("echo x > /dev/tcp/127.0.0.1/{tcp}"),
            ),
            (
                "UDP sendto",
                py(&format!(
                    "import socket\n\
                     s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                     s.sendto(b'x', ('127.0.0.1', {udp})); print('SENT')"
                )),
            ),
            (
                "abstract Unix socket of the test process",
                py(&format!(
                    "import socket\n\
                     s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
                     s.connect('\\0{}'); s.sendall(b'x'); print('CONNECTED')",
                    self.abstract_name
                )),
            ),
            (
                "UDP sendto past a notifying filter of its own that lets socket() through",
                py(&format!(
                    "{OWN_SUPERVISOR}\n\
                     s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                     s.sendto(b'x', ('127.0.0.1', {udp})); print('SENT')"
                )),
            ),
        ]
    }
}

/// Python that installs a seccomp filter handing `socket` to a listener of its own and serves
/// it from a thread, answering "carry on": were the sandbox's socket refusal a notification
/// answer that such a filter could take over, the socket would be made (x86_64 system call
/// numbers).
const OWN_SUPERVISOR: &str = "\
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
def insn(code, k, jt=0, jf=0): return struct.pack('HBBI', code, jt, jf, k)
# load nr; if socket: notify; else allow
prog = insn(0x20, 0) + insn(0x15, 41, 0, 1) + insn(0x06, 0x7fc00000) + insn(0x06, 0x7fff0000)
code = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
fprog = Fprog(4, ctypes.addressof(code))
libc.prctl(38, 1, 0, 0, 0)
fd = libc.syscall(317, 1, 8, ctypes.byref(fprog))
if fd < 0:
    print('own listener refused:', ctypes.get_errno())
    raise SystemExit(1)
def serve():
    while True:
        req = ctypes.create_string_buffer(80)
        if libc.ioctl(fd, ctypes.c_ulong(0xc0502100), req) != 0:
            return
        rid = struct.unpack_from('Q', req, 0)[0]
        resp = ctypes.create_string_buffer(struct.pack('QqiI', rid, 0, 0, 1))
        libc.ioctl(fd, ctypes.c_ulong(0xc0182101), resp)
threading.Thread(target=serve, daemon=True).start()";

#[test]
fn network_off_reaches_nothing() {
    let mut found = Findings::default();
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let l = Listeners::new(&format!("{}-{tier}", user.uid()));
            for (attack, command) in l.attacks() {
                // Every attack works unconfined.
                let c = w.call(&OFF, &command);
                control(l.reached(), &who, attack, &c);
                let c = w.call(&ww(tier), &command).ran();
                found.check(!l.reached(), &who, &format!("network off: {attack}"), &c);
            }
            // Network on reaches the host's listeners (but not the abstract socket: signals and
            // abstract sockets stay scoped whatever the network).
            let mut on = ww(tier);
            on.extend(["--sandbox-network", "on"]);
            let c = w.call(&on, &l.attacks()[0].1).ran();
            control(l.reached(), &who, "network on: TCP connect", &c);
            let c = w.call(&on, &l.attacks()[4].1).ran();
            found.check(!l.reached(), &who, "network on: abstract Unix socket", &c);
            for (family, number) in [("AF_NETLINK", 16), ("AF_PACKET", 17), ("AF_VSOCK", 40)] {
                let command = py(&format!(
                    "import socket\n\
                     s = socket.socket({number}, socket.SOCK_RAW if {number} != 40 else \
                         socket.SOCK_STREAM, 0)\n\
                     print('CREATED')"
                ));
                if family == "AF_NETLINK" {
                    let c = w.call(&OFF, &command);
                    control(
                        c.text.contains("CREATED"),
                        &who,
                        "unconfined netlink socket",
                        &c,
                    );
                }
                let c = w.call(&ww(tier), &command).ran();
                found.check(!c.text.contains("CREATED"), &who, family, &c);
            }
            if tier == "namespaces" {
                // Loopback: a loopback of its own, none of the host's listeners.
                let mut lo = ww(tier);
                lo.extend(["--sandbox-network", "loopback"]);
                let own = py("import socket\n\
                              srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n\
                              c = socket.create_connection(srv.getsockname(), timeout=3)\n\
                              srv.accept(); print('OWN-LOOPBACK-OK')");
                let c = w.call(&lo, &own).ran();
                control(c.text.contains("OWN-LOOPBACK-OK"), &who, "own loopback", &c);
                for (attack, command) in l.attacks() {
                    let c = w.call(&lo, &command).ran();
                    found.check(
                        !l.reached(),
                        &who,
                        &format!("network loopback: {attack}"),
                        &c,
                    );
                }
            }
        }
    }
    found.done();
}

/// A process of `user` outside the sandbox, in `dir`, with a secret in its environment.
fn victim(user: User, dir: &Path) -> Child {
    as_user(user, "sleep")
        .arg("300")
        .current_dir(dir)
        .env("VICTIM_TOKEN", format!("{SECRET}-IN-ENV"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Whether `child` runs (neither gone nor stopped or traced).
fn running(child: &mut Child) -> bool {
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    field("TracerPid:") == "0"
        && !field("State:").starts_with('T')
        && !field("State:").starts_with('t')
}

#[test]
fn other_processes_stay_out_of_reach() {
    let mut found = Findings::default();
    // Each attack, for a victim's pid: its name, the command, and what it would print on success.
    type Attack = (&'static str, fn(u32) -> String, &'static str);
    let attacks: [Attack; 10] = [
        (
            "kill -9 of an outside process",
            |p| format!("kill -9 {p}"),
            "",
        ),
        (
            "kill -STOP of an outside process",
            |p| format!("kill -STOP {p}"),
            "",
        ),
        (
            "kill -9 of its process group",
            |p| format!("kill -9 -- -{p}"),
            "",
        ),
        (
            "read /proc/pid/environ",
            |p| format!("cat /proc/{p}/environ"),
            "",
        ),
        ("read /proc/pid/mem", read_stack, ""),
        (
            "ptrace(PTRACE_ATTACH)",
            |p| {
                py(&format!(
                    "import ctypes\n\
                     libc = ctypes.CDLL(None, use_errno=True)\n\
                     libc.ptrace.restype = ctypes.c_long\n\
                     print('attach', libc.ptrace(16, {p}, 0, 0), ctypes.get_errno())"
                ))
            },
            "attach 0",
        ),
        (
            "process_vm_readv",
            |p| {
                py(&format!(
                    "import ctypes, re\n\
                     libc = ctypes.CDLL(None, use_errno=True)\n\
                     class IOV(ctypes.Structure):\n    \
                         _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n\
                     buf = ctypes.create_string_buffer(4096)\n\
                     local = IOV(ctypes.cast(buf, ctypes.c_void_p), 4096)\n\
                     # The victim's stack top, as the sandbox's own maps would not tell it.\n\
                     maps = open('/proc/{p}/maps').read()\n\
                     hi = int(re.search(r'-([0-9a-f]+) .*\\[stack\\]', maps).group(1), 16)\n\
                     remote = IOV(hi - 4096, 4096)\n\
                     n = libc.process_vm_readv({p}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)\n\
                     print('vm_readv', n, ctypes.get_errno(), buf.raw)"
                ))
            },
            "vm_readv 4096",
        ),
        (
            "strace -p",
            |p| format!("timeout 2 strace -p {p}"),
            "attached",
        ),
        (
            "gdb -p",
            |p| format!("timeout 10 gdb -p {p} -batch -ex 'info proc'"),
            "cmdline = ",
        ),
        (
            "write through /proc/pid/cwd (outside)",
            |p| format!("echo pwned > /proc/{p}/cwd/keep.txt; echo x > /proc/{p}/cwd/n"),
            "",
        ),
    ];
    for user in User::ALL {
        for tier in TIERS {
            let w = world(user);
            let who = who(user, tier);
            let before = reset_outside(&w);
            let mut v = victim(user, &w.outside);

            // Controls: unconfined, these reach the victim.
            let c = w.call(&OFF, &format!("cat /proc/{}/environ", v.id()));
            control(c.text.contains(SECRET), &who, "unconfined environ read", &c);
            let c = w.call(&OFF, &read_stack(v.id()));
            control(
                c.text.contains(SECRET),
                &who,
                "unconfined /proc/pid/mem read",
                &c,
            );
            let c = w.call(&OFF, &format!("kill -9 {}", v.id()));
            std::thread::sleep(Duration::from_millis(200));
            control(!running(&mut v), &who, "unconfined kill", &c);
            v = victim(user, &w.outside);

            for (attack, command, forbidden) in &attacks {
                let c = w.call(&ww(tier), &command(v.id())).ran();
                std::thread::sleep(Duration::from_millis(100));
                let alive = running(&mut v);
                found.check(
                    alive
                        && !c.text.contains(SECRET)
                        && (forbidden.is_empty() || !c.text.contains(forbidden))
                        && tree(&w.outside) == before,
                    &who,
                    attack,
                    &c,
                );
                if !alive {
                    let _ = v.kill();
                    let _ = v.wait();
                    v = victim(user, &w.outside);
                }
                reset_outside(&w);
            }

            // Tracing its own child: ptrace is refused altogether.
            let c = w
                .call(&ww(tier), "strace -f -e trace=execve /bin/true 2>&1")
                .ran();
            found.check(
                !c.text.contains("execve(\""),
                &who,
                "strace of its own child",
                &c,
            );
            // The test process itself, and the spawn helper ($PPID): signals stay scoped.
            let me = std::process::id();
            let c = w
                .call(&ww(tier), &format!("kill -0 {me} && echo SIGNALLED-TEST"))
                .ran();
            found.check(
                !c.text.contains("SIGNALLED-TEST"),
                &who,
                "kill -0 of the test",
                &c,
            );
            let c = w
                .call(&ww(tier), "kill -9 $PPID; sleep 0.3; echo still-here")
                .ran();
            found.check(
                c.text.contains("still-here") && !c.text.contains("killed by signal"),
                &who,
                "kill -9 $PPID (the spawn helper)",
                &c,
            );
            let _ = v.kill();
            let _ = v.wait();
        }
    }
    found.done();
}

/// Reads the victim `pid`'s environment from its stack through `/proc/pid/mem`.
fn read_stack(pid: u32) -> String {
    py(&format!(
        "import re\n\
         maps = open('/proc/{pid}/maps').read()\n\
         m = re.search(r'([0-9a-f]+)-([0-9a-f]+) .*\\[stack\\]', maps)\n\
         lo, hi = int(m.group(1), 16), int(m.group(2), 16)\n\
         f = open('/proc/{pid}/mem', 'rb'); f.seek(lo)\n\
         data = f.read(hi - lo); i = data.find(b'VICTIM_TOKEN=')\n\
         print(data[i:i + 40])"
    ))
}

/// What a later `git` run by the user would obey: hooks, configuration, `.gitmodules`, and where
/// the git directory is, for the workspace's repository and a nested one.
fn git_state(w: &World) -> String {
    let mut out = String::new();
    for repo in [w.work.clone(), w.work.join("sub")] {
        let git = repo.join(".git");
        let kind = std::fs::symlink_metadata(&git).map(|m| m.file_type());
        out.push_str(&format!("{}: .git {kind:?}\n", repo.display()));
        out.push_str(&format!("{:?}\n", tree(&git.join("hooks"))));
        for file in [git.join("config"), repo.join(".gitmodules")] {
            out.push_str(&format!("{:?}\n", std::fs::read_to_string(&file).ok()));
        }
    }
    out.push_str(&format!(
        "{:?}\n",
        std::fs::read_to_string(w.work.join("m/.git")).ok()
    ));
    out
}

/// `git commit --allow-empty` in `dir`, run by the user outside any sandbox: what runs its
/// hooks.
fn user_commits(w: &World, dir: &Path) -> std::process::Output {
    as_user(w.user, "git")
        .args(["-c", "user.email=a@b", "-c", "user.name=n"])
        .args(["commit", "-q", "--allow-empty", "-m", "later"])
        .current_dir(dir)
        .env("HOME", &w.home)
        // Never a repository above the scratch world (the checkout's own, say).
        .env(
            "GIT_CEILING_DIRECTORIES",
            w.work.parent().expect("the world's directory"),
        )
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
}

/// A repository in the workspace (with `.gitmodules`), a nested one in `sub`, a checkout in `m`
/// whose `.git` is a file naming its git directory (in `.git/modules/m`, as a submodule's), and
/// an evil hook in `evil/` whose running would create `outside/pwned`.
fn git_world(user: User) -> World {
    let w = world(user);
    let o = w.outside.display().to_string();
    let setup = format!(
        "set -e\n\
         git init -q . && git init -q sub\n\
         printf '[submodule \"lib\"]\\n\\tpath = lib\\n\\turl = https://example.invalid/lib\\n' \
           > .gitmodules\n\
         mkdir evil && printf '#!/bin/sh\\ntouch {o}/pwned\\n' > evil/pre-commit\n\
         chmod +x evil/pre-commit\n\
         git -c user.email=a@b -c user.name=n commit -q --allow-empty -m init\n\
         git -C sub -c user.email=a@b -c user.name=n commit -q --allow-empty -m init\n\
         mkdir .git/modules && git init -q --separate-git-dir \"$PWD/.git/modules/m\" m\n\
         git -C m -c user.email=a@b -c user.name=n commit -q --allow-empty -m init\n\
         echo SETUP-DONE"
    );
    let c = w.call(&OFF, &setup);
    assert!(c.text.contains("SETUP-DONE"), "git setup: {c:?}");
    w
}

#[test]
fn git_hooks_and_configuration_stay_protected() {
    let mut found = Findings::default();
    let attacks: Vec<(&str, &str)> = vec![
        (
            "write .git/hooks/pre-commit",
            "cp evil/pre-commit .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
        ),
        (
            "git config core.hooksPath",
            "git config core.hooksPath \"$PWD/evil\"",
        ),
        (
            "append to .git/config",
            "printf '[core]\\n\\thooksPath = %s/evil\\n' \"$PWD\" >> .git/config",
        ),
        (
            "replace .git/hooks by a symlink",
            "rm -rf .git/hooks; ln -s \"$PWD/evil\" .git/hooks",
        ),
        (
            "rename .git/hooks and make a new one",
            "mv .git/hooks .git/hooks-old; mkdir .git/hooks; cp evil/pre-commit .git/hooks/",
        ),
        (
            "append to .gitmodules",
            "echo '[submodule \"evil\"]' >> .gitmodules",
        ),
        ("rm .gitmodules", "rm -f .gitmodules"),
        (
            "a daemon writing the hook after the command",
            "(setsid sh -c 'sleep 1; cp evil/pre-commit .git/hooks/pre-commit' \
             > /dev/null 2>&1 < /dev/null &)",
        ),
        (
            "move .git away and put a writable copy in its place",
            "mv .git .git-old && cp -r .git-old .git && git config core.hooksPath \"$PWD/evil\"",
        ),
        (
            "replace .git by a gitdir file naming a writable copy",
            "cp -r .git g2 && git --git-dir=g2 config core.hooksPath \"$PWD/evil\" && \
             mv .git .git-old && echo \"gitdir: $PWD/g2\" > .git",
        ),
        (
            // git reads the configuration and hooks of the directory .git/commondir names.
            "point .git/commondir at a writable copy",
            "cp -r .git g3 && git --git-dir=g3 config core.hooksPath \"$PWD/evil\" && \
             echo \"$PWD/g3\" > .git/commondir",
        ),
        (
            "hook of a nested repository",
            "cp evil/pre-commit sub/.git/hooks/pre-commit; git -C sub config core.hooksPath \"$PWD/evil\"",
        ),
        (
            "point a checkout's .git file at a writable copy of its git directory",
            "cp -r .git/modules/m g5 && git --git-dir=g5 config core.hooksPath \"$PWD/evil\" && \
             echo \"gitdir: $PWD/g5\" > m/.git",
        ),
    ];
    for user in User::ALL {
        // Control: unconfined, the first attack makes the user's next commit run the hook.
        let w = git_world(user);
        let c = w.call(&OFF, attacks[0].1);
        user_commits(&w, &w.work);
        control(
            w.outside.join("pwned").exists(),
            &format!("{user:?}"),
            "unconfined hook",
            &c,
        );

        for tier in TIERS {
            let who = who(user, tier);
            // Committing inside the sandbox still works.
            let w = git_world(user);
            let before = git_state(&w);
            let c = w
                .call(
                    &ww(tier),
                    "echo a > f && git add f && git -c user.email=a@b -c user.name=n commit -q -m add \
                     && echo COMMITTED",
                )
                .ran();
            let log = as_user(user, "git")
                .args(["log", "--format=%s"])
                .current_dir(&w.work)
                .output()
                .unwrap();
            control(
                c.text.contains("COMMITTED")
                    && String::from_utf8_lossy(&log.stdout).starts_with("add\n"),
                &who,
                "git add + commit in the sandbox",
                &c,
            );
            found.check(git_state(&w) == before, &who, "an ordinary commit", &c);

            for (attack, command) in &attacks {
                let w = git_world(user);
                let before = git_state(&w);
                let c = w.call(&ww(tier), command).ran();
                if attack.contains("daemon") {
                    std::thread::sleep(Duration::from_millis(2500));
                }
                let after = git_state(&w);
                user_commits(&w, &w.work);
                user_commits(&w, &w.work.join("sub"));
                user_commits(&w, &w.work.join("m"));
                let pwned = w.outside.join("pwned").exists();
                found.check(
                    after == before && !pwned,
                    &who,
                    &format!("{attack} (hook ran on the user's next commit: {pwned})"),
                    &c,
                );
            }
        }
    }
    found.done();
}
