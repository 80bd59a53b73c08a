//! The seccomp filter of every sandboxed command, compiled (with `seccompiler`) once by the
//! helper factory; bash's side only installs it ([`super::apply`]), last but for the notifying
//! filter, after the namespaces and Landlock are in place.
//!
//! They refuse what could lift or bypass the sandbox, for the command and everything it starts:
//! new namespaces (`unshare`, `setns`, `clone` with a namespace flag; `clone3`, whose flags
//! a filter cannot read, is the notifying filter's: it reports "not implemented", so that the C
//! library falls back to `clone`),
//! mounting, `ptrace`, `process_vm_*` and `pidfd_getfd` (reading or writing another process), io_uring (whose
//! operations no filter sees), kernel keyrings, BPF, kernel modules, `kexec`, `reboot` and swap, and changing
//! another process's resource limits. (The x32 system call numbers, on x86_64, are the notifying
//! filter's too.)

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Calls no sandboxed command may make.
const REFUSED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    // Another process's descriptors (the helper's listener among them).
    libc::SYS_pidfd_getfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    // Kernel keyrings (a Kerberos ticket cache, say) are not files Landlock sees.
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
];

/// Every namespace flag `clone` takes.
const NAMESPACE_FLAGS: [i32; 8] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    0x80, // CLONE_NEWTIME
];

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> io::Result<BpfProgram> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, ARCH)
        .map_err(|e| io::Error::other(format!("seccomp filter: {e}")))?;
    BpfProgram::try_from(filter).map_err(|e| io::Error::other(format!("seccomp filter: {e}")))
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> io::Result<SeccompCondition> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| io::Error::other(format!("seccomp condition: {e}")))
}

fn rule(conditions: Vec<SeccompCondition>) -> io::Result<SeccompRule> {
    SeccompRule::new(conditions).map_err(|e| io::Error::other(format!("seccomp rule: {e}")))
}

/// The filters of every sandboxed command, in the order they are installed (sockets, which
/// depend on the network, are the notifying filter's: [`super::notify`]).
pub(crate) fn filters() -> io::Result<Vec<BpfProgram>> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&call| (call, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            rule(vec![condition(
                0,
                SeccompCmpOp::MaskedEq(flag as u32 as u64),
                flag as u32 as u64,
            )?])
        })
        .collect::<io::Result<Vec<_>>>()?;
    refused.insert(libc::SYS_clone, clone_rules);
    // Another process's limits (pid not 0): the helper's after-care (restoring protected paths,
    // removing TMPDIR) must not be starved of descriptors, file size or CPU time by its command.
    refused.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![condition(0, SeccompCmpOp::Ne, 0)?])?],
    );
    // `clone3` and the x32 calls are the notifying filter's ([`super::notify::filter`]).
    Ok(vec![compile(
        refused,
        SeccompAction::Errno(libc::EPERM as u32),
    )?])
}

/// A filter that allows everything (the probe's).
pub(crate) fn allow_all() -> BpfProgram {
    compile(BTreeMap::new(), SeccompAction::KillProcess).unwrap_or_default()
}
