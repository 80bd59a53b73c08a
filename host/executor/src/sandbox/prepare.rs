//! The spawn helper's part of a sandboxed start. While idle (its command not known yet), it
//! prepares everything the policy alone decides ([`Confined::prepare`]): the Landlock rulesets,
//! the seccomp filter, the command's private `TMPDIR`, and in the namespace tier the
//! namespaces themselves, which the helper enters. Once the request names the workdir, the
//! protected paths there are bound read-only or snapshotted ([`Confined::for_workdir`]). After
//! the command, the after-care: a restore (Landlock tier) and the `TMPDIR` removed.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::os::fd::OwnedFd;

use super::apply::Prepared;
use super::bpf::Program;
use super::judge::Judge;
use super::landlock::{Freshness, GrantIndex, GrantLookup};
use super::namespaces::{self, NsSetup};
use super::policy::Policy;
use super::protect::{self, Nested, Snapshot};
use super::{NetworkMode, Tier};

/// What every command's sandbox starts from, made once by the helper factory (every helper it
/// forks inherits it) and again when a directory walked for it changed: the read layer, the
/// walk of the temporary directory layer and the seccomp filter.
#[derive(Debug)]
pub(crate) struct Shared {
    abi: u32,
    read: ReadLayers,
    filter: Program,
}

impl Shared {
    pub(crate) fn make(policy: &Policy) -> io::Result<Shared> {
        let abi = super::landlock::abi()?;
        Ok(Shared {
            abi,
            read: ReadLayers::make(abi, &policy.deny_read, &policy.writable, &policy.tmp_base)?,
            filter: super::seccomp::filter(policy.network).map_err(io::Error::other)?,
        })
    }

    /// Whether every walked directory is as it was.
    pub(crate) fn current(&self) -> bool {
        self.read.current()
    }
}

/// The read layer, and where each command's own layer keeps it from the others' `TMPDIR`s.
#[derive(Debug)]
struct ReadLayers {
    /// Shared by every command (its descriptor is duplicated for each).
    layer: OwnedFd,
    /// What the layer's grants were made from.
    freshness: Freshness,
    /// What the read layer granted (this host's `TMPDIR`s whole).
    index: Arc<GrantIndex>,
    /// The directory of every host's private `TMPDIR`s, which each command's own layer
    /// grants nothing beneath but its own.
    tmp_parent: PathBuf,
}

impl ReadLayers {
    fn make(
        abi: u32,
        deny_read: &[PathBuf],
        writable: &[PathBuf],
        tmp_base: &Path,
    ) -> io::Result<ReadLayers> {
        // Files move freely beneath the writable roots and the private `TMPDIR`s (the write
        // layer grants each command its own).
        let mut refer = writable.to_vec();
        refer.push(tmp_base.to_path_buf());
        // This host's `TMPDIR`s are readable whole (the command's own layer keeps each to its
        // command).
        let whole = [tmp_base.to_path_buf()];
        let read = super::landlock::read_layer(abi, deny_read, &whole, &refer)?;
        Ok(ReadLayers {
            layer: read.layer,
            index: read.index,
            freshness: read.freshness,
            // The directory of every host's: unlike this host's, it changes whenever a host
            // starts, and is denied by the read layer all the same.
            tmp_parent: tmp_base.parent().unwrap_or(tmp_base).to_path_buf(),
        })
    }

    fn current(&self) -> bool {
        self.freshness.current()
    }

    /// The layers of the command whose `TMPDIR` is `tmpdir` and whose writable roots (that
    /// one among them) are `writable`, in the order they are applied: its own, and the shared one
    /// (see [`super::landlock`]).
    fn for_command(
        &self,
        abi: u32,
        tmpdir: &Path,
        writable: &[PathBuf],
        network: NetworkMode,
    ) -> io::Result<CommandLayers> {
        let own = super::landlock::command_layer(
            abi,
            &self.tmp_parent,
            tmpdir,
            writable,
            network == NetworkMode::Off,
        )?;
        Ok(CommandLayers {
            grants: [&self.index, &own.index]
                .map(|index| GrantLookup::new(index.clone()))
                .into(),
            freshness: [self.freshness.clone(), own.freshness],
            landlock: vec![own.layer, self.layer.try_clone()?],
        })
    }
}

/// One command's Landlock layers, in the order they are applied.
struct CommandLayers {
    landlock: Vec<OwnedFd>,
    /// What the judge asks of each layer as reading goes through them.
    grants: Vec<GrantLookup>,
    /// What each layer's grants were made from.
    freshness: [Freshness; 2],
}

/// One command's sandbox, held by its helper.
#[derive(Debug)]
pub(crate) struct Confined {
    pub(crate) prepared: Prepared,
    tier: Tier,
    writable: Vec<PathBuf>,
    /// Whether the read layers were made before a walked directory changed (this helper was
    /// made ahead of its command): then they are remade.
    freshness: [Freshness; 2],
    abi: u32,
    deny_read: Vec<PathBuf>,
    tmp_base: PathBuf,
    /// The command's private temporary directory (its `TMPDIR`).
    tmpdir: PathBuf,
    /// The protected paths as they were (Landlock tier).
    snapshot: Option<Snapshot>,
    /// The repositories nested in the writable roots, looked for while idle.
    nested: Nested,
    network: NetworkMode,
    /// The protected paths bound read-only (namespace tier), once known.
    bound: Vec<PathBuf>,
    /// What the supervisor judges by but the protected paths, resolved while the helper is
    /// idle: once bash runs, its first file call waits for the supervisor.
    judged: Judge,
    /// Where the host's proxy takes the command's connections (`--sandbox-allow-net`), until
    /// handed to the host.
    pub(crate) proxy: Option<OwnedFd>,
}

impl Confined {
    /// Prepares what `policy` decides, in the helper (single-threaded), before any request. In
    /// the namespace tier the helper enters the namespaces here; its death signal is re-armed
    /// after (new credentials clear it).
    pub(crate) fn prepare(policy: &Policy, shared: &Shared) -> io::Result<Confined> {
        let abi = shared.abi;
        let tmpdir = tmpdir_of(policy, rustix::process::getpid().as_raw_nonzero().get());
        std::fs::DirBuilder::new().mode(0o700).create(&tmpdir)?;
        // SAFETY: the helper is single-threaded; nothing reads the environment concurrently.
        unsafe {
            std::env::set_var("TMPDIR", &tmpdir);
            // Where a sandboxed command would find an agent or a bus to act through outside it.
            std::env::remove_var("DBUS_SESSION_BUS_ADDRESS");
        }
        let mut writable = policy.writable.clone();
        writable.push(tmpdir.clone());
        let layers = shared
            .read
            .for_command(abi, &tmpdir, &writable, policy.network)?;
        let filter = shared.filter.clone();
        if policy.tier == Tier::Namespaces {
            NsSetup::new(
                policy.network != NetworkMode::On,
                policy.network == NetworkMode::Loopback,
            )
            .enter()
            .map_err(|(step, err)| io::Error::new(err.kind(), format!("{step}: {err}")))?;
            namespaces::read_only_but(&writable)?;
            // Denied paths inside a writable root (a workspace holding `~/.ssh`): not writable
            // either, so that no command plants an `authorized_keys` or an ssh `config`.
            let denied_inside: Vec<PathBuf> = policy
                .deny_read
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .filter(|p| writable.iter().any(|root| p.starts_with(root)))
                .collect();
            namespaces::bind_read_only(&denied_inside)?;
            // The agent's socket, and the host's own (its executor sessions').
            let sockets: Vec<PathBuf> = std::env::var_os("SSH_AUTH_SOCK")
                .map(PathBuf::from)
                .into_iter()
                .chain(policy.hide.iter().cloned())
                .collect();
            namespaces::hide_sockets(&sockets)?;
        }
        let proxy = match policy.proxy_port {
            Some(port) if policy.tier == Tier::Namespaces => Some(proxy_listener(port)?),
            Some(_) => {
                return Err(io::Error::other(
                    "the proxy needs a network namespace per command",
                ));
            }
            None => None,
        };
        // SAFETY: as above.
        unsafe { std::env::remove_var("SSH_AUTH_SOCK") };
        // After the namespaces: entering a user namespace fills the bounding set again.
        super::apply::drop_bounding_set()?;
        Ok(Confined {
            prepared: Prepared {
                landlock: layers.landlock,
                filter,
            },
            network: policy.network,
            tier: policy.tier,
            writable: policy.writable.clone(),
            freshness: layers.freshness,
            abi,
            deny_read: policy.deny_read.clone(),
            tmp_base: policy.tmp_base.clone(),
            judged: judge_base(policy, &tmpdir, layers.grants),
            tmpdir,
            snapshot: None,
            nested: Nested::find(&policy.writable),
            bound: Vec::new(),
            proxy,
        })
    }

    /// Protects git's paths under the writable roots as seen from `workdir`: bound read-only in
    /// the helper's mount namespace (namespace tier) or snapshotted (Landlock tier).
    pub(crate) fn for_workdir(&mut self, workdir: &Path) -> io::Result<()> {
        if !self.freshness.iter().all(Freshness::current) {
            let read = ReadLayers::make(self.abi, &self.deny_read, &self.writable, &self.tmp_base)?;
            let mut writable = self.writable.clone();
            writable.push(self.tmpdir.clone());
            let layers = read.for_command(self.abi, &self.tmpdir, &writable, self.network)?;
            self.prepared.landlock = layers.landlock;
            self.freshness = layers.freshness;
            // A walked directory changed: a denied path may resolve elsewhere now.
            self.judged.denied = denied_paths(&self.deny_read);
            self.judged.grants = layers.grants;
        }
        if !self.nested.current() {
            self.nested = Nested::find(&self.writable);
        }
        let protected = protect::find(&self.writable, workdir, &self.nested.repos);
        // A mount follows a symlink: those are left to the snapshot.
        let exists = |path: &PathBuf| {
            std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_symlink())
        };
        let snapshot = match self.tier {
            Tier::Namespaces => {
                // A git directory that is a mount point cannot be renamed or replaced; inside
                // it, what exists is bound read-only; what does not is removed after the
                // command, as in the Landlock tier.
                namespaces::bind_writable(&protected.anchors)?;
                let present: Vec<PathBuf> = protected
                    .paths
                    .iter()
                    .filter(|p| exists(p))
                    .cloned()
                    .collect();
                namespaces::bind_read_only(&present)?;
                self.bound = present;
                // Checked after the command too: a bound path moves with a renamed parent, and
                // what did not exist could not be bound.
                protected.paths
            }
            Tier::Landlock => protected.paths,
        };
        self.snapshot = Some(Snapshot::take(&self.writable, &snapshot)?);
        Ok(())
    }

    /// What the helper judges the command's calls by ([`super::notify`]), once the workdir is
    /// known.
    pub(crate) fn judge(&self) -> Judge {
        Judge {
            protected: self.bound.clone(),
            ..self.judged.clone()
        }
    }

    /// The network the command may reach.
    pub(crate) fn network(&self) -> NetworkMode {
        self.network
    }

    /// Once nothing of the command is left, before the host learns it: protected paths the
    /// command changed are put back (in the namespace tier, only those that did not exist and so
    /// could not be bound). Returns them.
    pub(crate) fn restore(&self) -> Vec<PathBuf> {
        self.snapshot
            .as_ref()
            .map(Snapshot::restore)
            .unwrap_or_default()
    }

    /// Empties the private temporary directory, and removes it where its parent is writable
    /// (the factory removes it otherwise, once this helper is reaped: [`remove_tmpdir`]).
    pub(crate) fn clean(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.tmpdir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = match entry.file_type() {
                    Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                    _ => std::fs::remove_file(&path),
                };
            }
        }
        let _ = std::fs::remove_dir(&self.tmpdir);
    }
}

/// Listens on `127.0.0.1:port` in the helper's network namespace (its own, which bash gets
/// too), for the host's proxy to accept on, and names it in the environment bash inherits: the
/// variables HTTP clients read for a proxy (curl, pip, npm, git, cargo, Python's urllib), and
/// the command's own loopback as reached directly.
fn proxy_listener(port: u16) -> io::Result<OwnedFd> {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))?;
    let url = format!("http://127.0.0.1:{port}");
    // SAFETY: the helper is single-threaded; nothing reads the environment concurrently.
    unsafe {
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            std::env::set_var(name, &url);
        }
        for name in ["NO_PROXY", "no_proxy"] {
            std::env::set_var(name, "localhost,127.0.0.1,::1");
        }
    }
    Ok(listener.into())
}

/// The private `TMPDIR` of the command of the helper `pid`.
fn tmpdir_of(policy: &Policy, pid: i32) -> PathBuf {
    policy.tmp_base.join(format!("tmp-{pid}"))
}

/// Removes what is left of the private `TMPDIR` of the helper `pid` (in the factory).
pub(crate) fn remove_tmpdir(policy: &Policy, pid: i32) {
    let _ = std::fs::remove_dir_all(tmpdir_of(policy, pid));
}

/// The supervisor's judge for `policy`, with `tmpdir` the command's own, before the protected
/// paths are known.
fn judge_base(policy: &Policy, tmpdir: &Path, grants: Vec<GrantLookup>) -> Judge {
    let mut writable = policy.writable.clone();
    writable.push(tmpdir.to_path_buf());
    Judge {
        writable,
        devices: super::landlock::DEVICES
            .iter()
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .collect(),
        denied: denied_paths(&policy.deny_read),
        readable: vec![tmpdir.to_path_buf()],
        protected: Vec::new(),
        read_only_mounts: policy.tier == Tier::Namespaces,
        grants,
    }
}

/// The denied paths as the kernel resolves them now.
fn denied_paths(deny_read: &[PathBuf]) -> Vec<PathBuf> {
    deny_read
        .iter()
        .filter_map(|p| super::landlock::resolve(p))
        .collect()
}
