//! How the host knows what the sandbox denied, without guessing from a command's output: the
//! command's seccomp filter ([`super::seccomp`]) hands its file, socket and connect calls to its
//! spawn helper (a user notification), which judges each against the policy
//! ([`super::judge`]) and lets the kernel carry on with it. The kernel's Landlock rules,
//! read-only mounts and network namespace decide; the helper only learns what they will refuse.
//!
//! Only sockets are decided here: where the network is off, a socket of any family but Unix is
//! refused by the helper's answer (`EACCES`), and Landlock's TCP rules stand behind it. Should
//! the helper be gone, the kernel fails every notified call with `ENOSYS`: a socket is refused
//! all the same.
//!
//! The filter is installed last, with a listener; bash's side passes the listener to the helper
//! over a socket pair before its `exec` ([`crate::bash::exec`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::NetworkMode;
use super::judge::{Base, Judge, Operation, Start, Target};
use crate::{Denial, DenialReason, DeniedAccess};

/// The file calls judged. Reading and listing go through `open` and its kin too.
pub(crate) const FILE_CALLS: &[i64] = &[
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_truncate,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_open,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_creat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mkdir,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mknod,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_unlink,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rmdir,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rename,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_renameat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_link,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_symlink,
];

/// `open` and `openat` with their flags' argument: those the sandbox can never refuse go on
/// without a notification (each costs a round trip to the helper; see
/// [`super::seccomp::filter`]). (`openat2` keeps its flags in memory, which a filter cannot
/// read: it is one of the [`FILE_CALLS`].)
pub(crate) const OPENS: &[(i64, u32)] = &[
    (libc::SYS_openat, 2),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1),
];

/// Answers the notifications of one command's processes.
#[derive(Debug)]
pub(crate) struct Supervisor {
    listener: OwnedFd,
    judge: Judge,
    network: NetworkMode,
    /// Where absolute paths are resolved from (without it, nothing is judged).
    root: Option<OwnedFd>,
}

impl Supervisor {
    pub(crate) fn new(listener: OwnedFd, judge: Judge, network: NetworkMode) -> Supervisor {
        // Woken on the CPU of the process that waits: a call costs one switch there and back.
        const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
        // SAFETY: an ioctl on our listener with an integer argument; failure (an older kernel)
        // only costs speed.
        unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        let root = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        Supervisor {
            listener,
            judge,
            network,
            root,
        }
    }

    /// The listener, to poll.
    pub(crate) fn listener(&self) -> &OwnedFd {
        &self.listener
    }

    /// Receives one notification and answers it: the denial it met, if the sandbox refuses
    /// it. `Ok(None)` also when the process gave up the call meanwhile.
    ///
    /// What the call names is read from the process while it waits; it is answered then, and
    /// judged after, while it goes on: the kernel decides the call whatever the judgement, and a
    /// call the sandbox refuses changes nothing the judgement looks at.
    pub(crate) fn answer(&self) -> io::Result<Option<Denial>> {
        // SAFETY: zeroed plain C structures, as the kernel requires of the one it fills.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: the RECV ioctl with a valid, zeroed seccomp_notif.
            let got = unsafe {
                libc::ioctl(
                    self.listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                    std::ptr::addr_of_mut!(notif),
                )
            };
            if got == 0 {
                break;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The process was interrupted or died: nothing to answer.
                Some(libc::ENOENT) => return Ok(None),
                _ => return Err(err),
            }
        }
        let call = self.read_call(&notif);
        // SAFETY: as above.
        let mut response: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
        response.id = notif.id;
        match &call {
            Call::Decided(_, Some(errno)) => response.error = -errno,
            _ => response.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        }
        // SAFETY: the SEND ioctl with a valid seccomp_notif_resp.
        let sent = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND as _,
                std::ptr::addr_of!(response),
            )
        };
        // Answered: the process still waited, so what was read from its memory was its own.
        if sent != 0 {
            return Ok(None);
        }
        Ok(match call {
            Call::Decided(denial, _) => denial,
            Call::Files { sources, paths } => self.judge_files(&sources, &paths),
        })
    }

    /// What a notified call names, read from its process; a socket is decided at once.
    fn read_call(&self, notif: &libc::seccomp_notif) -> Call {
        let nr = i64::from(notif.data.nr);
        let args = notif.data.args;
        let pid = notif.pid;
        if nr == libc::SYS_socket {
            let family = args[0] as i32;
            if self.network == NetworkMode::Off && family != libc::AF_UNIX {
                let denial = Denial {
                    access: DeniedAccess::Socket,
                    target: family_name(family),
                    reason: DenialReason::NetworkOff,
                };
                return Call::Decided(Some(denial), Some(libc::EACCES));
            }
            return Call::Decided(None, None);
        }
        if nr == libc::SYS_connect {
            return Call::Decided(connect(pid, args[1], args[2]), None);
        }
        let fd_base = |arg: u64| {
            let fd = arg as i32;
            if fd == libc::AT_FDCWD {
                Base::Cwd
            } else {
                Base::Fd(fd)
            }
        };
        // (base, path address, operation), one or two per call.
        let mut paths: Vec<(Base, u64, Operation)> = Vec::with_capacity(2);
        // What must exist for the call to reach the sandbox's checks (a rename's or a link's
        // source): without it the call fails with ENOENT, and nothing is judged.
        let mut sources: Vec<(Base, u64)> = Vec::new();
        match nr {
            libc::SYS_openat => paths.push((
                fd_base(args[0]),
                args[1],
                Operation::Open { flags: args[2] },
            )),
            libc::SYS_openat2 => {
                // `struct open_how` starts with the flags.
                let Some(flags) = read_u64(pid, args[2]) else {
                    return Call::Decided(None, None);
                };
                paths.push((fd_base(args[0]), args[1], Operation::Open { flags }));
            }
            libc::SYS_mkdirat | libc::SYS_mknodat => {
                paths.push((fd_base(args[0]), args[1], Operation::Create))
            }
            libc::SYS_unlinkat => paths.push((fd_base(args[0]), args[1], Operation::Remove)),
            libc::SYS_renameat2 => {
                const RENAME_NOREPLACE: u64 = 1;
                const RENAME_EXCHANGE: u64 = 2;
                sources.push((fd_base(args[0]), args[1]));
                paths.push((fd_base(args[0]), args[1], Operation::Remove));
                let target = if args[4] & RENAME_NOREPLACE != 0 {
                    // EEXIST where it exists.
                    Operation::Create
                } else if args[4] & RENAME_EXCHANGE != 0 {
                    // ENOENT where it does not.
                    Operation::Remove
                } else {
                    Operation::Replace
                };
                paths.push((fd_base(args[2]), args[3], target));
            }
            libc::SYS_linkat => {
                sources.push((fd_base(args[0]), args[1]));
                paths.push((fd_base(args[2]), args[3], Operation::Create))
            }
            libc::SYS_symlinkat => paths.push((fd_base(args[1]), args[2], Operation::Create)),
            libc::SYS_truncate => paths.push((Base::Cwd, args[0], Operation::Truncate)),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => paths.push((Base::Cwd, args[0], Operation::Open { flags: args[1] })),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => {
                let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;
                paths.push((Base::Cwd, args[0], Operation::Open { flags }))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mkdir | libc::SYS_mknod => {
                paths.push((Base::Cwd, args[0], Operation::Create))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_unlink | libc::SYS_rmdir => {
                paths.push((Base::Cwd, args[0], Operation::Remove))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rename => {
                sources.push((Base::Cwd, args[0]));
                paths.push((Base::Cwd, args[0], Operation::Remove));
                paths.push((Base::Cwd, args[1], Operation::Replace));
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_renameat => {
                sources.push((fd_base(args[0]), args[1]));
                paths.push((fd_base(args[0]), args[1], Operation::Remove));
                paths.push((fd_base(args[2]), args[3], Operation::Replace));
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_link => {
                sources.push((Base::Cwd, args[0]));
                paths.push((Base::Cwd, args[1], Operation::Create))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_symlink => paths.push((Base::Cwd, args[1], Operation::Create)),
            _ => {}
        }
        let read = |base: Base, address: u64| {
            let path = read_path(pid, address)?;
            let start = Start::open(pid, base, &path)?;
            Some((start, path))
        };
        let mut read_sources = Vec::with_capacity(sources.len());
        for (base, address) in sources {
            match read(base, address) {
                Some(source) => read_sources.push(source),
                None => return Call::Decided(None, None),
            }
        }
        let read_paths = paths
            .into_iter()
            .filter_map(|(base, address, operation)| {
                read(base, address).map(|(start, path)| (start, path, operation))
            })
            .collect();
        Call::Files {
            sources: read_sources,
            paths: read_paths,
        }
    }

    /// The denial a file call met: nothing if a source it needs is missing.
    fn judge_files(
        &self,
        sources: &[(Start, Vec<u8>)],
        paths: &[(Start, Vec<u8>, Operation)],
    ) -> Option<Denial> {
        let root = self.root.as_ref()?.as_fd();
        for (start, path) in sources {
            let source = Target {
                base: start.fd(root),
                path,
            };
            if !self.judge.exists(&source) {
                return None;
            }
        }
        paths.iter().find_map(|(start, path, operation)| {
            let target = Target {
                base: start.fd(root),
                path,
            };
            self.judge.judge(&target, operation)
        })
    }
}

/// One notified call, as read while its process waits.
enum Call {
    /// Judged already: the denial, and the error the call gets where the helper refuses it.
    Decided(Option<Denial>, Option<i32>),
    /// File operations, to judge once answered: the sources that must exist, then the paths.
    Files {
        sources: Vec<(Start, Vec<u8>)>,
        paths: Vec<(Start, Vec<u8>, Operation)>,
    },
}

/// The longest path the kernel takes.
const PATH_MAX: usize = 4096;

/// A NUL-terminated string of process `pid` at `address` (without the NUL), read a page at a
/// time so that a string ending just before an unmapped page is read whole.
fn read_path(pid: u32, address: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = address;
    while out.len() < PATH_MAX {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; chunk];
        let read = read_memory(pid, at, &mut buf)?;
        if let Some(end) = buf[..read].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        if read < chunk {
            return None;
        }
        out.extend_from_slice(&buf);
        at += chunk as u64;
    }
    None
}

fn read_u64(pid: u32, address: u64) -> Option<u64> {
    let mut buf = [0u8; 8];
    (read_memory(pid, address, &mut buf)? == 8).then(|| u64::from_ne_bytes(buf))
}

/// Reads `buf.len()` bytes of process `pid` at `address`; how many it could.
fn read_memory(pid: u32, address: u64, buf: &mut [u8]) -> Option<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, one remote one the kernel checks.
    let read = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    usize::try_from(read).ok()
}

/// A loopback-only network: a `connect` to any other address is refused by the namespace
/// (`ENETUNREACH`), so it is named.
fn connect(pid: u32, address: u64, len: u64) -> Option<Denial> {
    let len = usize::try_from(len).ok()?.min(128);
    let mut buf = vec![0u8; len];
    if read_memory(pid, address, &mut buf)? < len || len < 2 {
        return None;
    }
    let family = i32::from(u16::from_ne_bytes([buf[0], buf[1]]));
    let target = match family {
        libc::AF_INET if len >= 8 => {
            let port = u16::from_be_bytes([buf[2], buf[3]]);
            let ip = std::net::Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7]);
            // The unspecified address reaches the local host, here its loopback.
            if ip.is_loopback() || ip.is_unspecified() {
                return None;
            }
            format!("{ip}:{port}")
        }
        libc::AF_INET6 if len >= 24 => {
            let port = u16::from_be_bytes([buf[2], buf[3]]);
            let octets: [u8; 16] = buf[8..24].try_into().ok()?;
            let ip = std::net::Ipv6Addr::from(octets);
            if ip.is_loopback()
                || ip.is_unspecified()
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
            {
                return None;
            }
            format!("[{ip}]:{port}")
        }
        _ => return None,
    };
    Some(Denial {
        access: DeniedAccess::Connect,
        target,
        reason: DenialReason::LoopbackOnly,
    })
}

/// The name of an address family, as the C headers spell it.
fn family_name(family: i32) -> String {
    let known = [
        (libc::AF_INET, "AF_INET"),
        (libc::AF_INET6, "AF_INET6"),
        (libc::AF_NETLINK, "AF_NETLINK"),
        (libc::AF_PACKET, "AF_PACKET"),
        (libc::AF_BLUETOOTH, "AF_BLUETOOTH"),
        (libc::AF_VSOCK, "AF_VSOCK"),
        (libc::AF_ALG, "AF_ALG"),
        (libc::AF_CAN, "AF_CAN"),
        (libc::AF_TIPC, "AF_TIPC"),
        (libc::AF_XDP, "AF_XDP"),
    ];
    known
        .iter()
        .find(|(f, _)| *f == family)
        .map(|(_, name)| (*name).to_string())
        .unwrap_or_else(|| format!("address family {family}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_families() {
        assert_eq!(family_name(libc::AF_INET), "AF_INET");
        assert_eq!(family_name(250), "address family 250");
    }
}
