//! The namespace tier: a user, mount and (unless the network is on) network namespace per
//! command, which the command's spawn helper (serving that one command only) enters itself
//! while idle, so that none of it is on the command's path.
//!
//! In it, the user is itself (its uid and gid mapped to themselves), with no authority over
//! anything outside; the mount tree is private, and protected subpaths of the writable roots are
//! bound read-only over themselves once the command's workdir is known ([`bind_read_only`]); the
//! network is a loopback interface of its own (brought up for [`super::NetworkMode::Loopback`],
//! left down when the network is off). bash, started from the helper, is born inside.

use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Which namespaces to enter, and the maps to write.
#[derive(Debug)]
pub(crate) struct NsSetup {
    /// A network namespace of its own.
    net: bool,
    /// Its loopback interface up.
    loopback: bool,
    /// `/proc/self/uid_map` and `gid_map` contents.
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

type StepError = (&'static str, io::Error);

impl NsSetup {
    /// For the calling process's user.
    pub(crate) fn new(net: bool, loopback: bool) -> NsSetup {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        NsSetup {
            net,
            loopback,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Enters the namespaces and sets them up. The caller must be single-threaded.
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
        // A process that is not dumpable has root's /proc files, which its user may then not
        // write: dumpable for as long as the maps take.
        let dumpable = rustix::process::dumpable_behavior()
            .map_err(|e| ("prctl(PR_GET_DUMPABLE)", e.into()))?;
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
            .map_err(|e| ("prctl(PR_SET_DUMPABLE)", e.into()))?;
        let maps = (|| {
            write_file(c"/proc/self/setgroups", b"deny")
                .map_err(|e| ("/proc/self/setgroups", e))?;
            write_file(c"/proc/self/uid_map", &self.uid_map)
                .map_err(|e| ("/proc/self/uid_map", e))?;
            write_file(c"/proc/self/gid_map", &self.gid_map).map_err(|e| ("/proc/self/gid_map", e))
        })();
        rustix::process::set_dumpable_behavior(dumpable)
            .map_err(|e| ("prctl(PR_SET_DUMPABLE)", e.into()))?;
        maps?;
        // Nothing mounted here reaches the host's mount tree.
        mount(None, c"/", libc::MS_REC | libc::MS_PRIVATE).map_err(|e| ("making / private", e))?;
        if self.loopback {
            loopback_up().map_err(|e| ("bringing up the loopback interface", e))?;
        }
        Ok(())
    }
}

/// Filesystems not remounted read-only: kernel interfaces the command cannot write anyway
/// (Landlock grants no writes there) and the helper's cgroup files, which it writes.
const LEFT_AS_IS: [&str; 18] = [
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "devpts",
    "devtmpfs",
    "mqueue",
    "securityfs",
    "debugfs",
    "tracefs",
    "fusectl",
    "configfs",
    "bpf",
    "pstore",
    "hugetlbfs",
    "binfmt_misc",
    "autofs",
    "nsfs",
];

/// Makes every filesystem read-only in the helper's mount namespace but `writable` (and
/// what is mounted below them), which are bound over themselves and kept writable: a change of
/// mode, owner, times or extended attributes outside the roots (which Landlock does not
/// control) then fails with `EROFS`.
pub(crate) fn read_only_but(writable: &[PathBuf]) -> io::Result<()> {
    let mounts = mount_points()?;
    let with = |path: &Path| {
        let path = path.to_path_buf();
        move |err: io::Error| io::Error::new(err.kind(), format!("{}: {err}", path.display()))
    };
    for (point, fstype, _) in &mounts {
        if LEFT_AS_IS.contains(&fstype.as_str()) {
            continue;
        }
        let target = c_path(point)?;
        let flags = match mount_flags(point) {
            Ok(flags) => flags,
            // Shadowed or gone: nothing reaches it by this path.
            Err(_) => continue,
        };
        mount(
            None,
            &target,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
        )
        .map_err(with(point))?;
    }
    for root in writable {
        let target = c_path(root)?;
        mount(Some(&target), &target, libc::MS_BIND | libc::MS_REC).map_err(with(root))?;
        for (point, was_read_only) in mounts
            .iter()
            .filter(|(p, _, _)| p.starts_with(root) && p != root)
            .map(|(p, _, ro)| (p.as_path(), ro))
            .chain(std::iter::once((root.as_path(), &false)))
        {
            // One that was read-only already stays so (it may be locked that way); one that
            // cannot be looked at is not reached by this path either.
            if *was_read_only && point != root {
                continue;
            }
            let flags = mount_flags(point).map_err(with(point))?;
            mount(
                None,
                &c_path(point)?,
                libc::MS_REMOUNT | libc::MS_BIND | flags,
            )
            .map_err(with(point))?;
        }
    }
    Ok(())
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// This mount namespace's mount points, filesystem types and whether each is read-only,
/// parents first.
fn mount_points() -> io::Result<Vec<(PathBuf, String, bool)>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut points = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let read_only = fields
            .get(5)
            .is_some_and(|options| options.split(',').any(|o| o == "ro"));
        points.push((
            PathBuf::from(std::ffi::OsString::from_vec(
                crate::containment::cgroup::unescape_bytes(point),
            )),
            fstype.to_string(),
            read_only,
        ));
    }
    // Parents before what is mounted on them.
    points.sort_by_key(|(p, _, _)| p.components().count());
    Ok(points)
}

/// Sockets and socket directories of the user's session and of daemons that would run what a
/// command asks outside the sandbox (the session bus and systemd, an X display, an SSH agent, a
/// container engine): hidden under an empty, read-only directory or `/dev/null` where they
/// exist. Landlock controls connecting to a socket by path only from ABI 9.
pub(crate) fn hide_sockets(extra: &[PathBuf]) -> io::Result<()> {
    let uid = rustix::process::getuid().as_raw();
    let mut paths: Vec<PathBuf> = [
        format!("/run/user/{uid}"),
        "/tmp/.X11-unix".to_string(),
        "/tmp/.ICE-unix".to_string(),
        "/run/dbus".to_string(),
        "/var/run/dbus".to_string(),
        "/run/docker.sock".to_string(),
        "/var/run/docker.sock".to_string(),
        "/run/containerd".to_string(),
        "/run/podman".to_string(),
        "/run/systemd/private".to_string(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .chain(extra.iter().cloned())
    .filter_map(|p| std::fs::canonicalize(p).ok())
    .collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let target = c_path(&path)?;
        let with =
            |err: io::Error| io::Error::new(err.kind(), format!("{}: {err}", path.display()));
        if meta.is_dir() {
            // SAFETY: valid strings; a new tmpfs, read-only and empty.
            let done = unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=4k,mode=0555".as_ptr().cast(),
                )
            };
            if done != 0 {
                return Err(with(io::Error::last_os_error()));
            }
        } else {
            mount(Some(c"/dev/null"), &target, libc::MS_BIND).map_err(with)?;
        }
    }
    Ok(())
}

/// Binds each of `paths` over itself, writable: a mount point cannot be renamed, removed or
/// replaced, so a command cannot swap it for a directory of its own.
pub(crate) fn bind_writable(paths: &[PathBuf]) -> io::Result<()> {
    for path in paths {
        let target = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        mount(Some(&target), &target, libc::MS_BIND | libc::MS_REC)
            .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", path.display())))?;
    }
    Ok(())
}

/// Binds each of `paths` read-only over itself, in the caller's (private) mount namespace.
pub(crate) fn bind_read_only(paths: &[PathBuf]) -> io::Result<()> {
    for path in paths {
        // A remount inside a user namespace must keep the flags the mount already has.
        let flags = mount_flags(path)?;
        let target = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let with =
            |err: io::Error| io::Error::new(err.kind(), format!("{}: {err}", path.display()));
        mount(Some(&target), &target, libc::MS_BIND | libc::MS_REC).map_err(with)?;
        mount(
            None,
            &target,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
        )
        .map_err(with)?;
    }
    Ok(())
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
