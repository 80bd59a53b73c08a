//! The seccomp filter of every sandboxed command, written once by the helper factory; bash's
//! side only installs it ([`super::apply`]), last, after the namespaces and Landlock are in
//! place. One program, with a binary search on the call's number ([`super::bpf`]): installing a
//! filter costs the kernel a run of it for every call number, which two programs with chains of
//! comparisons made 136 µs of every command's start (measured in the spawn helper's child, 200
//! commands), and this one about 20.
//!
//! It hands the file calls, and sockets where the network is restricted, to the spawn helper
//! ([`super::notify`]), and refuses what could lift or bypass the sandbox, for the command and
//! everything it starts:
//! new namespaces (`unshare`, `setns`, `clone` with a namespace flag; `clone3`, whose flags
//! a filter cannot read, is "not implemented", so that the C library falls back to `clone`),
//! mounting, `ptrace`, `process_vm_*` and `pidfd_getfd` (reading or writing another process), io_uring (whose
//! operations no filter sees), kernel keyrings, BPF, kernel modules, `kexec`, `reboot` and swap, and changing
//! another process's resource limits. A call of another architecture kills the process; on
//! x86_64, every x32 call (numbers with bit 30 set, which would reach the same calls under other
//! numbers) is "not implemented".

use super::NetworkMode;
use super::bpf::{AsmError, Assembler, Label, Program, To};
use super::notify::{FILE_CALLS, OPENS};

#[cfg(target_arch = "x86_64")]
pub(crate) const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub(crate) const AUDIT_ARCH: u32 = 0xc000_00b7;

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

/// The filter of every sandboxed command whose network is `network`:
///
/// - another architecture's call: the process is killed;
/// - an x32 call, or `clone3` (whose flags a filter cannot read: the C library then falls back
///   to `clone`, whose flags are checked): "not implemented";
/// - [`REFUSED`], `clone` with a namespace flag, `prlimit64` of another process: `EPERM`;
/// - the file calls ([`FILE_CALLS`]), `open` and `openat` but those the sandbox can never refuse
///   ([`OPENS`]), `socket` of any family but Unix where the network is off, `connect` where it is
///   loopback only: handed to the helper;
/// - everything else: allowed (and, being allowed whatever its arguments, never run through the
///   filter again: the kernel remembers it at install).
pub(crate) fn filter(network: NetworkMode) -> Result<Program, AsmError> {
    let mut asm = Assembler::new();
    let allow = asm.label();
    let notify = asm.label();
    let not_implemented = asm.label();
    let refuse = asm.label();
    let kill = asm.label();
    let clone = asm.label();
    let prlimit = asm.label();
    let socket = asm.label();
    let open_flags = asm.label();

    let mut cases: Vec<(u32, Label)> = REFUSED.iter().map(|&nr| (nr as u32, refuse)).collect();
    cases.push((libc::SYS_clone as u32, clone));
    cases.push((libc::SYS_prlimit64 as u32, prlimit));
    cases.push((libc::SYS_clone3 as u32, not_implemented));
    // Each open loads its flags, then shares the test of them.
    let opens: Vec<(u32, Label)> = OPENS
        .iter()
        .map(|&(nr, _)| (nr as u32, asm.label()))
        .collect();
    cases.extend(&opens);
    cases.extend(
        FILE_CALLS
            .iter()
            .filter(|&&nr| !OPENS.iter().any(|&(open, _)| open == nr))
            .map(|&nr| (nr as u32, notify)),
    );
    match network {
        NetworkMode::Off => cases.push((libc::SYS_socket as u32, socket)),
        NetworkMode::Loopback => cases.push((libc::SYS_connect as u32, notify)),
        NetworkMode::On => {}
    }

    asm.load_arch();
    asm.jeq(AUDIT_ARCH, To::Next, kill);
    asm.load_nr();
    #[cfg(target_arch = "x86_64")]
    {
        const X32_BIT: u32 = 0x4000_0000;
        asm.jge(X32_BIT, not_implemented, To::Next);
    }
    asm.dispatch(&cases, allow)?;

    for (&(_, flags_arg), &(_, label)) in OPENS.iter().zip(&opens) {
        asm.place(label);
        asm.load_arg_low(flags_arg);
        asm.jump(open_flags);
    }
    // A descriptor of a path (`O_PATH`) opens no file, and listing a directory is allowed
    // everywhere: an open for reading only with `O_DIRECTORY` fails `ENOTDIR` before any check
    // if it names no directory.
    asm.place(open_flags);
    asm.jset(libc::O_PATH as u32, allow, To::Next);
    asm.and(
        (libc::O_DIRECTORY | libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC | libc::O_TMPFILE)
            as u32,
    );
    asm.jeq(libc::O_DIRECTORY as u32, allow, notify);

    asm.place(clone);
    asm.load_arg_low(0);
    asm.jset(
        NAMESPACE_FLAGS
            .iter()
            .fold(0, |mask, &flag| mask | flag as u32),
        refuse,
        allow,
    );

    // Another process's limits (pid not 0): the helper's after-care (restoring protected paths,
    // removing TMPDIR) must not be starved of descriptors, file size or CPU time by its command.
    asm.place(prlimit);
    asm.load_arg_low(0);
    asm.jeq(0, allow, refuse);

    if network == NetworkMode::Off {
        asm.place(socket);
        asm.load_arg_low(0);
        asm.jeq(libc::AF_UNIX as u32, allow, notify);
    }

    asm.place(allow);
    asm.ret(libc::SECCOMP_RET_ALLOW);
    asm.place(notify);
    asm.ret(libc::SECCOMP_RET_USER_NOTIF);
    asm.place(not_implemented);
    asm.ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    asm.place(refuse);
    asm.ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    asm.place(kill);
    asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
    asm.finish()
}

#[cfg(test)]
mod tests {
    use super::super::bpf::{Insn, const_allow, run};
    use super::*;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const NETWORKS: [NetworkMode; 3] = [NetworkMode::Off, NetworkMode::Loopback, NetworkMode::On];
    #[cfg(target_arch = "x86_64")]
    const X32: u32 = 0x4000_0000;

    fn action(program: &[Insn], nr: i64, args: [u64; 6]) -> u32 {
        run(program, AUDIT_ARCH, nr as u32, args).0
    }

    /// The refusals as `seccompiler` compiles them, an independent reading of the same rules
    /// (the rule set this filter replaced).
    fn refusals_by_seccompiler() -> Vec<Insn> {
        use seccompiler::{
            SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
            SeccompRule, TargetArch,
        };
        #[cfg(target_arch = "x86_64")]
        const ARCH: TargetArch = TargetArch::x86_64;
        #[cfg(target_arch = "aarch64")]
        const ARCH: TargetArch = TargetArch::aarch64;
        let condition = |op, value| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, value).expect("a condition")
        };
        let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
            REFUSED.iter().map(|&call| (call, Vec::new())).collect();
        rules.insert(
            libc::SYS_clone,
            NAMESPACE_FLAGS
                .iter()
                .map(|&flag| {
                    let flag = u64::from(flag as u32);
                    SeccompRule::new(vec![condition(SeccompCmpOp::MaskedEq(flag), flag)])
                        .expect("a rule")
                })
                .collect(),
        );
        rules.insert(
            libc::SYS_prlimit64,
            vec![SeccompRule::new(vec![condition(SeccompCmpOp::Ne, 0)]).expect("a rule")],
        );
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            ARCH,
        )
        .expect("a filter");
        let program: seccompiler::BpfProgram = filter.try_into().expect("a program");
        program
            .iter()
            .map(|i| Insn {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect()
    }

    /// What the notifications alone decide, written out plainly.
    fn notified(network: NetworkMode, nr: i64, args: [u64; 6]) -> u32 {
        let open_flags = |flags: u64| {
            let flags = flags as u32 as i32;
            let never_refused = flags & libc::O_PATH != 0
                || flags
                    & (libc::O_DIRECTORY
                        | libc::O_ACCMODE
                        | libc::O_CREAT
                        | libc::O_TRUNC
                        | libc::O_TMPFILE)
                    == libc::O_DIRECTORY;
            if never_refused { ALLOW } else { NOTIFY }
        };
        #[cfg(target_arch = "x86_64")]
        if nr as u32 >= X32 {
            return ENOSYS;
        }
        match nr {
            libc::SYS_clone3 => ENOSYS,
            libc::SYS_openat => open_flags(args[2]),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => open_flags(args[1]),
            nr if FILE_CALLS.contains(&nr) => NOTIFY,
            libc::SYS_socket
                if network == NetworkMode::Off && args[0] as u32 != libc::AF_UNIX as u32 =>
            {
                NOTIFY
            }
            libc::SYS_connect if network == NetworkMode::Loopback => NOTIFY,
            _ => ALLOW,
        }
    }

    /// The kernel's choice among the actions of several filters: the most restrictive.
    fn strictest(actions: &[u32]) -> u32 {
        *actions
            .iter()
            .min_by_key(|&&a| (a & libc::SECCOMP_RET_ACTION_FULL) as i32)
            .expect("an action")
    }

    /// Arguments that reach every branch.
    fn argument_sets() -> Vec<[u64; 6]> {
        let mut sets = vec![[0; 6], [u64::MAX; 6], [1 << 32; 6]];
        let flags = [
            0,
            libc::O_RDONLY | libc::O_CLOEXEC,
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            libc::O_DIRECTORY,
            libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK,
            libc::O_DIRECTORY | libc::O_WRONLY,
            libc::O_DIRECTORY | libc::O_CREAT,
            libc::O_DIRECTORY | libc::O_TRUNC,
            libc::O_TMPFILE | libc::O_RDWR,
            libc::O_PATH,
            libc::O_PATH | libc::O_DIRECTORY,
            libc::O_PATH | libc::O_WRONLY | libc::O_CREAT,
        ];
        for f in flags {
            for high in [0u64, 1 << 40] {
                let f = f as u32 as u64 | high;
                sets.push([libc::AT_FDCWD as u32 as u64, 0, f, 0, 0, 0]);
                sets.push([0, f, 0, 0, 0, 0]);
            }
        }
        for flag in NAMESPACE_FLAGS {
            sets.push([flag as u32 as u64 | libc::SIGCHLD as u64, 0, 0, 0, 0, 0]);
        }
        sets.push([
            (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64,
            0,
            0,
            0,
            0,
            0,
        ]);
        for family in [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
        ] {
            sets.push([family as u64, 0, 0, 0, 0, 0]);
            sets.push([family as u64 | 1 << 32, 0, 0, 0, 0, 0]);
        }
        for pid in [1u64, 1234, 1 << 32, 0xffff_ffff] {
            sets.push([pid, 0, 0, 0, 0, 0]);
        }
        sets
    }

    fn call_numbers() -> Vec<i64> {
        let mut numbers: Vec<i64> = (0..1024).collect();
        #[cfg(target_arch = "x86_64")]
        numbers.extend((0..600).map(|nr| i64::from(X32) + nr));
        numbers.push(i64::from(u32::MAX));
        numbers
    }

    #[test]
    fn the_filter_decides_as_the_refusals_and_the_notifications_it_joins() {
        let refusals = refusals_by_seccompiler();
        let sets = argument_sets();
        for network in NETWORKS {
            let program = filter(network).expect("the filter");
            for nr in call_numbers() {
                for args in &sets {
                    let expected =
                        strictest(&[action(&refusals, nr, *args), notified(network, nr, *args)]);
                    assert_eq!(
                        action(&program, nr, *args),
                        expected,
                        "{network:?}: call {nr} with {args:x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn calls_of_another_architecture_kill() {
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        for network in NETWORKS {
            let program = filter(network).expect("the filter");
            for nr in [0u32, 2, 5, 11, 56, 120, 435] {
                assert_eq!(run(&program, AUDIT_ARCH_I386, nr, [0; 6]).0, KILL);
            }
        }
    }

    #[test]
    fn calls_the_filter_always_allows_are_found_at_install_in_few_steps() {
        for network in NETWORKS {
            let program = filter(network).expect("the filter");
            let mut most = 0;
            for nr in 0..1024u32 {
                let (allowed, steps) = const_allow(&program, AUDIT_ARCH, nr);
                most = most.max(steps);
                // Whatever no argument changes and the filter allows, the kernel need never run
                // it for: `read`, `write`, `mmap` and the rest of a program's common calls.
                let always = argument_sets()
                    .iter()
                    .all(|args| action(&program, i64::from(nr), *args) == ALLOW);
                assert_eq!(allowed, always, "{network:?}: call {nr}");
            }
            for common in [
                libc::SYS_read,
                libc::SYS_write,
                libc::SYS_mmap,
                libc::SYS_close,
            ] {
                assert!(const_allow(&program, AUDIT_ARCH, common as u32).0);
            }
            // The arch check, the load, the x32 check, six halvings, four comparisons, a jump,
            // a return.
            assert!(most <= 16, "{network:?}: {most} steps");
        }
    }

    #[test]
    fn opens_the_sandbox_never_refuses_are_not_notified() {
        use libc::{O_CLOEXEC, O_CREAT, O_DIRECTORY, O_PATH, O_RDONLY, O_RDWR, O_WRONLY};
        let program = filter(NetworkMode::Off).expect("the filter");
        let at_cwd = libc::AT_FDCWD as u32 as u64;
        let openat = |flags: u64| action(&program, libc::SYS_openat, [at_cwd, 0, flags, 0, 0, 0]);
        let flags = |f: i32| f as u64;
        assert_eq!(openat(flags(O_RDONLY | O_DIRECTORY | O_CLOEXEC)), ALLOW);
        assert_eq!(openat(flags(O_PATH | O_CLOEXEC)), ALLOW);
        assert_eq!(openat(flags(O_PATH | O_DIRECTORY)), ALLOW);
        assert_eq!(openat(flags(O_RDONLY | O_CLOEXEC)), NOTIFY);
        assert_eq!(openat(flags(O_WRONLY | O_DIRECTORY)), NOTIFY);
        assert_eq!(openat(flags(O_RDWR | O_DIRECTORY)), NOTIFY);
        assert_eq!(openat(flags(O_CREAT | O_DIRECTORY)), NOTIFY);
        assert_eq!(openat(flags(libc::O_TMPFILE | O_RDWR)), NOTIFY);
        assert_eq!(
            openat(flags(O_RDONLY | libc::O_TRUNC | O_DIRECTORY)),
            NOTIFY
        );
        // Flags above the low 32 bits are not flags: the low half decides.
        assert_eq!(openat((1 << 40) | flags(O_DIRECTORY)), ALLOW);
        assert_eq!(openat((1 << 40) | flags(O_RDONLY)), NOTIFY);
        #[cfg(target_arch = "x86_64")]
        {
            let open = |f: i32| action(&program, libc::SYS_open, [0, f as u64, 0, 0, 0, 0]);
            assert_eq!(open(O_RDONLY | O_DIRECTORY), ALLOW);
            assert_eq!(open(O_PATH), ALLOW);
            assert_eq!(open(O_RDONLY), NOTIFY);
            assert_eq!(open(O_WRONLY | O_CREAT), NOTIFY);
            assert_eq!(action(&program, libc::SYS_creat, [0; 6]), NOTIFY);
        }
        // The other file calls still are; so are a socket where the network is off, and
        // nothing else.
        assert_eq!(action(&program, libc::SYS_openat2, [0; 6]), NOTIFY);
        assert_eq!(action(&program, libc::SYS_unlinkat, [0; 6]), NOTIFY);
        let socket =
            |family: i32| action(&program, libc::SYS_socket, [family as u64, 0, 0, 0, 0, 0]);
        assert_eq!(socket(libc::AF_INET), NOTIFY);
        assert_eq!(socket(libc::AF_UNIX), ALLOW);
        assert_eq!(action(&program, libc::SYS_read, [0; 6]), ALLOW);
    }

    #[test]
    fn what_could_lift_the_sandbox_is_refused() {
        for network in NETWORKS {
            let program = filter(network).expect("the filter");
            for &nr in REFUSED {
                assert_eq!(action(&program, nr, [0; 6]), EPERM, "{network:?}: {nr}");
            }
            let clone =
                |flags: i32| action(&program, libc::SYS_clone, [flags as u64, 0, 0, 0, 0, 0]);
            assert_eq!(clone(libc::CLONE_NEWUSER | libc::SIGCHLD), EPERM);
            assert_eq!(clone(libc::CLONE_NEWNS), EPERM);
            assert_eq!(
                clone(libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD),
                ALLOW
            );
            assert_eq!(action(&program, libc::SYS_clone3, [0; 6]), ENOSYS);
            let prlimit = |pid: u64| action(&program, libc::SYS_prlimit64, [pid, 0, 0, 0, 0, 0]);
            assert_eq!(prlimit(0), ALLOW);
            assert_eq!(prlimit(1), EPERM);
        }
    }
}
