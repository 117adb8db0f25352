//! What an agent run is carried out with, below the runner that drives runs
//! and the providers that know each kind of agent: the runner's settings
//! (`config`), a run's time limit (`clock`), a CLI process in the run
//! sandbox (`process`), where its network may lead (`cli_network`), the
//! replica's fence its processes die with (`fence`), and the path of an API
//! agent's tool calls through the services (`tools`). [`Facilities`] holds
//! what the runs of a process share. Nothing here knows a run's driver or a
//! provider: `providers` and `runner` both build on it.

pub mod cli_network;
mod clock;
mod config;
pub mod fence;
pub mod process;
pub mod tools;

use chorus_sandbox::Sandbox;
use tracing::warn;

pub use clock::RunClock;
pub use config::{
    ApiLimits, DEFAULT_PASS_ENV, HOME_DIR, RunnerConfig, TMP_DIR, WORK_DIR, home_dir, installation,
    tmp_dir, work_dir,
};

/// What every run of this process is carried out with: the settings, the
/// sandbox CLI agents run in, the replica's fence, the HTTP client of model
/// calls.
#[derive(Debug)]
pub struct Facilities {
    config: RunnerConfig,
    processes: Sandbox,
    fence: Option<fence::ReplicaFence>,
    http: reqwest::Client,
}

impl Facilities {
    /// With the fence `config` names made (without one when it cannot be:
    /// logged, CLI agents then run unfenced).
    pub fn new(config: RunnerConfig, processes: Sandbox) -> Self {
        let fence = config.fence_dir.as_deref().and_then(|dir| {
            fence::ReplicaFence::create(dir)
                .map_err(|e| warn!(dir = %dir.display(), error = %e, "cannot make the fence directory: CLI agents run without a fence"))
                .ok()
        });
        Self {
            config,
            processes,
            fence,
            http: reqwest::Client::new(),
        }
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// The replica's fence, when it has one.
    pub fn fence(&self) -> Option<&fence::ReplicaFence> {
        self.fence.as_ref()
    }

    /// The sandbox CLI agents run in.
    pub fn processes(&self) -> &Sandbox {
        &self.processes
    }

    /// The HTTP client of API agents' model calls.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}
