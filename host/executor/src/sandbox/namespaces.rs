//! The namespace tier: a user, mount and (unless the network is on) network namespace per
//! command, entered by bash's side of the fork before Landlock and seccomp are applied.
//!
//! In it, the command's user is itself (its uid and gid mapped to themselves), with no authority
//! over anything outside; protected subpaths of the writable roots are bound read-only over
//! themselves; the network is a loopback interface of its own (brought up for
//! [`super::NetworkMode::Loopback`], left down when the network is off).
//!
//! [`NsSetup`] is prepared by the spawn helper before the fork (maps, paths, mount flags);
//! [`NsSetup::enter`] makes raw system calls only. It needs a process that shares no memory with
//! another (the kernel refuses a user namespace to one that does), so a sandboxed bash in this
//! tier is started with an ordinary fork of the single-threaded helper, not a vfork.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What entering the namespaces takes, prepared before the fork.
#[derive(Debug)]
pub(crate) struct NsSetup {
    /// A network namespace of its own.
    net: bool,
    /// Its loopback interface up.
    loopback: bool,
    /// `/proc/self/uid_map` and `gid_map` contents.
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Paths to bind read-only over themselves, each with the flags its mount already has (a
    /// remount inside a user namespace must keep them).
    binds: Vec<(CString, u64)>,
}

type StepError = (&'static str, io::Error);

impl NsSetup {
    /// For the calling process's user, with `binds` made read-only.
    pub(crate) fn new(
        net: bool,
        loopback: bool,
        binds: &[std::path::PathBuf],
    ) -> io::Result<NsSetup> {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let mut prepared = Vec::new();
        for path in binds {
            let flags = mount_flags(path)?;
            let path = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            prepared.push((path, flags));
        }
        Ok(NsSetup {
            net,
            loopback,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            binds: prepared,
        })
    }

    /// What the preflight tries: every namespace, the loopback up, no binds.
    pub(crate) fn probe() -> NsSetup {
        NsSetup::new(true, true, &[]).expect("no binds to prepare")
    }

    /// Enters the namespaces and sets them up. Raw system calls only.
    pub(crate) fn enter(&self) -> Result<(), StepError> {
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        // SAFETY: unshare takes flags only.
        if unsafe { libc::unshare(flags) } != 0 {
            return Err((
                "unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)",
                io::Error::last_os_error(),
            ));
        }
        // The helper is not dumpable, which makes its /proc files root's: this process (about to
        // become bash, which is dumpable again anyway) must be, to write its own maps.
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
            return Err(("prctl(PR_SET_DUMPABLE)", io::Error::last_os_error()));
        }
        write_file(c"/proc/self/setgroups", b"deny").map_err(|e| ("/proc/self/setgroups", e))?;
        write_file(c"/proc/self/uid_map", &self.uid_map).map_err(|e| ("/proc/self/uid_map", e))?;
        write_file(c"/proc/self/gid_map", &self.gid_map).map_err(|e| ("/proc/self/gid_map", e))?;
        // Nothing mounted here reaches the host's mount tree.
        mount(None, c"/", libc::MS_REC | libc::MS_PRIVATE).map_err(|e| ("making / private", e))?;
        for (path, flags) in &self.binds {
            mount(Some(path), path, libc::MS_BIND | libc::MS_REC)
                .map_err(|e| ("binding a protected path", e))?;
            mount(
                None,
                path,
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            )
            .map_err(|e| ("making a protected path read-only", e))?;
        }
        if self.loopback {
            loopback_up().map_err(|e| ("bringing up the loopback interface", e))?;
        }
        Ok(())
    }
}

/// The flags of the mount holding `path` that a bind remount must keep.
fn mount_flags(path: &Path) -> io::Result<u64> {
    let stat = rustix::fs::statvfs(path)?;
    let has = |flag: rustix::fs::StatVfsMountFlags| stat.f_flag.contains(flag);
    use rustix::fs::StatVfsMountFlags as F;
    let mut flags = 0;
    for (flag, ms) in [
        (F::NOSUID, libc::MS_NOSUID),
        (F::NODEV, libc::MS_NODEV),
        (F::NOEXEC, libc::MS_NOEXEC),
        (F::NOATIME, libc::MS_NOATIME),
        (F::NODIRATIME, libc::MS_NODIRATIME),
        (F::RELATIME, libc::MS_RELATIME),
    ] {
        if has(flag) {
            flags |= ms;
        }
    }
    Ok(flags)
}

fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    rustix::io::write(&fd, bytes)?;
    Ok(())
}

fn mount(source: Option<&std::ffi::CStr>, target: &std::ffi::CStr, flags: u64) -> io::Result<()> {
    // SAFETY: valid NUL-terminated strings or null; no filesystem type or data.
    let done = unsafe {
        libc::mount(
            source.map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ip link set lo up`, by ioctl.
fn loopback_up() -> io::Result<()> {
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: an ifreq naming "lo", read and written by the two ioctls on our socket.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo") {
            *slot = *byte as libc::c_char;
        }
        use std::os::fd::AsRawFd;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
