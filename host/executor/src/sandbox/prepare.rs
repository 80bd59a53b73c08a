//! The spawn helper's part of a sandboxed start: everything bash's side will apply, prepared
//! before the fork ([`Confined::prepare`]), and the after-care once nothing of the command is
//! left.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::apply::Prepared;
use super::namespaces::NsSetup;
use super::policy::Policy;
use super::protect::{self, Snapshot};
use super::{NetworkMode, Tier};

/// One command's sandbox, held by its helper.
#[derive(Debug)]
pub(crate) struct Confined {
    pub(crate) prepared: Prepared,
    /// The command's private temporary directory (its `TMPDIR`).
    tmpdir: PathBuf,
    /// The protected paths as they were (Landlock tier).
    snapshot: Option<Snapshot>,
}

impl Confined {
    /// Prepares the sandbox of a command run in `workdir`, and makes its private `TMPDIR`
    /// (exported in this process's environment, which bash inherits). Runs in the helper, which
    /// is single-threaded.
    pub(crate) fn prepare(policy: &Policy, workdir: &Path) -> io::Result<Confined> {
        let abi = super::landlock::abi()?;
        let tmpdir = policy.tmp_base.join(format!(
            "tmp-{}",
            rustix::process::getpid().as_raw_nonzero()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&tmpdir)?;
        // SAFETY: the helper is single-threaded; nothing reads the environment concurrently.
        unsafe { std::env::set_var("TMPDIR", &tmpdir) };
        let protected = protect::find(&policy.writable, workdir);
        let mut writable = policy.writable.clone();
        writable.push(tmpdir.clone());
        let landlock = vec![
            super::landlock::read_layer(abi, &policy.deny_read, std::slice::from_ref(&tmpdir))?,
            super::landlock::write_layer(abi, &writable, policy.network == NetworkMode::Off)?,
        ];
        let filters = super::seccomp::filters(policy.network)?;
        let (namespaces, snapshot) = match policy.tier {
            Tier::Namespaces => (
                Some(NsSetup::new(
                    policy.network != NetworkMode::On,
                    policy.network == NetworkMode::Loopback,
                    &protected,
                )?),
                None,
            ),
            Tier::Landlock => (None, Some(Snapshot::take(&protected)?)),
        };
        Ok(Confined {
            prepared: Prepared {
                namespaces,
                landlock,
                filters,
            },
            tmpdir,
            snapshot,
        })
    }

    /// Once nothing of the command is left, before the host learns it: protected paths the
    /// command changed are put back (Landlock tier). Returns them.
    pub(crate) fn restore(&self) -> Vec<PathBuf> {
        self.snapshot
            .as_ref()
            .map(Snapshot::restore)
            .unwrap_or_default()
    }

    /// Removes the private temporary directory.
    pub(crate) fn clean(&self) {
        let _ = std::fs::remove_dir_all(&self.tmpdir);
    }
}
