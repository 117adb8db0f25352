//! What one sandbox allows: the policy a service hands the launcher (as JSON in
//! `--policy`). It carries paths, ids and limits, never a secret: the target's
//! environment is the launcher's own, set by the service.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::egress::{EgressRule, Forward};

/// The program name that makes the launcher run its self-check instead of a
/// program: every confinement step is taken, then the leader exits 0.
pub const PROBE_PROGRAM: &str = "chorus-sandbox:probe";

/// Everything the launcher needs besides the program and its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The service's pid: the launcher refuses to start when its parent is
    /// already another process (the service died while starting it).
    pub parent: Option<i32>,
    /// Working directory of the program (inside one of the visible paths).
    pub cwd: PathBuf,
    /// Directories (or files) visible and writable, at the same paths.
    pub read_write: Vec<PathBuf>,
    /// Directories (or files) visible read-only (and executable), at the same
    /// paths, besides the system directories every sandbox sees.
    pub read_only: Vec<PathBuf>,
    pub network: Network,
    pub identity: Identity,
    pub limits: Limits,
    /// Per-sandbox control groups, when the host lets the service make them.
    pub cgroups: Option<Cgroups>,
    /// Files inside the visible paths shown with other content.
    #[serde(default)]
    pub covers: Vec<Cover>,
    /// The run the sandbox belongs to: every sandbox of one run on a host
    /// shares the run's cgroup, and its limits (see [`valid_run_id`]). None
    /// (a self-check, a test): the sandbox's own limits.
    #[serde(default)]
    pub run: Option<String>,
    /// The run's fence (see the launcher's `fence` module): the sandbox is
    /// killed once the time in this file has passed. None: no fence.
    #[serde(default)]
    pub fence: Option<PathBuf>,
    /// The run's ledger (see the launcher's `budget` module): a directory,
    /// outside every sandbox, where each sandbox of the run keeps what it
    /// wrote, so that [`Limits::written_bytes`] is the run's over all its
    /// calls. None (no run): the sandbox's own.
    #[serde(default)]
    pub ledger: Option<PathBuf>,
    /// How the sandbox is built.
    #[serde(default)]
    pub tier: Tier,
    /// In the landlock tier: the launcher answers the calls that signal or
    /// open another process by pid, letting them reach the sandbox's own
    /// processes only. It does so by itself on kernels whose Landlock cannot
    /// scope signals (before ABI 6, Linux 6.12); true asks for it anyway.
    #[serde(default)]
    pub gate_signals: bool,
    /// With a proxied network: the descriptor, inherited by the launcher, of
    /// the channel its proxy asks the service on before each connection (see
    /// [`crate::questions`]). None: the egress list alone decides.
    #[serde(default)]
    pub questions_fd: Option<i32>,
}

/// How a sandbox is built. Both give the same policy; what each guarantees
/// beyond it is in docs/sandbox-tiers.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Namespaces of its own (PID, mount, network, IPC, UTS, and a user
    /// namespace for a service that is not root), Landlock and seccomp on
    /// top. The stronger tier, and the default.
    #[default]
    Namespaces,
    /// No namespace and no privilege: Landlock (files, TCP, signals and
    /// abstract sockets), seccomp (with the launcher answering every
    /// `connect`, `bind` and `listen`), and the launcher as the child
    /// subreaper of every process of the sandbox. For hosts where namespaces
    /// cannot be made (a restricted container).
    Landlock,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Namespaces => "namespaces",
            Self::Landlock => "landlock",
        }
    }
}

/// A file the sandbox shows with other content, read-only: `path` (an
/// existing regular file inside one of the policy's paths, reached without
/// any symlink) reads as `content`. The file itself is not changed. git's
/// view of a repository's configuration is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cover {
    pub path: PathBuf,
    pub content: String,
}

impl Policy {
    /// Refuses what the launcher must not act on.
    ///
    /// # Errors
    /// A run id that is not a safe single path component.
    pub fn validate(&self) -> Result<(), String> {
        match &self.run {
            Some(run) if !valid_run_id(run) => Err(format!(
                "the run id '{run}' must be 1 to {MAX_RUN_ID} letters, digits, '-' or '_'"
            )),
            _ => Ok(()),
        }
    }
}

/// The longest run id a policy may carry (it names a cgroup).
pub const MAX_RUN_ID: usize = 128;

/// Whether `run` can name the run's cgroup: 1 to [`MAX_RUN_ID`] ASCII letters,
/// digits, '-' and '_' (no '/', no '.', nothing a path would read otherwise).
pub fn valid_run_id(run: &str) -> bool {
    (1..=MAX_RUN_ID).contains(&run.len())
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What the processes of a sandbox may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// A network namespace of its own: only a loopback interface.
    None,
    /// A network namespace of its own (loopback only) whose one way out is
    /// the launcher's proxy, outside it, at [`crate::egress::PROXY_ADDR`]:
    /// `allow` says where it connects (never the host's loopback or
    /// link-local addresses), and `forwards` are fixed TCP forwards from
    /// loopback addresses inside to services outside. See [`crate::egress`].
    Proxied {
        allow: Vec<EgressRule>,
        forwards: Vec<Forward>,
    },
}

impl Network {
    /// Whether the sandbox gets a network namespace of its own (always: no
    /// sandbox shares the host's network, its loopback least of all).
    pub fn own_namespace(&self) -> bool {
        matches!(self, Self::None | Self::Proxied { .. })
    }
}

/// Which user the processes of a sandbox run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Identity {
    /// The service's own user (a service that is not root: the launcher uses a
    /// user namespace mapping only that user).
    Service,
    /// This user and group (a root service switches to them; never uid 0).
    User { uid: u32, gid: u32 },
}

/// Resource limits of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most processes (and threads) at once: the cgroup's pids.max, else
    /// RLIMIT_NPROC (which counts every process of the user).
    pub processes: u64,
    /// Most memory: the cgroup's memory limit; without a memory cgroup,
    /// `address_space` decides.
    pub memory_bytes: u64,
    /// Without a memory cgroup, also cap each process's address space at
    /// `memory_bytes` (RLIMIT_AS). Off for programs that reserve huge address
    /// ranges up front (JavaScript runtimes).
    pub address_space: bool,
    /// CPU seconds each process may use (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Largest file a process may write (RLIMIT_FSIZE).
    pub file_bytes: u64,
    /// Most open files per process (RLIMIT_NOFILE, never above the current hard limit).
    pub open_files: u64,
    /// Size of the sandbox's private /tmp.
    pub tmp_bytes: u64,
    /// The run's CPU weight against other runs and the host's other processes
    /// (cgroup v2's `cpu.weight`, 1 to 10000, 100 being a default process;
    /// v1's `cpu.shares` is 1024 / 100 of it), where a cpu controller is
    /// writable.
    pub cpu_weight: u64,
    /// Most bytes a run's processes together may write to files, over all
    /// its sandboxes (what the kernel counts as `write_bytes`: pages dirtied
    /// for storage; a private `/tmp` does not count). Each sandbox's monitor
    /// adds them up every 100 ms, with or without a cgroup; past the limit it
    /// kills every process of its sandbox and exits [`EXIT_WROTE_TOO_MUCH`].
    /// Also the longest file a process may make (`RLIMIT_FSIZE` is the
    /// smaller of this and [`Limits::file_bytes`]), sparse or not.
    pub written_bytes: u64,
    /// Free space every sandbox leaves on the file systems it may write to:
    /// below it, the sandbox is stopped as if over its written bytes. 0: none.
    #[serde(default)]
    pub min_free_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            processes: 512,
            memory_bytes: 8 << 30,
            address_space: false,
            cpu_secs: 3600,
            file_bytes: 8 << 30,
            open_files: 4096,
            tmp_bytes: 1 << 30,
            cpu_weight: 100,
            written_bytes: 8 << 30,
            min_free_bytes: 512 << 20,
        }
    }
}

/// Where per-sandbox control groups are made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cgroups {
    /// cgroup v2: a child of this directory (its subtree_control enables pids
    /// and memory).
    V2 { parent: PathBuf },
    /// cgroup v1: a child in each controller's hierarchy that is writable.
    V1 {
        pids: Option<PathBuf>,
        memory: Option<PathBuf>,
        /// The CPU weight (`cpu.shares`) of a run, when writable.
        #[serde(default)]
        cpu: Option<PathBuf>,
    },
}

impl Cgroups {
    /// Whether the processes of a sandbox are counted by a cgroup.
    pub fn limits_processes(&self) -> bool {
        match self {
            Self::V2 { .. } => true,
            Self::V1 { pids, .. } => pids.is_some(),
        }
    }

    /// Whether the memory of a sandbox is limited by a cgroup.
    pub fn limits_memory(&self) -> bool {
        match self {
            Self::V2 { .. } => true,
            Self::V1 { memory, .. } => memory.is_some(),
        }
    }

    /// The directories a sandbox's cgroups are made in.
    pub fn parents(&self) -> Vec<&PathBuf> {
        match self {
            Self::V2 { parent } => vec![parent],
            Self::V1 { pids, memory, cpu } => pids.iter().chain(memory).chain(cpu).collect(),
        }
    }
}

/// What a process that reaches the network needs from a service's environment,
/// when set: proxies and certificate locations.
pub const NETWORK_ENV: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The prefix of every per-sandbox cgroup's name.
pub const CGROUP_PREFIX: &str = "chorus-sandbox-";
/// The prefix of every per-run cgroup's name (the run id follows).
pub const RUN_CGROUP_PREFIX: &str = "chorus-run-";

/// Exit code of the launcher when the sandbox could not be set up (the reason
/// is on stderr, after [`MESSAGE_PREFIX`]).
pub const EXIT_SETUP_FAILED: i32 = 125;
/// Exit code when the sandbox was killed because its fence ran out (or at
/// start, was already down).
pub const EXIT_FENCED: i32 = 124;
/// The launcher's exit code when the sandbox's processes wrote more than
/// their limit ([`Limits::written_bytes`]) and were killed; its message says
/// how much.
pub const EXIT_WROTE_TOO_MUCH: i32 = 123;
/// The launcher's exit code when, with no memory cgroup to limit them, the
/// processes of the sandbox's run held more memory than their limit
/// ([`Limits::memory_bytes`]) and the sandbox's were killed.
pub const EXIT_OVER_MEMORY: i32 = 122;
/// Exit code when the program exists but could not be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit code when the program was not found.
pub const EXIT_NOT_FOUND: i32 = 127;
/// How the launcher's own messages start on stderr.
pub const MESSAGE_PREFIX: &str = "chorus-sandbox: ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_round_trips_through_json() {
        let policy = Policy {
            parent: Some(42),
            cwd: "/ws".into(),
            read_write: vec!["/ws".into()],
            read_only: vec!["/opt/cli".into()],
            network: Network::Proxied {
                allow: vec![crate::EgressRule::parse("github.com:443").expect("rule")],
                forwards: vec![crate::Forward {
                    listen: "127.0.0.1:50051".parse().expect("addr"),
                    connect: "orchestrator:50051".to_owned(),
                }],
            },
            identity: Identity::User {
                uid: 1000,
                gid: 1000,
            },
            limits: Limits::default(),
            cgroups: Some(Cgroups::V1 {
                pids: Some("/sys/fs/cgroup/pids".into()),
                memory: None,
                cpu: None,
            }),
            covers: vec![Cover {
                path: "/ws/.git/config".into(),
                content: "[core]\n".into(),
            }],
            run: Some("0b5e-run_1".to_owned()),
            fence: None,
            ledger: None,
            tier: Tier::Landlock,
            gate_signals: false,
            questions_fd: None,
        };
        let json = serde_json::to_string(&policy).expect("serialize");
        assert_eq!(
            serde_json::from_str::<Policy>(&json).expect("parse"),
            policy
        );
        assert!(
            json.contains(r#""network":{"proxied":{"allow":["github.com:443"],"forwards":[{"listen":"127.0.0.1:50051","connect":"orchestrator:50051"}]}}"#),
            "{json}"
        );
    }

    #[test]
    fn run_ids_are_single_safe_path_components() {
        for good in ["run-1", "0b5e8f2a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "a_b", "R"] {
            assert!(valid_run_id(good), "{good}");
        }
        let long = "x".repeat(MAX_RUN_ID + 1);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "a b",
            "a.b",
            "é",
            "a\0",
            long.as_str(),
        ] {
            assert!(!valid_run_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn cgroups_say_what_they_limit() {
        let v1 = Cgroups::V1 {
            pids: Some("/p".into()),
            memory: None,
            cpu: Some("/c".into()),
        };
        assert!(v1.limits_processes() && !v1.limits_memory());
        assert_eq!(
            v1.parents(),
            vec![&PathBuf::from("/p"), &PathBuf::from("/c")]
        );
        let v2 = Cgroups::V2 {
            parent: "/c".into(),
        };
        assert!(v2.limits_processes() && v2.limits_memory());
    }
}
