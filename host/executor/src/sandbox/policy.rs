//! The sandbox policy as it travels to the spawn helper factory, once, in its environment
//! ([`POLICY_ENV`], hex, removed by the factory at once): the mode, tier and network as one
//! byte each, the proxy's port as two (0 for none), then the writable roots, the denied paths,
//! the temporary base and the hidden directories, each list `[count: u32]` of
//! `[len: u32][bytes]`. Every helper prepares its command's sandbox from it while idle.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{NetworkMode, SandboxMode, Tier};

/// The factory's environment variable holding the policy.
pub(crate) const POLICY_ENV: &str = "DSH_SANDBOX_POLICY";

/// The policy in the factory's environment (taken out of it), if any. The factory is
/// single-threaded.
pub(crate) fn take_from_env() -> io::Result<Option<Policy>> {
    let Some(hex) = std::env::var_os(POLICY_ENV) else {
        return Ok(None);
    };
    // SAFETY: the factory is single-threaded.
    unsafe { std::env::remove_var(POLICY_ENV) };
    let hex = hex.as_bytes();
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a sandbox policy is not hex");
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes = hex
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(bad)
        })
        .collect::<io::Result<Vec<u8>>>()?;
    Policy::decode(&bytes)
}

/// What the helper needs to confine one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) mode: SandboxMode,
    pub(crate) tier: Tier,
    pub(crate) network: NetworkMode,
    pub(crate) writable: Vec<PathBuf>,
    pub(crate) deny_read: Vec<PathBuf>,
    pub(crate) tmp_base: PathBuf,
    /// Directories hidden in the namespace tier.
    pub(crate) hide: Vec<PathBuf>,
    /// Where each command's helper listens for the host's proxy (`--sandbox-allow-net`).
    pub(crate) proxy_port: Option<u16>,
}

impl Policy {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![
            match self.mode {
                SandboxMode::Off => 0,
                SandboxMode::ReadOnly => 1,
                SandboxMode::WorkspaceWrite => 2,
            },
            match self.tier {
                Tier::Namespaces => 0,
                Tier::Landlock => 1,
            },
            match self.network {
                NetworkMode::Off => 0,
                NetworkMode::Loopback => 1,
                NetworkMode::On => 2,
            },
        ];
        out.extend_from_slice(&self.proxy_port.unwrap_or(0).to_ne_bytes());
        for list in [
            &self.writable,
            &self.deny_read,
            &vec![self.tmp_base.clone()],
            &self.hide,
        ] {
            out.extend_from_slice(&(list.len() as u32).to_ne_bytes());
            for path in list {
                let bytes = path.as_os_str().as_bytes();
                out.extend_from_slice(&(bytes.len() as u32).to_ne_bytes());
                out.extend_from_slice(bytes);
            }
        }
        out
    }

    /// `None` for an empty field (no sandbox).
    pub(crate) fn decode(bytes: &[u8]) -> io::Result<Option<Policy>> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if bytes.is_empty() {
            return Ok(None);
        }
        let [mode, tier, network, port_0, port_1, rest @ ..] = bytes else {
            return Err(bad("a sandbox policy is cut short"));
        };
        let mode = match mode {
            1 => SandboxMode::ReadOnly,
            2 => SandboxMode::WorkspaceWrite,
            _ => return Err(bad("a sandbox policy has no mode")),
        };
        let tier = match tier {
            0 => Tier::Namespaces,
            1 => Tier::Landlock,
            _ => return Err(bad("a sandbox policy has an unknown tier")),
        };
        let network = match network {
            0 => NetworkMode::Off,
            1 => NetworkMode::Loopback,
            2 => NetworkMode::On,
            _ => return Err(bad("a sandbox policy has an unknown network mode")),
        };
        let proxy_port = Some(u16::from_ne_bytes([*port_0, *port_1])).filter(|&p| p != 0);
        let mut rest = rest;
        let u32_at = |rest: &mut &[u8]| -> io::Result<usize> {
            if rest.len() < 4 {
                return Err(bad("a sandbox policy is cut short"));
            }
            let (head, tail) = rest.split_at(4);
            *rest = tail;
            Ok(u32::from_ne_bytes(head.try_into().expect("4 bytes")) as usize)
        };
        let mut lists = Vec::new();
        for _ in 0..4 {
            let count = u32_at(&mut rest)?;
            let mut list = Vec::new();
            for _ in 0..count {
                let len = u32_at(&mut rest)?;
                if len > rest.len() {
                    return Err(bad("a sandbox path runs past its policy"));
                }
                let (path, tail) = rest.split_at(len);
                rest = tail;
                list.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
            }
            lists.push(list);
        }
        if !rest.is_empty() {
            return Err(bad("trailing bytes after a sandbox policy"));
        }
        let hide = lists.pop().expect("four lists");
        let mut tmp = lists.pop().expect("four lists");
        let deny_read = lists.pop().expect("four lists");
        let writable = lists.pop().expect("four lists");
        let tmp_base = tmp
            .pop()
            .filter(|_| tmp.is_empty())
            .ok_or_else(|| bad("a sandbox policy needs one temporary base"))?;
        Ok(Some(Policy {
            mode,
            tier,
            network,
            writable,
            deny_read,
            tmp_base,
            hide,
            proxy_port,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_survives_the_wire_and_a_cut_one_is_refused() {
        let policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            tier: Tier::Landlock,
            network: NetworkMode::Loopback,
            writable: vec!["/w".into(), "/tmp".into()],
            deny_read: vec!["/root/.ssh".into()],
            tmp_base: "/var/tmp/x".into(),
            hide: vec!["/run/user/0/dsh-host".into()],
            proxy_port: Some(23_456),
        };
        let bytes = policy.encode();
        assert_eq!(Policy::decode(&bytes).unwrap(), Some(policy));
        assert_eq!(Policy::decode(&[]).unwrap(), None);
        for cut in 1..bytes.len() {
            assert!(Policy::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
