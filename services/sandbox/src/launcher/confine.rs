//! What init does to itself before it starts the program, which inherits all of
//! it: the user (never root) and no capabilities, resource limits, and the
//! Landlock rules (which also set no_new_privs).

use std::path::{Path, PathBuf};

use caps::CapSet;
use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::unistd::{Gid, Uid, geteuid, getuid, setgroups, setresgid, setresuid};
use serde_json::json;

use crate::policy::{Cgroups, Identity, Limits, Policy};

/// The Landlock ABI whose access rights the sandbox asks for (file system, TCP,
/// signal and abstract-socket scoping); older kernels enforce what they know.
const LANDLOCK_ABI: ABI = ABI::V6;

/// Directories read (and executed) by every sandbox, as Landlock rules.
const READABLE: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Whether this process may run programs as `identity`: never as root, and
/// a service that is not root only as itself.
pub fn check_identity(identity: Identity) -> Result<(), String> {
    let root = geteuid().is_root();
    match identity {
        Identity::User { uid, gid } if uid == 0 || gid == 0 => {
            Err("refusing to run a program as root (uid or gid 0)".to_owned())
        }
        Identity::User { uid, .. } if !root && uid != geteuid().as_raw() => Err(format!(
            "a service that is not root runs programs as itself (uid {}), not as uid {uid}",
            geteuid()
        )),
        Identity::Service if root => {
            Err("refusing to run a program as root: the policy must name a user".to_owned())
        }
        Identity::User { .. } | Identity::Service => Ok(()),
    }
}

/// In the landlock tier, for a root service that runs programs as another
/// user: whether that user can reach `path` through the host's directories
/// (the namespace tier shows it `path` in a view of its own; here every
/// directory above it must let that user search it).
pub fn check_reachable(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let closed: Vec<(PathBuf, u32, u32)> = path
        .ancestors()
        .skip(1)
        .filter_map(|dir| {
            let meta = std::fs::metadata(dir).ok()?;
            let bit = if meta.uid() == uid {
                0o100
            } else if meta.gid() == gid {
                0o010
            } else {
                0o001
            };
            (meta.mode() & bit == 0).then(|| (dir.to_path_buf(), meta.uid(), meta.mode() & 0o7777))
        })
        .collect();
    if closed.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = closed
        .iter()
        .rev()
        .map(|(dir, owner, mode)| format!("{} (owner {owner}, mode {mode:o})", dir.display()))
        .collect();
    let chmod: Vec<String> = closed
        .iter()
        .rev()
        .map(|(dir, ..)| dir.display().to_string())
        .collect();
    Err(format!(
        "the sandbox's user (uid {uid}) cannot reach {}: {} not let it search; the landlock tier shows programs the host's own directories, so every directory above a workspace or run directory must be searchable by that user (chmod o+x {}), or the service must run as that user",
        path.display(),
        if named.len() == 1 {
            format!("the directory {} does", named[0])
        } else {
            format!("the directories {} do", named.join(", "))
        },
        chmod.join(" ")
    ))
}

/// Switches to the policy's user and drops every capability.
pub fn identity(identity: Identity) -> Result<(), String> {
    check_identity(identity)?;
    let root = geteuid().is_root();
    match identity {
        Identity::User { uid, gid } if root => {
            // The bounding set can only shrink while CAP_SETPCAP is held.
            caps::clear(None, CapSet::Bounding).map_err(|e| e.to_string())?;
            setgroups(&[Gid::from_raw(gid)]).map_err(|e| format!("setgroups: {e}"))?;
            let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
            setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
            setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
        }
        Identity::User { .. } | Identity::Service => {}
    }
    // In a user namespace the process still holds every capability of that
    // namespace; a root service that switched users holds none. Either way:
    // nothing is left.
    for set in [
        CapSet::Bounding,
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        if matches!(set, CapSet::Bounding) {
            if caps::read(None, set).is_ok_and(|s| s.is_empty()) {
                continue;
            }
            // A service that is not root (and holds no capability) cannot
            // shrink its bounding set, nor gain anything through it: with
            // no_new_privs, no program it starts is given a capability.
            if !caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP)
                .unwrap_or(false)
            {
                nix::sys::prctl::set_no_new_privs()
                    .map_err(|e| format!("cannot set no_new_privs: {e}"))?;
                continue;
            }
        }
        caps::clear(None, set).map_err(|e| format!("cannot drop capabilities: {e}"))?;
    }
    Ok(())
}

/// Sets the resource limits (each never above the current hard limit).
pub fn limits(limits: &Limits, cgroups: Option<&Cgroups>) -> Result<(), String> {
    let set = |resource: Resource, value: u64| -> Result<(), String> {
        let (_, hard) = getrlimit(resource).map_err(|e| format!("{resource:?}: {e}"))?;
        let value = value.min(hard);
        setrlimit(resource, value, value).map_err(|e| format!("{resource:?}: {e}"))
    };
    set(Resource::RLIMIT_CORE, 0)?;
    // No file longer than the run may write, sparse or not.
    set(
        Resource::RLIMIT_FSIZE,
        limits.file_bytes.min(limits.written_bytes),
    )?;
    set(Resource::RLIMIT_NOFILE, limits.open_files)?;
    if limits.cpu_secs > 0 {
        // SIGXCPU at the limit; the kernel sends SIGKILL when it is reached.
        let (_, hard) = getrlimit(Resource::RLIMIT_CPU).map_err(|e| format!("CPU: {e}"))?;
        let soft = limits.cpu_secs.min(hard);
        setrlimit(Resource::RLIMIT_CPU, soft, soft).map_err(|e| format!("CPU: {e}"))?;
    }
    if !cgroups.is_some_and(Cgroups::limits_processes) {
        set(Resource::RLIMIT_NPROC, limits.processes)?;
    }
    if limits.address_space && !cgroups.is_some_and(Cgroups::limits_memory) {
        set(Resource::RLIMIT_AS, limits.memory_bytes)?;
    }
    Ok(())
}

/// Device files a landlock-tier sandbox reads and writes (it sees the host's
/// `/dev`, of which it gets nothing else).
const DEVICES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// What a sandbox's processes see of the file system, besides the policy's
/// paths.
pub enum View<'a> {
    /// The namespace tier's mount view: `/dev` and `/tmp` are the sandbox's
    /// own; the network is a namespace of its own.
    Namespaces,
    /// The landlock tier's: the host's file system, of which the system
    /// directories are read, a few device files used, and `tmp` (a private
    /// directory) written; no TCP port bound or connected to directly (the
    /// launcher does that, see `notify`).
    Shared {
        tmp: &'a Path,
        /// Whether Landlock scopes signals; false where the launcher answers
        /// the calls that send them (see `notify`), as on kernels whose
        /// Landlock cannot.
        scope_signals: bool,
    },
}

/// Applies the Landlock rules: system directories readable, the policy's
/// paths as it says, the view's scratch places usable, and no signals or
/// abstract sockets to anything outside the sandbox.
pub fn landlock(policy: &Policy, view: &View<'_>) -> Result<RestrictionStatus, String> {
    let error = |e: landlock::RulesetError| e.to_string();
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let mut ruleset = Ruleset::default().handle_access(all).map_err(error)?;
    if matches!(view, View::Shared { .. }) {
        // No rule allows any port: every TCP bind and connect is refused.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(LANDLOCK_ABI))
            .map_err(error)?;
    }
    let scopes = match view {
        View::Shared {
            scope_signals: false,
            ..
        } => Scope::AbstractUnixSocket.into(),
        _ => Scope::Signal | Scope::AbstractUnixSocket,
    };
    let ruleset = ruleset.scope(scopes).map_err(error)?;
    let linked: Vec<PathBuf> = ["/etc/resolv.conf", "/etc/hosts", "/etc/localtime"]
        .iter()
        .filter_map(|f| std::fs::canonicalize(f).ok())
        .collect();
    let scratch: Vec<PathBuf> = match view {
        View::Namespaces => vec!["/dev".into(), "/tmp".into()],
        View::Shared { tmp, .. } => DEVICES
            .iter()
            .map(PathBuf::from)
            .chain([tmp.to_path_buf()])
            .collect(),
    };
    let mut created = ruleset.create().map_err(error)?;
    if matches!(view, View::Namespaces) {
        // Listing the root, which holds only what the view shows. (A rule
        // holds for everything beneath its directory: the landlock tier's
        // root is the host's, so it gets none, or every directory of the
        // host could be listed.)
        created = created
            .add_rule(PathBeneath::new(
                PathFd::new("/").map_err(|e| e.to_string())?,
                AccessFs::ReadDir,
            ))
            .map_err(error)?;
    }
    let created = created
        .add_rules(path_beneath_rules(READABLE, read))
        .map_err(error)?
        .add_rules(path_beneath_rules(&linked, read))
        .map_err(error)?
        .add_rules(path_beneath_rules(
            ["/proc"],
            AccessFs::ReadFile | AccessFs::ReadDir,
        ))
        .map_err(error)?
        .add_rules(path_beneath_rules(&scratch, all))
        .map_err(error)?
        .add_rules(path_beneath_rules(&policy.read_write, all))
        .map_err(error)?
        .add_rules(path_beneath_rules(&policy.read_only, read))
        .map_err(error)?;
    let status = created.restrict_self().map_err(error)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("this kernel does not enforce Landlock".to_owned());
    }
    Ok(status)
}

/// What the self-check reports: the Landlock enforcement, the seccomp mode
/// and how many filters, and the identity the program gets.
pub fn describe(landlock: &RestrictionStatus) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    json!({
        "landlock": format!("{:?}", landlock.ruleset),
        "landlock_abi": format!("{:?}", landlock.landlock),
        "no_new_privs": landlock.no_new_privs,
        "seccomp": match field("Seccomp:").as_str() {
            "2" => "filter",
            "1" => "strict",
            _ => "none",
        },
        "seccomp_filters": field("Seccomp_filters:").parse::<u32>().unwrap_or(0),
        "uid": getuid().as_raw(),
        "cap_eff": field("CapEff:"),
        "cap_bnd": field("CapBnd:"),
        "proc_sees": proc_count(),
    })
    .to_string()
}

/// How many processes `/proc` shows.
fn proc_count() -> usize {
    crate::procfs::processes().count()
}
