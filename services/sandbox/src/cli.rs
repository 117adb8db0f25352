//! The sandbox flags every service takes (`--sandbox`, `--sandbox-user`, ...),
//! each with its `CHORUS_SANDBOX_*` environment variable.

use std::path::PathBuf;

use crate::policy::{Limits, Tier};
use crate::service::{Mode, SandboxConfig};

/// How processes agents cause are confined.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// `on`: every bash, git and CLI agent process runs in the run sandbox, and
    /// is refused when the host lacks a mechanism it needs; `off`: they run
    /// unconfined as the service's user (never use this with untrusted agents).
    #[arg(long = "sandbox", env = "CHORUS_SANDBOX", default_value = "on", value_parser = parse_mode)]
    pub mode: Mode,
    /// The sandbox launcher (default: chorus-sandbox next to this program, else on PATH).
    #[arg(long = "sandbox-launcher", env = "CHORUS_SANDBOX_LAUNCHER")]
    pub launcher: Option<PathBuf>,
    /// When the service runs as root: the user agents act as in a workspace
    /// whose root is owned by root (`UID:GID`; never 0). Otherwise they act as
    /// the owner of the workspace root.
    #[arg(long = "sandbox-user", env = "CHORUS_SANDBOX_USER", value_parser = parse_user)]
    pub user: Option<(u32, u32)>,
    /// A delegated cgroup v2 directory for per-run cgroups (default: detected).
    #[arg(long = "sandbox-cgroup", env = "CHORUS_SANDBOX_CGROUP")]
    pub cgroup: Option<PathBuf>,
    /// Most processes (and threads) one run may have: its CLI and every tool
    /// call together, where a cgroup per run can be made.
    #[arg(long = "sandbox-max-processes", env = "CHORUS_SANDBOX_MAX_PROCESSES", default_value_t = Limits::default().processes)]
    pub max_processes: u64,
    /// Most memory (MiB) one run may use: its CLI and every tool call
    /// together, where a cgroup per run can be made.
    #[arg(long = "sandbox-max-memory-mib", env = "CHORUS_SANDBOX_MAX_MEMORY_MIB", default_value_t = Limits::default().memory_bytes >> 20)]
    pub max_memory_mib: u64,
    /// Most CPU seconds each sandboxed process may use.
    #[arg(long = "sandbox-max-cpu-secs", env = "CHORUS_SANDBOX_MAX_CPU_SECS", default_value_t = Limits::default().cpu_secs)]
    pub max_cpu_secs: u64,
    /// Most MiB the processes of one run (its CLI agent and every bash and
    /// git call, one after the other or at once) may write to files
    /// together; past it they are killed. Also the longest file one may make.
    #[arg(long = "sandbox-max-written-mib", env = "CHORUS_SANDBOX_MAX_WRITTEN_MIB", default_value_t = Limits::default().written_bytes >> 20)]
    pub max_written_mib: u64,
    /// MiB every sandbox leaves free on the file systems it may write to:
    /// below it, its processes are killed (0: no floor).
    #[arg(long = "sandbox-min-free-mib", env = "CHORUS_SANDBOX_MIN_FREE_MIB", default_value_t = Limits::default().min_free_bytes >> 20)]
    pub min_free_mib: u64,
    /// How the sandbox is built: `auto` (the namespace tier where it can
    /// start, else the landlock tier), `namespaces` or `landlock` (that tier
    /// or none). docs/sandbox-tiers.md compares them.
    #[arg(long = "sandbox-tier", env = "CHORUS_SANDBOX_TIER", default_value = "auto", value_parser = parse_tier)]
    pub tier: TierChoice,
}

/// `--sandbox-tier`: one tier, or the strongest that starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierChoice(pub Option<Tier>);

impl SandboxArgs {
    pub fn config(&self) -> SandboxConfig {
        SandboxConfig {
            mode: self.mode,
            launcher: self.launcher.clone(),
            user: self.user,
            limits: Limits {
                processes: self.max_processes.max(1),
                memory_bytes: self.max_memory_mib.max(1) << 20,
                cpu_secs: self.max_cpu_secs.max(1),
                written_bytes: self.max_written_mib.max(1) << 20,
                min_free_bytes: self.min_free_mib << 20,
                ..Limits::default()
            },
            cgroup_parent: self.cgroup.clone(),
            tier: self.tier.0,
        }
    }
}

fn parse_mode(value: &str) -> Result<Mode, String> {
    value.parse()
}

fn parse_tier(value: &str) -> Result<TierChoice, String> {
    match value {
        "auto" => Ok(TierChoice(None)),
        "namespaces" => Ok(TierChoice(Some(Tier::Namespaces))),
        "landlock" => Ok(TierChoice(Some(Tier::Landlock))),
        other => Err(format!(
            "sandbox tier '{other}' is none of auto, namespaces and landlock"
        )),
    }
}

fn parse_user(value: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = value
        .split_once(':')
        .ok_or_else(|| format!("'{value}' is not UID:GID"))?;
    let number = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("'{s}' in '{value}' is not a number"))
    };
    let (uid, gid) = (number(uid)?, number(gid)?);
    if uid == 0 || gid == 0 {
        return Err("agents never act as root: pick a UID and GID other than 0".to_owned());
    }
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tier_is_auto_or_one_of_the_two() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            sandbox: SandboxArgs,
        }
        let tier = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
                .map(|c| c.sandbox.config().tier)
        };
        // The default, unless the environment of this test names a tier.
        if std::env::var_os("CHORUS_SANDBOX_TIER").is_none() {
            assert_eq!(tier(&[]).expect("default"), None);
        }
        assert_eq!(
            tier(&["--sandbox-tier", "landlock"]).expect("landlock"),
            Some(Tier::Landlock)
        );
        assert_eq!(
            tier(&["--sandbox-tier", "namespaces"]).expect("namespaces"),
            Some(Tier::Namespaces)
        );
        assert!(tier(&["--sandbox-tier", "chroot"]).is_err());
    }

    #[test]
    fn the_user_is_two_numbers_and_never_root() {
        assert_eq!(parse_user("1000:1001"), Ok((1000, 1001)));
        for bad in ["1000", "a:1", "0:1000", "1000:0", ""] {
            assert!(parse_user(bad).is_err(), "{bad}");
        }
    }
}
