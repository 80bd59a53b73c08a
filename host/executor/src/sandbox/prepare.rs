//! The spawn helper's part of a sandboxed start. While idle (its command not known yet), it
//! prepares everything the policy alone decides ([`Confined::prepare`]): the Landlock rulesets,
//! the seccomp filters, the command's private `TMPDIR`, and in the namespace tier the
//! namespaces themselves, which the helper enters. Once the request names the workdir, the
//! protected paths there are bound read-only or snapshotted ([`Confined::for_workdir`]). After
//! the command, the after-care: a restore (Landlock tier) and the `TMPDIR` removed.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::apply::Prepared;
use super::judge::Judge;
use super::landlock::{Freshness, ReadGrants};
use super::namespaces::{self, NsSetup};
use super::policy::Policy;
use super::protect::{self, Snapshot};
use super::{NetworkMode, Tier};

/// One command's sandbox, held by its helper.
#[derive(Debug)]
pub(crate) struct Confined {
    pub(crate) prepared: Prepared,
    tier: Tier,
    writable: Vec<PathBuf>,
    /// What the read layer was made from, to remake it if a walked directory changed since
    /// (this helper was made ahead of its command).
    freshness: Freshness,
    abi: u32,
    deny_read: Vec<PathBuf>,
    /// The command's private temporary directory (its `TMPDIR`).
    tmpdir: PathBuf,
    /// The protected paths as they were (Landlock tier).
    snapshot: Option<Snapshot>,
    network: NetworkMode,
    /// The protected paths bound read-only (namespace tier), once known.
    bound: Vec<PathBuf>,
    /// What the supervisor judges by but the protected paths, resolved while the helper is
    /// idle: once bash runs, its first file call waits for the supervisor.
    judged: Judge,
}

impl Confined {
    /// Prepares what `policy` decides, in the helper (single-threaded), before any request. In
    /// the namespace tier the helper enters the namespaces here; its death signal is re-armed
    /// after (new credentials clear it).
    pub(crate) fn prepare(policy: &Policy, grants: &ReadGrants) -> io::Result<Confined> {
        let abi = super::landlock::abi()?;
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
        let landlock = vec![
            super::landlock::read_layer(abi, grants, std::slice::from_ref(&tmpdir), &writable)?,
            super::landlock::write_layer(abi, &writable, policy.network == NetworkMode::Off)?,
        ];
        let filters = super::seccomp::filters()?;
        let notify = super::notify::filter(policy.network);
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
            let agent: Vec<PathBuf> = std::env::var_os("SSH_AUTH_SOCK")
                .map(PathBuf::from)
                .into_iter()
                .collect();
            namespaces::hide_sockets(&agent)?;
        }
        // SAFETY: as above.
        unsafe { std::env::remove_var("SSH_AUTH_SOCK") };
        Ok(Confined {
            prepared: Prepared {
                landlock,
                filters,
                notify,
            },
            network: policy.network,
            tier: policy.tier,
            writable: policy.writable.clone(),
            freshness: grants.freshness.clone(),
            abi,
            deny_read: policy.deny_read.clone(),
            judged: judge_base(policy, &tmpdir),
            tmpdir,
            snapshot: None,
            bound: Vec::new(),
        })
    }

    /// Protects git's paths under the writable roots as seen from `workdir`: bound read-only in
    /// the helper's mount namespace (namespace tier) or snapshotted (Landlock tier).
    pub(crate) fn for_workdir(&mut self, workdir: &Path) -> io::Result<()> {
        if !self.freshness.current() {
            let grants = ReadGrants::make(&self.deny_read)?;
            let mut writable = self.writable.clone();
            writable.push(self.tmpdir.clone());
            self.prepared.landlock[0] = super::landlock::read_layer(
                self.abi,
                &grants,
                std::slice::from_ref(&self.tmpdir),
                &writable,
            )?;
            // A walked directory changed: a denied path may resolve elsewhere now.
            self.judged.denied = denied_paths(&self.deny_read);
        }
        let protected = protect::find(&self.writable, workdir);
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
fn judge_base(policy: &Policy, tmpdir: &Path) -> Judge {
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
    }
}

/// The denied paths as the kernel resolves them now.
fn denied_paths(deny_read: &[PathBuf]) -> Vec<PathBuf> {
    deny_read
        .iter()
        .filter_map(|p| super::landlock::resolve(p))
        .collect()
}
