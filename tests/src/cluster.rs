//! Several `chorus-orchestrator` replicas on one PostgreSQL schema, as users
//! run them: each its own process with its own `--replica-id` and data
//! directory; one separate `chorus-tool-exec`; a load balancer in front of
//! the replicas that agents and tool-exec reach them through; the runs
//! directory and the secrets key shared, as the operations guide says. CLI
//! agents are the fake CLI.

use std::path::PathBuf;

use chorus_auth::Role;
use chorus_proto::orchestrator::v1 as pb;

use crate::agents::Client;
use crate::balancer::Balancer;
use crate::db::TestDatabase;
use crate::orchestrator::OrchestratorProcess;
use crate::tool_exec_process::ToolExecProcess;

/// The replicas, their tool-exec and balancer, on one database.
pub struct Cluster {
    pub db: TestDatabase,
    pub dir: tempfile::TempDir,
    /// The workspace root (owned by the test user).
    pub root: tempfile::TempDir,
    pub balancer: Balancer,
    pub tool_exec: ToolExecProcess,
    /// Index i is replica `r<i>`; None while it is down.
    pub replicas: Vec<Option<OrchestratorProcess>>,
    lease_secs: u64,
    /// More flags every replica starts with.
    extra: Vec<String>,
}

impl Cluster {
    /// `n` replicas with leases of `lease_secs`, on a new PostgreSQL schema;
    /// None when no PostgreSQL is configured (`CHORUS_TEST_DATABASE_URL`).
    pub async fn start(n: usize, lease_secs: u64) -> Option<Self> {
        Self::start_with(n, lease_secs, &[]).await
    }

    /// [`Self::start`], every replica with the flags `extra` too.
    pub async fn start_with(n: usize, lease_secs: u64, extra: &[&str]) -> Option<Self> {
        let dir = tempfile::tempdir().expect("dir");
        let db = crate::db::databases(dir.path())
            .into_iter()
            .find(|d| d.backend == "postgres")?;
        let root = tempfile::tempdir().expect("root");
        std::fs::create_dir_all(dir.path().join("runs")).expect("runs dir");
        // One secrets key for all: it opens the providers' keys and the
        // shared run-token keys.
        let key: [u8; 32] = rand_bytes();
        let key_file = dir.path().join("secrets.key");
        {
            use base64::Engine as _;
            std::fs::write(
                &key_file,
                base64::engine::general_purpose::STANDARD.encode(key),
            )
            .expect("secrets key");
        }
        let service_key = crate::credentials::make_key(&db.url, "tool-exec", Role::ToolExec).await;
        let service_key_file = dir.path().join("tool-exec.key");
        std::fs::write(&service_key_file, &service_key).expect("key file");
        let balancer = Balancer::start(Vec::new()).await;
        let tool_exec = ToolExecProcess::spawn(balancer.addr, &service_key_file).await;
        let mut cluster = Self {
            db,
            dir,
            root,
            balancer,
            tool_exec,
            replicas: (0..n).map(|_| None).collect(),
            lease_secs,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        for i in 0..n {
            cluster.start_replica(i).await;
        }
        Some(cluster)
    }

    /// The runs directory the replicas share.
    pub fn runs_dir(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    /// `runs/<run>/home/<name>`.
    pub fn run_file(&self, run: &str, name: &str) -> PathBuf {
        self.runs_dir().join(run).join("home").join(name)
    }

    /// Starts (or starts again) replica `r<i>` and puts it behind the balancer.
    pub async fn start_replica(&mut self, i: usize) {
        let url = self.db.url.clone();
        self.start_replica_on(i, &url).await;
    }

    /// Starts replica `r<i>` reaching the database at `url` (a proxy the
    /// test controls, in front of the cluster's database).
    pub async fn start_replica_on(&mut self, i: usize, url: &str) {
        let data = self.dir.path().join(format!("r{i}"));
        let (id, lease, runs, key, tools, advertise) = (
            format!("r{i}"),
            self.lease_secs.to_string(),
            self.runs_dir().display().to_string(),
            self.dir.path().join("secrets.key").display().to_string(),
            self.tool_exec.addr.to_string(),
            self.balancer.addr.to_string(),
        );
        let fake = crate::agents::fake_cli().display().to_string();
        let roots = self.root.path().display().to_string();
        let mut args = vec![
            "--replica-id",
            &id,
            "--lease-secs",
            &lease,
            "--runs-dir",
            &runs,
            "--secrets-key-file",
            &key,
            "--tool-exec-addr",
            &tools,
            "--advertise-addr",
            &advertise,
            "--claude-bin",
            &fake,
            "--workspace-roots",
            &roots,
            "--keep-run-dirs",
        ];
        args.extend(self.extra.iter().map(String::as_str));
        let replica = OrchestratorProcess::spawn(&data, url, &args).await;
        self.replicas[i] = Some(replica);
        self.rebalance();
    }

    /// Takes replica `r<i>` out of the balancer's rotation (still running),
    /// as a load balancer following readiness does once its health is
    /// NOT_SERVING.
    pub fn out_of_rotation(&self, i: usize) {
        self.balancer.set_backends(
            self.replicas
                .iter()
                .enumerate()
                .filter(|(n, _)| *n != i)
                .filter_map(|(_, r)| r.as_ref().map(|r| r.addr))
                .collect(),
        );
    }

    /// Puts replica `r<i>` alone in the balancer's rotation: every new
    /// connection goes to it.
    pub fn only_in_rotation(&self, i: usize) {
        self.balancer.set_backends(vec![self.replica(i).addr]);
    }

    /// The replicas that are up, behind the balancer.
    pub fn rebalance(&self) {
        self.balancer
            .set_backends(self.replicas.iter().flatten().map(|r| r.addr).collect());
    }

    /// Replica `r<i>`, which must be up.
    pub fn replica(&self, i: usize) -> &OrchestratorProcess {
        self.replicas[i].as_ref().expect("the replica is up")
    }

    /// Takes replica `r<i>` out (it is down).
    pub fn take(&mut self, i: usize) -> OrchestratorProcess {
        let replica = self.replicas[i].take().expect("the replica is up");
        self.rebalance();
        replica
    }

    /// A client of replica `r<i>` with an admin key.
    pub async fn client(&self, i: usize) -> Client {
        self.replica(i).client().await
    }

    /// Indexes of the replicas that are up.
    pub fn up(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| self.replicas[*i].is_some())
            .collect()
    }

    /// The workspace, a Claude Code provider (the fake CLI) and agents `a`,
    /// `b` (both may hand off) and `c`.
    pub async fn team(&self, client: &mut Client) -> pb::Workspace {
        let ws = crate::agents::workspace(client, "replicas", self.root.path()).await;
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "claude".into(),
                kind: pb::ProviderKind::ClaudeCode.into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        for (name, tools) in [
            ("a", &["handoff"][..]),
            ("b", &["handoff"]),
            ("c", &["bash"]),
        ] {
            crate::agents::add_agent(client, &ws, name, tools, "claude").await;
        }
        ws
    }
}

fn rand_bytes() -> [u8; 32] {
    use std::io::Read as _;
    let mut out = [0_u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .expect("random bytes");
    out
}

/// The replica the store says drives `run` (empty once it ended).
pub async fn replica_of(client: &mut Client, run: &str) -> String {
    client
        .get_run(pb::GetRunRequest { id: run.to_owned() })
        .await
        .expect("run")
        .into_inner()
        .replica
}

/// Checks a history: sequences 1, 2, 3, ... and each run ended once.
pub fn check_history(events: &[pb::TaskEvent]) {
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(sequences, expected, "no gap, no duplicate");
    let mut ends: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for event in events.iter().filter(|e| crate::agents::ends_run(e)) {
        *ends
            .entry(
                crate::agents::data(event)["run_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
            .or_default() += 1;
    }
    assert!(
        ends.values().all(|n| *n == 1),
        "each run ends once: {ends:?}"
    );
}
