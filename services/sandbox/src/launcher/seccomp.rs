//! The seccomp filter init installs on itself after Landlock (no_new_privs is
//! set by then) and before the leader starts, so that every process of the
//! sandbox runs under it: a deny list of the kernel interfaces a run never
//! needs and that reach past the other layers (see decision 0020).
//!
//! Three programs, built for the host's architecture (x86_64 or aarch64):
//!
//! - the **deny list** (seccompiler): EPERM for the keyring, tracing and
//!   reading other processes, bpf, perf, userfaultfd, io_uring (whose
//!   operations bypass the filter), new namespaces (`unshare`, `setns`,
//!   `clone` with any `CLONE_NEW*` flag), mounting, swap, reboot, kexec,
//!   modules, raw I/O ports, accounting, quotas, file handles, the kernel log,
//!   setting the clock, personalities other than Linux's, and sockets other
//!   than Unix, IPv4, IPv6 and routing netlink; IPv4 and IPv6 sockets other
//!   than TCP streams (no sandbox has the host's network) (no UDP, raw, SCTP or MPTCP
//!   socket). A system call of another architecture (32-bit x86) kills the
//!   process;
//! - **clone3** (seccompiler): ENOSYS, so libc falls back to `clone`, whose
//!   flags the deny list can read (clone3 passes them in memory);
//! - **fallocate** (seccompiler): EOPNOTSUPP but for punching holes, so no
//!   disk space is taken without being written (and counted);
//! - on x86_64, the **x32 guard**: ENOSYS for every x32 system call (they
//!   carry the x86_64 architecture, with their own numbers).

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::policy::Tier;

/// The `CLONE_NEW*` flags: any of them makes a namespace. (`CLONE_NEWTIME`
/// shares its bit with clone's exit signal, where no valid signal sets it.)
const CLONE_NEW: [libc::c_int; 8] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWTIME,
];

/// `open_tree_attr(2)` (Linux 6.15; the same number on every architecture),
/// which the libc crate does not name yet.
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;

/// `personality(2)` arguments that stay allowed: Linux's own, and the query.
const PER_LINUX: u64 = 0;
const PERSONALITY_QUERY: u64 = 0xffff_ffff;

/// Socket families a sandboxed process may use.
const FAMILIES: [libc::c_int; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// System calls refused outright (EPERM), on every architecture.
const DENIED: &[libc::c_long] = &[
    // The kernel keyring: a user's keys outlive its processes, so one run
    // would read what another left.
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    // Other processes' memory and descriptors.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    // Kernel programs, profiling, page-fault handling in user space.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    // io_uring performs most operations without passing this filter.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Namespaces (clone's flags are checked below, clone3 gets ENOSYS).
    libc::SYS_unshare,
    libc::SYS_setns,
    // Mounting, in any of its forms.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    SYS_OPEN_TREE_ATTR,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // The machine itself.
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_quotactl_fd,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    // Files by handle, around the paths Landlock checks.
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_lookup_dcookie,
];

/// System calls only x86_64 has, refused too.
#[cfg(target_arch = "x86_64")]
const DENIED_ARCH: &[libc::c_long] = &[
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_uselib,
    libc::SYS_ustat,
    libc::SYS_sysfs,
    libc::SYS__sysctl,
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_ARCH: &[libc::c_long] = &[];

/// Installs the filter on the calling process (single-threaded: init, or the
/// landlock tier's leader).
pub fn install(tier: Tier) -> Result<(), String> {
    for program in programs(tier)? {
        seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The programs, in the order they are installed.
fn programs(tier: Tier) -> Result<Vec<BpfProgram>, String> {
    let arch = target_arch()?;
    let compile = |rules, action| -> Result<BpfProgram, String> {
        SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .and_then(TryInto::try_into)
            .map_err(|e| format!("cannot build the seccomp filter: {e}"))
    };
    let mut deny = deny_rules().map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    if tier == Tier::Landlock {
        let shared =
            shared_host_rules().map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
        // A call both lists name is refused when any of their rules matches
        // (no rule at all: always).
        for (nr, rules) in shared {
            match deny.get_mut(&nr) {
                Some(always) if always.is_empty() => {}
                Some(existing) if !rules.is_empty() => existing.extend(rules),
                _ => {
                    deny.insert(nr, rules);
                }
            }
        }
    }
    let mut programs = vec![
        compile(deny, SeccompAction::Errno(libc::EPERM.cast_unsigned()))?,
        compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Errno(libc::ENOSYS.cast_unsigned()),
        )?,
        compile(
            fallocate_rules().map_err(|e| format!("cannot build the seccomp filter: {e}"))?,
            SeccompAction::Errno(libc::EOPNOTSUPP.cast_unsigned()),
        )?,
    ];
    if let Some(guard) = x32_guard() {
        programs.push(guard);
    }
    Ok(programs)
}

fn target_arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(format!(
            "the seccomp filter is built for x86_64 and aarch64 only, not {}",
            std::env::consts::ARCH
        ))
    }
}

/// The deny list: each system call with the rules that refuse it (an empty
/// list refuses it always; several rules refuse it when any matches; the
/// conditions of one rule must all hold).
fn deny_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
        .iter()
        .chain(DENIED_ARCH)
        .map(|nr| (*nr, Vec::new()))
        .collect();

    // clone with any CLONE_NEW* flag in its first argument.
    let clone = CLONE_NEW
        .iter()
        .map(|flag| {
            let flag = u64::from(flag.cast_unsigned());
            SeccompRule::new(vec![arg(0, SeccompCmpOp::MaskedEq(flag), flag)?])
        })
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_clone, clone);

    // personality, except Linux's own and the query.
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(vec![
            arg(0, SeccompCmpOp::Ne, PER_LINUX)?,
            arg(0, SeccompCmpOp::Ne, PERSONALITY_QUERY)?,
        ])?],
    );

    let sockets = socket_rules()?;
    rules.insert(libc::SYS_socket, sockets.clone());
    rules.insert(libc::SYS_socketpair, sockets);
    Ok(rules)
}

/// `fallocate` takes disk space without writing, which no written-bytes
/// count sees: refused (EOPNOTSUPP, as a file system without it answers:
/// `posix_fallocate` then writes, and is counted) but for punching a hole,
/// which frees space.
fn fallocate_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let punch_hole =
        u64::from((libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE).cast_unsigned());
    Ok(BTreeMap::from([(
        libc::SYS_fallocate,
        vec![SeccompRule::new(vec![arg(
            1,
            SeccompCmpOp::Ne,
            punch_hole,
        )?])?],
    )]))
}

/// SysV IPC and POSIX message queues: without an IPC namespace, their objects
/// are the host's and its user's, shared by every run of that user and
/// outliving each (the landlock tier refuses them all; a namespace-tier
/// sandbox has an IPC namespace of its own).
const IPC: &[libc::c_long] = &[
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

/// What a sandbox that shares the service's PID and network namespaces (the
/// landlock tier) is refused besides: calls that act on another process of
/// the same user by its pid without ptrace's checks (which Landlock makes),
/// so the service's own processes cannot be reniced, pinned or starved of
/// limits; TCP Fast Open's connection in `sendto`/`sendmsg`, which no
/// `connect` call (that the launcher answers) precedes; the host's IPC
/// objects ([`IPC`]); and Unix sockets that could reach a socket file of
/// the host — Landlock checks no `connect` or `sendto` to one: `socket`
/// of the Unix family, and datagram socket pairs (whose `sendto` may name
/// any socket file). Stream and sequenced-packet pairs, connected to each
/// other only, stay: programs use them as pipes.
fn shared_host_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let not_self = || -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![SeccompRule::new(vec![arg(0, SeccompCmpOp::Ne, 0)?])?])
    };
    let fast_open = |index: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        let flag = u64::from(libc::MSG_FASTOPEN.cast_unsigned());
        Ok(vec![SeccompRule::new(vec![arg(
            index,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )?])?])
    };
    // setpriority(which, who) and ioprio_set(which, who): a user's every
    // process, or another process or group.
    let by_user_or_other = |user: u64| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![
            SeccompRule::new(vec![arg(0, SeccompCmpOp::Eq, user)?])?,
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Ne, 0)?])?,
        ])
    };
    let prio_user = u64::from(libc::PRIO_USER);
    /// IOPRIO_WHO_USER of ioprio_set(2).
    const IOPRIO_WHO_USER: u64 = 3;
    let unix = u64::from(libc::AF_UNIX.cast_unsigned());
    // The type without SOCK_NONBLOCK and SOCK_CLOEXEC.
    const SOCK_TYPE_MASK: u64 = 0xf;
    let datagram = u64::from(libc::SOCK_DGRAM.cast_unsigned());
    let mut rules = BTreeMap::from([
        (
            libc::SYS_socket,
            vec![SeccompRule::new(vec![arg(0, SeccompCmpOp::Eq, unix)?])?],
        ),
        (
            libc::SYS_socketpair,
            vec![SeccompRule::new(vec![
                arg(0, SeccompCmpOp::Eq, unix)?,
                arg(1, SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK), datagram)?,
            ])?],
        ),
    ]);
    rules.extend(IPC.iter().map(|nr| (*nr, Vec::new())));
    rules.extend([
        (libc::SYS_prlimit64, not_self()?),
        (libc::SYS_sched_setaffinity, not_self()?),
        (libc::SYS_sched_setscheduler, not_self()?),
        (libc::SYS_sched_setparam, not_self()?),
        (libc::SYS_sched_setattr, not_self()?),
        (libc::SYS_setpriority, by_user_or_other(prio_user)?),
        (libc::SYS_ioprio_set, by_user_or_other(IOPRIO_WHO_USER)?),
        (libc::SYS_sendto, fast_open(3)?),
        (libc::SYS_sendmsg, fast_open(2)?),
        (libc::SYS_sendmmsg, fast_open(3)?),
    ]);
    Ok(rules)
}

/// `socket(domain, type, protocol)` (and socketpair) refused: another family;
/// netlink other than routing (which glibc and `ip` use to list interfaces);
/// and, without the host's network, IPv4 and IPv6 other than TCP streams.
fn socket_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let family = |f: libc::c_int| u64::from(f.cast_unsigned());
    let mut rules = vec![
        SeccompRule::new(
            FAMILIES
                .iter()
                .map(|f| arg(0, SeccompCmpOp::Ne, family(*f)))
                .collect::<Result<_, _>>()?,
        )?,
        SeccompRule::new(vec![
            arg(0, SeccompCmpOp::Eq, family(libc::AF_NETLINK))?,
            arg(2, SeccompCmpOp::Ne, family(libc::NETLINK_ROUTE))?,
        ])?,
    ];
    {
        // SOCK_STREAM, alone or with SOCK_NONBLOCK and SOCK_CLOEXEC (the
        // kernel refuses any other flag).
        let stream = family(libc::SOCK_STREAM);
        let (nonblock, cloexec) = (family(libc::SOCK_NONBLOCK), family(libc::SOCK_CLOEXEC));
        let streams = [
            stream,
            stream | nonblock,
            stream | cloexec,
            stream | nonblock | cloexec,
        ];
        for inet in [libc::AF_INET, libc::AF_INET6] {
            let mut not_stream = vec![arg(0, SeccompCmpOp::Eq, family(inet))?];
            for kind in streams {
                not_stream.push(arg(1, SeccompCmpOp::Ne, kind)?);
            }
            rules.push(SeccompRule::new(not_stream)?);
            // A stream of another protocol (SCTP, MPTCP) is not TCP, which
            // is all Landlock's port rules know.
            rules.push(SeccompRule::new(vec![
                arg(0, SeccompCmpOp::Eq, family(inet))?,
                arg(2, SeccompCmpOp::Ne, 0)?,
                arg(2, SeccompCmpOp::Ne, family(libc::IPPROTO_TCP))?,
            ])?);
        }
    }
    Ok(rules)
}

/// A condition on the low 32 bits of argument `index` (every argument checked
/// here is an `int` or a flag word of 32 bits).
fn arg(
    index: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
}

/// On x86_64: ENOSYS for x32 system calls (numbers with bit 30 set), which
/// pass the x86_64 architecture check with numbers the deny list does not
/// name. seccompiler compares numbers one by one, so this guard is written
/// out: load the architecture; not x86_64 (killed by the deny list) → allow;
/// load the number; at or above the x32 bit → ENOSYS; else allow.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Option<BpfProgram> {
    use super::bpf::{ARCH, AUDIT_ARCH, NR, jump, load, ret};
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS.cast_unsigned();
    Some(vec![
        load(ARCH),
        jump(libc::BPF_JEQ, AUDIT_ARCH, 0, 3),
        load(NR),
        jump(libc::BPF_JGE, X32_SYSCALL_BIT, 0, 1),
        ret(enosys),
        ret(libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_guard() -> Option<BpfProgram> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deny_list_names_what_the_issue_found_and_the_usual_rest() {
        let rules = deny_rules().expect("rules");
        for nr in [
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_ptrace,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_mount,
            libc::SYS_kexec_load,
            libc::SYS_open_by_handle_at,
        ] {
            assert!(
                rules.get(&nr).is_some_and(Vec::is_empty),
                "system call {nr} is not refused outright"
            );
        }
        for nr in [
            libc::SYS_clone,
            libc::SYS_personality,
            libc::SYS_socket,
            libc::SYS_socketpair,
        ] {
            assert!(
                rules.get(&nr).is_some_and(|r| !r.is_empty()),
                "system call {nr} is not checked by its arguments"
            );
        }
        assert!(!rules.contains_key(&libc::SYS_clone3), "clone3 gets ENOSYS");
    }

    #[test]
    fn inet_sockets_are_tcp_streams_only() {
        let rules = socket_rules().expect("rules");
        assert_eq!(
            rules.len(),
            6,
            "families, netlink, and IPv4 and IPv6: type and protocol"
        );
    }

    #[test]
    fn every_program_compiles_for_this_architecture() {
        let landlock = programs(Tier::Landlock).expect("programs");
        let programs = programs(Tier::Namespaces).expect("programs");
        assert_eq!(landlock.len(), programs.len());
        let expected = if cfg!(target_arch = "x86_64") { 4 } else { 3 };
        assert_eq!(programs.len(), expected);
        assert!(programs.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }
}
