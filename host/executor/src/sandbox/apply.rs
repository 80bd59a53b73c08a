//! bash's side of the sandbox: applying what the spawn helper prepared, right before `exec`.
//! Raw system calls only, on memory prepared before the fork.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::bpf::{Insn, Program};

/// Everything one sandboxed command's start applies, prepared by the helper.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The Landlock layers, in order.
    pub(crate) landlock: Vec<OwnedFd>,
    /// The seccomp filter ([`super::seccomp`]), installed last; it notifies the helper
    /// ([`super::notify`]).
    pub(crate) filter: Program,
}

impl Prepared {
    /// Applies the sandbox to the calling process (in the namespace tier, the namespaces are
    /// the helper's, which bash was born in). Returns the notifying filter's listener, for the
    /// helper.
    pub(crate) fn apply(&self) -> io::Result<OwnedFd> {
        drop_capabilities()?;
        no_new_privs()?;
        for layer in &self.landlock {
            // SAFETY: a ruleset descriptor, no flags.
            if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, layer.as_raw_fd(), 0u32) }
                != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        // Its listener: received only once the helper has been notified, a process's wait for
        // the answer ends only with its death (a signal handled meanwhile would make it ask
        // again).
        let listener = install_filter(
            &self.filter,
            (libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)
                as u32,
        )?;
        // SAFETY: with NEW_LISTENER, a successful seccomp returns a new descriptor, ours.
        Ok(unsafe { OwnedFd::from_raw_fd(listener) })
    }
}

/// Capabilities a sandboxed root keeps: those of file ownership and access (its files stay its
/// files: `chown`, `chmod`, reading what root may), changing its own user, binding low ports
/// and locking memory. Every other is dropped, from the bounding set too, so that no program
/// it runs regains one: tracing or reading other processes (`CAP_SYS_PTRACE` would let root
/// read any process's `/proc/<pid>/environ` past Landlock), administration of the system, the
/// network or devices, raw I/O, immutable flags, resource limits and the rest.
const KEPT: [u32; 9] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    2,  // CAP_DAC_READ_SEARCH
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    10, // CAP_NET_BIND_SERVICE
    14, // CAP_IPC_LOCK
];

/// [`KEPT`] as a set of bits.
const KEPT_MASK: u64 = {
    let mut mask = 0u64;
    let mut i = 0;
    while i < KEPT.len() {
        mask |= 1 << KEPT[i];
        i += 1;
    }
    mask
};

/// The highest capability number this code knows (`CAP_CHECKPOINT_RESTORE`); higher ones the
/// kernel may have are dropped too, up to 63.
const LAST_CAP: u32 = 63;

/// Whether the calling process holds any capability (root, or anyone in a user namespace of its
/// own); one that holds none has nothing to drop. Returns the sets as `capget` reads them.
fn capabilities() -> io::Result<Option<(CapHeader, [CapData; 2])>> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a valid header and two data structures.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if data.iter().all(|d| d.effective == 0 && d.permitted == 0) {
        return Ok(None);
    }
    Ok(Some((header, data)))
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability but [`KEPT`] from the bounding set, so that no program a command runs
/// gains one. Done by the spawn helper while idle (about 50 µs of system calls, one a
/// capability), and inherited by bash: the helper keeps its own effective capabilities, which
/// the bounding set does not touch.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    if capabilities()?.is_none() {
        return Ok(());
    }
    for cap in 0..=LAST_CAP {
        if KEPT_MASK & (1 << cap) != 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments; EINVAL marks a capability the kernel lacks.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// Drops every capability but [`KEPT`] from the ambient, inheritable, permitted and effective
/// sets (the bounding set is the helper's to drop: [`drop_bounding_set`]).
fn drop_capabilities() -> io::Result<()> {
    let Some((mut header, mut data)) = capabilities()? else {
        return Ok(());
    };
    // SAFETY: prctl with integer arguments.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let low = KEPT_MASK as u32;
    let high = (KEPT_MASK >> 32) as u32;
    for (d, mask) in data.iter_mut().zip([low, high]) {
        d.effective &= mask;
        d.permitted &= mask;
        d.inheritable &= mask;
    }
    // SAFETY: capset with a valid header and two data structures.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `PR_SET_NO_NEW_PRIVS`: what Landlock and an unprivileged seccomp filter require, and what
/// keeps a set-user-ID program from gaining what the sandbox withholds.
pub(crate) fn no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs one compiled seccomp filter on the calling thread, with `flags` besides
/// `SECCOMP_FILTER_FLAG_SPEC_ALLOW`; returns what the kernel does (a listener's descriptor with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, else 0).
pub(crate) fn install_filter(filter: &[Insn], flags: u32) -> io::Result<i32> {
    let program = libc::sock_fprog {
        // At most u16::MAX instructions ([`super::bpf::Assembler::finish`]).
        len: filter.len() as u16,
        // The same C structure (`struct sock_filter`).
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SECCOMP_FILTER_FLAG_SPEC_ALLOW: no speculative-store-bypass mitigation forced on the
    // command for having a filter. That mitigation guards code against data in its own address
    // space (a script engine's sandbox); a command is kept from other processes by the kernel
    // whatever it speculates, and the mitigation slowed every sandboxed command's start by about
    // half (measured here: `bash -c true` 1.2 ms plain, 1.8 ms with it).
    const SECCOMP_FILTER_FLAG_SPEC_ALLOW: u32 = 1 << 2;
    // SAFETY: a valid program that outlives the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_SPEC_ALLOW | flags,
            std::ptr::addr_of!(program),
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(done as i32)
}
