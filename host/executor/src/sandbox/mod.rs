//! The sandbox: what a command may read, write and reach, enforced by the kernel in the spawn
//! path (an extension of the executor contract, off unless configured).
//!
//! - [`SandboxConfig`] is what the operator asks for; [`Sandbox::resolve`] turns it into the
//!   policy in force after a [`preflight`] of what the machine supports, refusing a mode that
//!   cannot be enforced (nothing ever runs unconfined silently).
//! - The policy travels to the spawn helper factory once ([`policy`]); each helper prepares, while
//!   idle, the Landlock rulesets ([`landlock`]), the seccomp filter ([`seccomp`]) and, in the
//!   namespace tier, its own namespaces ([`namespaces`]) ([`prepare`]); bash's side of the fork
//!   only applies them ([`apply`]), right before `exec`.
//! - Inside writable roots, git's hooks and configuration stay protected ([`protect`]): bound
//!   read-only in the namespace tier, checked and restored after the command in the Landlock tier.
//!
//! Everything a command starts inherits the sandbox; nothing in it can lift it (a Landlock domain
//! only narrows, and the seccomp filter refuses new namespaces, `ptrace` and io_uring).

pub mod allow_net;
pub(crate) mod apply;
pub(crate) mod bpf;
pub(crate) mod error;
pub(crate) mod judge;
pub(crate) mod landlock;
pub(crate) mod log;
pub(crate) mod namespaces;
pub(crate) mod notify;
pub(crate) mod policy;
pub(crate) mod preflight;
pub(crate) mod prepare;
pub(crate) mod protect;
pub(crate) mod proxy;
pub(crate) mod seccomp;
pub mod upstream;

use std::fmt;
use std::path::{Path, PathBuf};

pub use preflight::Support;

/// How much of the filesystem a command may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// No sandbox: commands have the host's full authority.
    #[default]
    Off,
    /// Everything readable but the denied paths; nothing writable but a private temporary
    /// directory (`TMPDIR`) and harmless devices (`/dev/null` and the like).
    ReadOnly,
    /// As `ReadOnly`, plus the session's working directory tree, `/tmp` and the configured
    /// extra directories; git's hooks and configuration inside them stay protected.
    WorkspaceWrite,
}

/// What a sandboxed command may reach on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Nothing: no socket of any family but Unix.
    #[default]
    Off,
    /// Its own loopback interface only (a network namespace of its own): local servers it
    /// starts, nothing of the host's or beyond.
    Loopback,
    /// The host's network, unrestricted.
    On,
}

/// Which enforcement the sandbox may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierPreference {
    /// The namespace tier where the machine allows it, else the Landlock tier.
    #[default]
    Auto,
    /// Require the namespace tier.
    Namespaces,
    /// The Landlock tier only, even where namespaces are available.
    Landlock,
}

/// The enforcement in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Landlock and seccomp, plus a user, mount and network namespace per command: protected
    /// subpaths bound read-only, a loopback-only network where asked.
    Namespaces,
    /// Landlock and seccomp only: protected subpaths checked and restored after the command;
    /// no loopback-only network.
    Landlock,
}

/// What the operator asks of the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxConfig {
    /// `--sandbox`.
    pub mode: SandboxMode,
    /// `--sandbox-network`.
    pub network: NetworkMode,
    /// `--sandbox-allow-write`: more writable directories (workspace-write only).
    pub allow_write: Vec<PathBuf>,
    /// `--sandbox-deny-read`: more paths no command may read, besides [`default_denied`].
    pub deny_read: Vec<PathBuf>,
    /// `--sandbox-allow-net`: hosts a command may reach through the host's proxy
    /// ([`proxy`]), in the namespace tier; each command then has a loopback interface of its
    /// own, where the proxy listens.
    pub allow_net: Vec<String>,
    /// `--sandbox-tier`.
    pub tier: TierPreference,
    /// Directories of the host's own sockets (its executor sessions'), which no command may
    /// reach: denied reads in both tiers, and in the namespace tier hidden under an empty,
    /// read-only directory, so that a command can neither list them nor connect to a socket in
    /// them (Landlock controls connecting to a socket by path only from ABI 9). One holding a
    /// writable root is only denied.
    pub hide: Vec<PathBuf>,
}

impl SandboxConfig {
    /// Refuses what only a sandbox can give when there is none (`--sandbox off`): hosts to allow
    /// would otherwise be ignored while every host is reachable.
    pub fn check_off(&self) -> Result<(), SandboxError> {
        match self.allow_net.first() {
            Some(host) if self.mode == SandboxMode::Off => Err(SandboxError(format!(
                "--sandbox-allow-net {host} needs --sandbox read-only or workspace-write \
                 (without a sandbox, commands reach every host)"
            ))),
            _ => Ok(()),
        }
    }
}

/// The sandbox in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The mode (never [`SandboxMode::Off`]).
    pub mode: SandboxMode,
    /// The tier enforcing it.
    pub tier: Tier,
    /// The network a command may reach.
    pub network: NetworkMode,
    /// Directories a command may write beneath (besides its private `TMPDIR` and devices),
    /// canonical.
    pub writable: Vec<PathBuf>,
    /// Paths no command may read, as configured (resolved by the helper factory, through the
    /// part that exists: one created later is denied too).
    pub deny_read: Vec<PathBuf>,
    /// Where each command's private temporary directory is made.
    pub tmp_base: PathBuf,
    /// Directories hidden from commands in the namespace tier ([`SandboxConfig::hide`]), also
    /// among `deny_read`.
    pub hide: Vec<PathBuf>,
    /// The Landlock ABI of the kernel.
    pub landlock_abi: u32,
    /// The hosts a command may reach through the proxy (`--sandbox-allow-net`); the network is
    /// then [`NetworkMode::Loopback`].
    pub allow_net: Vec<allow_net::HostPattern>,
    /// Where the proxy listens in each command's network namespace (`127.0.0.1`), when there is
    /// one.
    pub proxy_port: Option<u16>,
    /// The proxies of the host's environment the proxy goes through (`https_proxy`, ...).
    pub upstreams: upstream::Upstreams,
    /// Held on `tmp_base` while the host runs.
    base_lock: BaseLock,
}

/// The lock a host holds on its temporary base for as long as it runs (an open description of
/// the directory, locked with `flock`, which the kernel lets go when the host dies however it
/// dies). A base that nobody holds is a dead host's, and the next host to start removes it:
/// every base is a rule in every command's sandbox, and a few hundred left by killed hosts made
/// each sandboxed call 0.6 ms slower here.
#[derive(Debug, Clone)]
struct BaseLock(Option<std::sync::Arc<std::os::fd::OwnedFd>>);

impl PartialEq for BaseLock {
    fn eq(&self, other: &BaseLock) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for BaseLock {}

/// The oldest Landlock ABI the sandbox can be enforced with: 6 (Linux 6.12), the first that
/// scopes signals (without it a command could kill its helper before the after-care, the host,
/// or another command) and abstract Unix sockets; 3 and 4 bring truncation and TCP.
pub const MIN_LANDLOCK_ABI: u32 = 6;

/// The secrets no sandboxed command may read, under `home`.
pub fn default_denied(home: &Path) -> Vec<PathBuf> {
    [
        ".ssh",
        ".aws",
        ".azure",
        ".config/gcloud",
        ".kube",
        ".docker/config.json",
        ".gnupg",
        ".netrc",
        ".git-credentials",
        ".config/gh",
        ".npmrc",
        ".pypirc",
        ".cargo/credentials",
        ".cargo/credentials.toml",
        // The host's own configuration and cache.
        ".config/dsh-host",
        ".cache/dsh-host",
    ]
    .iter()
    .map(|p| home.join(p))
    .collect()
}

/// Why a sandbox cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SandboxError(pub String);

impl Sandbox {
    /// What the tools tell the model of this sandbox.
    pub fn described(&self) -> crate::SandboxPolicy {
        let text = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect();
        crate::SandboxPolicy {
            mode: self.mode,
            writable: text(&self.writable),
            denied_reads: text(&self.deny_read),
            network: self.network,
            allowed_hosts: self.allow_net.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// The policy for `config`, given what the machine supports; `cwd` is the session's working
    /// directory (the workspace). `None` for [`SandboxMode::Off`].
    pub fn resolve(
        config: &SandboxConfig,
        cwd: &Path,
        support: &Support,
    ) -> Result<Option<Sandbox>, SandboxError> {
        config.check_off()?;
        if config.mode == SandboxMode::Off {
            return Ok(None);
        }
        let allow_net = config
            .allow_net
            .iter()
            .map(|text| {
                allow_net::HostPattern::parse(text)
                    .map_err(|err| SandboxError(format!("--sandbox-allow-net {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mode_flag = format!("--sandbox {}", config.mode);
        let off = "--sandbox off runs commands unconfined";
        let abi = match &support.landlock {
            Ok(abi) if *abi >= MIN_LANDLOCK_ABI => *abi,
            Ok(abi) => {
                return Err(SandboxError(format!(
                    "{mode_flag} needs Landlock ABI {MIN_LANDLOCK_ABI} (Linux 6.12) or later; \
                     this kernel has ABI {abi} ({off})"
                )));
            }
            Err(why) => {
                return Err(SandboxError(format!(
                    "{mode_flag} needs Landlock, which is unavailable: {why} ({off})"
                )));
            }
        };
        if let Err(why) = &support.seccomp {
            return Err(SandboxError(format!(
                "{mode_flag} needs seccomp filters, which are unavailable: {why} ({off})"
            )));
        }
        let tier = match (config.tier, &support.namespaces) {
            (TierPreference::Landlock, _) => Tier::Landlock,
            (_, Ok(())) => Tier::Namespaces,
            (TierPreference::Auto, Err(_)) => Tier::Landlock,
            (TierPreference::Namespaces, Err(why)) => {
                return Err(SandboxError(format!(
                    "--sandbox-tier namespaces needs user, mount and network namespaces, which \
                     are unavailable: {why} (--sandbox-tier landlock or auto uses Landlock and \
                     seccomp only)"
                )));
            }
        };
        let why_no_namespaces = || match &support.namespaces {
            Err(why) => format!("namespaces are unavailable: {why}"),
            Ok(()) => "--sandbox-tier landlock leaves them out".to_string(),
        };
        if let Some(host) = allow_net.first() {
            if config.network == NetworkMode::On {
                return Err(SandboxError(format!(
                    "--sandbox-allow-net {host}: --sandbox-network on already reaches every \
                     host (--sandbox-network off or loopback limits commands to the allowed \
                     hosts)"
                )));
            }
            if tier != Tier::Namespaces {
                return Err(SandboxError(format!(
                    "--sandbox-allow-net {host} needs a network namespace per command, and {} \
                     (without --sandbox-allow-net, --sandbox-network off or on works without)",
                    why_no_namespaces()
                )));
            }
        }
        if config.network == NetworkMode::Loopback && tier != Tier::Namespaces {
            return Err(SandboxError(format!(
                "--sandbox-network loopback needs a network namespace per command, and {} \
                 (--sandbox-network off or on works without)",
                why_no_namespaces()
            )));
        }
        // The proxy listens on each command's own loopback interface.
        let network = match allow_net.is_empty() {
            true => config.network,
            false => NetworkMode::Loopback,
        };
        let canonical = |flag: &str, dir: &Path| -> Result<PathBuf, SandboxError> {
            let real = std::fs::canonicalize(dir)
                .map_err(|err| SandboxError(format!("{flag} {}: {err}", dir.display())))?;
            if !real.is_dir() {
                return Err(SandboxError(format!(
                    "{flag} {}: not a directory",
                    dir.display()
                )));
            }
            Ok(real)
        };
        let mut writable = Vec::new();
        match config.mode {
            SandboxMode::WorkspaceWrite => {
                writable.push(canonical("the working directory", cwd)?);
                writable.push(canonical("the temporary directory", Path::new("/tmp"))?);
                for dir in &config.allow_write {
                    writable.push(canonical("--sandbox-allow-write", dir)?);
                }
            }
            SandboxMode::ReadOnly => {
                if let Some(dir) = config.allow_write.first() {
                    return Err(SandboxError(format!(
                        "--sandbox-allow-write {} needs --sandbox workspace-write",
                        dir.display()
                    )));
                }
            }
            SandboxMode::Off => unreachable!("handled above"),
        }
        writable.dedup();
        // The secrets of the home directory HOME names and of the user's own (from the password
        // database): a missing HOME must not leave them readable.
        let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .into_iter()
            .chain(password_home())
            .collect();
        homes.dedup();
        if homes.is_empty() {
            return Err(SandboxError(
                "no home directory to deny secrets in: HOME is unset and the user has no entry \
                 in the password database (set HOME)"
                    .to_string(),
            ));
        }
        let mut deny_read: Vec<PathBuf> = homes.iter().flat_map(|h| default_denied(h)).collect();
        // The host's own runtime files (its generated HTTP token, its executor sessions'
        // sockets). The dsh-host binary names its fallback (the cache directory, or a directory
        // in `/var/tmp`) itself, among `config.deny_read`.
        if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            deny_read.push(PathBuf::from(runtime).join("dsh-host"));
        }
        for path in &config.deny_read {
            if !path.is_absolute() {
                return Err(SandboxError(format!(
                    "--sandbox-deny-read {}: expected an absolute path",
                    path.display()
                )));
            }
            deny_read.push(path.clone());
        }
        let mut hide = Vec::new();
        for path in &config.hide {
            if !path.is_absolute() {
                return Err(SandboxError(format!(
                    "a directory to hide, {}: expected an absolute path",
                    path.display()
                )));
            }
            deny_read.push(path.clone());
            // Not one holding the working directory, a writable root or a home (or `/`): the
            // commands' work would go with it.
            let real = landlock::resolve(path).unwrap_or_else(|| path.clone());
            let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
            let holds = |dir: &Path| dir.starts_with(&real);
            if real.parent().is_some()
                && !holds(&cwd)
                && !writable.iter().any(|root| holds(root))
                && !homes.iter().any(|home| {
                    holds(home) || holds(&std::fs::canonicalize(home).unwrap_or_default())
                })
            {
                hide.push(path.clone());
            }
        }
        // One rule a path (the host may name its runtime directory twice).
        let mut seen = std::collections::HashSet::new();
        deny_read.retain(|path| seen.insert(path.clone()));
        let upstreams = match allow_net.first() {
            None => upstream::Upstreams::default(),
            Some(host) => upstream::Upstreams::from_env(|name| std::env::var_os(name))
                .map_err(|why| SandboxError(format!("--sandbox-allow-net {host}: {why}")))?,
        };
        // Made last, once nothing can refuse the sandbox any more (a refusal leaves nothing).
        let proxy_port = match allow_net.is_empty() {
            true => None,
            false => Some(proxy_port()?),
        };
        let (tmp_parent, tmp_base, base_lock) = tmp_base(&writable)?;
        // Other commands' private temporary directories, of this host and of others.
        deny_read.push(tmp_parent);
        Ok(Some(Sandbox {
            mode: config.mode,
            tier,
            network,
            writable,
            deny_read,
            tmp_base,
            hide,
            landlock_abi: abi,
            allow_net,
            proxy_port,
            upstreams,
            base_lock,
        }))
    }

    /// The policy as the spawn helper gets it with each request.
    pub(crate) fn policy(&self) -> policy::Policy {
        policy::Policy {
            mode: self.mode,
            tier: self.tier,
            network: self.network,
            writable: self.writable.clone(),
            deny_read: self.deny_read.clone(),
            tmp_base: self.tmp_base.clone(),
            hide: self.hide.clone(),
            proxy_port: self.proxy_port,
        }
    }
}

/// A port for the proxy, the same in every command's network namespace (each has its own
/// loopback, where nothing else listens before the command runs): drawn at random from the
/// range Linux gives no ephemeral ports by default, so that a command's own servers, which
/// mostly use fixed low ports, rarely want it.
fn proxy_port() -> Result<u16, SandboxError> {
    let random = crate::hex::random_token(2)
        .map_err(|err| SandboxError(format!("no randomness for the sandbox: {err}")))?;
    let value = u16::from_str_radix(&random[..4], 16).unwrap_or(0);
    Ok(20_000 + value % 12_000)
}

/// The directory each command's private `TMPDIR` is made in: one per host process, `0700`,
/// inside one parent per user (`dsh-sandbox-<uid>`, `0700`, which every sandbox denies: no
/// command reads another's `TMPDIR`, of this host or another), outside `/tmp` where possible
/// (`/var/tmp`), so that a command that may write `/tmp` cannot reach it. Removed at shutdown;
/// those of hosts that died without one are removed here ([`remove_dead_bases`]).
fn tmp_base(writable: &[PathBuf]) -> Result<(PathBuf, PathBuf, BaseLock), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = rustix::process::getuid().as_raw();
    let parent = [Path::new("/var/tmp").to_path_buf(), std::env::temp_dir()]
        .into_iter()
        .find(|dir| rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok())
        .ok_or_else(|| SandboxError("no writable /var/tmp or temporary directory".into()))?;
    let parent = std::fs::canonicalize(&parent)
        .map_err(|err| SandboxError(format!("{}: {err}", parent.display())))?
        .join(format!("dsh-sandbox-{uid}"));
    if let Some(root) = writable.iter().find(|root| parent.starts_with(root)) {
        return Err(SandboxError(format!(
            "the commands' private temporary directories would be under {} ({}), which commands \
             may write; make /var/tmp writable for this user, or leave {} out of the writable \
             roots",
            parent.display(),
            root.display(),
            root.display()
        )));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(SandboxError(format!("{}: {err}", parent.display()))),
    }
    // Ours, a directory (not a symlink someone planted), and no one else's to enter.
    let meta = std::fs::symlink_metadata(&parent)
        .map_err(|err| SandboxError(format!("{}: {err}", parent.display())))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(SandboxError(format!(
            "{} is not a directory of this user's with mode 0700",
            parent.display()
        )));
    }
    // Held while the dead hosts' bases go and this one is made and locked, so that no other
    // host starting meanwhile takes this one, not locked yet, for a dead host's. Without it
    // (another host stopped while holding it, or a file system without locks) nothing is
    // removed, and this host's pid, alive, keeps its base from the others.
    let parent_lock = lock_dir(&parent, LOCK_WAIT);
    // Removed only where no one else can have replaced the directory since it was checked: it
    // is still the one checked, in a directory where only its owner may rename it (`/var/tmp`
    // and `/tmp` are sticky).
    let settled_parent = parent_lock.as_ref().is_some_and(|fd| {
        let still = rustix::fs::fstat(fd)
            .is_ok_and(|now| (now.st_dev, now.st_ino) == (meta.dev(), meta.ino()));
        let guarded = parent
            .parent()
            .and_then(|up| std::fs::metadata(up).ok())
            .is_some_and(|up| {
                (up.uid() == 0 || up.uid() == uid)
                    && (up.mode() & 0o1000 != 0 || up.mode() & 0o022 == 0)
            });
        still && guarded
    });
    if settled_parent {
        remove_dead_bases(&parent);
    }
    let random = crate::hex::random_token(6)
        .map_err(|err| SandboxError(format!("no randomness for the sandbox: {err}")))?;
    let dir = parent.join(format!("{}-{random}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|err| SandboxError(format!("{}: {err}", dir.display())))?;
    // Another host's look at it, to see whether it was a dead host's, lets go at once. Where
    // the lock does not come, the base goes unlocked (its live pid keeps it).
    let lock = lock_dir(&dir, LOCK_WAIT);
    Ok((parent, dir, BaseLock(lock.map(std::sync::Arc::new))))
}

/// How long a host waits for a lock on the bases' directory or its own base.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `dir`, opened without following a symlink and locked exclusively (`flock`), waiting up to
/// `wait` for another holder to let go; none where the lock does not come or the file system
/// has no locks.
fn lock_dir(dir: &Path, wait: std::time::Duration) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Some(fd),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(_) => return None,
        }
    }
}

/// Removes, from `parent`, the temporary bases (`<pid>-<random>`) of hosts that died without
/// removing theirs: those no host holds locked ([`BaseLock`]) and whose pid runs nothing. (An
/// unlocked base of a live pid may be a host's that takes no lock: it stays.)
fn remove_dead_bases(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // ESRCH: no such process; EPERM: someone else's, alive. A live pid's base is not even
        // looked at (a look takes its lock for a moment).
        if rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH) {
            continue;
        }
        let path = entry.path();
        let held = lock_dir(&path, std::time::Duration::ZERO).is_none();
        if !held && let Err(err) = std::fs::remove_dir_all(&path) {
            tracing::debug!(%err, path = %path.display(), "a dead host's sandbox base");
        }
    }
}

/// The user's home directory from the password database.
fn password_home() -> Option<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: getpwuid_r with a zeroed passwd, a buffer of the size given and a result pointer;
    // the strings it sets point into `buf`, read before `buf` goes.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) != 0
            || result.is_null()
            || pwd.pw_dir.is_null()
        {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir);
        use std::os::unix::ffi::OsStrExt;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxMode::Off => "off",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
        })
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkMode::Off => "off",
            NetworkMode::Loopback => "loopback",
            NetworkMode::On => "on",
        })
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Namespaces => {
                "namespaces (Landlock, seccomp, user + mount + network namespaces; read-only \
                 filesystems outside the writable roots)"
            }
            Tier::Landlock => {
                "landlock (Landlock and seccomp; protected paths checked and restored after each \
                 command; modes, owners, times and extended attributes of files outside the \
                 roots not protected)"
            }
        })
    }
}
