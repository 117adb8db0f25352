//! gRPC health as container orchestrators read it: a status for every served
//! name on both ports; the orchestrator NOT_SERVING while its database cannot
//! be reached (and SERVING again when it can), with the embedded tool-exec;
//! a separate tool-exec NOT_SERVING while its orchestrator cannot be reached.

use std::time::Duration;

use chorus_auth::Role;
use chorus_run_token::RunTokenSigner;
use chorus_tests::credentials::make_key;
use chorus_tests::db::DATABASE_URL_VAR;
use chorus_tests::orchestrator::{AGENT_TOOLS_SERVICE, Orchestrator, OrchestratorProcess};
use chorus_tests::tool_exec_process::ToolExecProcess;
use chorus_tests::{TOOL_EXEC_SERVICE, health_status, wait_health};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

const ORCHESTRATOR_NAMES: [&str; 3] = [
    "",
    "chorus.orchestrator.v1.Orchestrator",
    "chorus.orchestrator.v1.AgentTools",
];
const TOOL_EXEC_NAMES: [&str; 2] = ["", "chorus.tools.v1.ToolExec"];

/// Starts an all-in-one orchestrator on `url` that checks its database every
/// 100 ms.
async fn orchestrator(url: &str) -> Orchestrator {
    Orchestrator::start_configured(url, RunTokenSigner::generate(), true, |config| {
        config.serve.health_check = Duration::from_millis(100);
    })
    .await
}

/// Waits until every name of both ports reports `status`.
async fn wait_all(orchestrator: &Orchestrator, status: ServingStatus) {
    for name in ORCHESTRATOR_NAMES {
        wait_health(orchestrator.addr, name, status).await;
    }
    for name in TOOL_EXEC_NAMES {
        wait_health(orchestrator.tool_exec_addr, name, status).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_name_has_a_status_on_both_ports() {
    let dir = tempfile::tempdir().expect("dir");
    let orchestrator = orchestrator(&dir.path().join("chorus.db").display().to_string()).await;
    for name in ORCHESTRATOR_NAMES {
        assert_eq!(
            health_status(orchestrator.addr, name).await.expect(name),
            ServingStatus::Serving,
            "{name:?}"
        );
    }
    for name in TOOL_EXEC_NAMES {
        assert_eq!(
            health_status(orchestrator.tool_exec_addr, name)
                .await
                .expect(name),
            ServingStatus::Serving,
            "{name:?}"
        );
    }
    // A name the port does not serve is unknown to it.
    let unknown = health_status(orchestrator.addr, TOOL_EXEC_SERVICE)
        .await
        .expect_err("not served here");
    assert_eq!(unknown.code(), Code::NotFound);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_is_not_serving_while_its_sqlite_file_is_gone() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("chorus.db");
    let orchestrator = orchestrator(&file.display().to_string()).await;
    let moved = dir.path().join("chorus.db.moved");

    std::fs::rename(&file, &moved).expect("move the database away");
    wait_all(&orchestrator, ServingStatus::NotServing).await;
    std::fs::rename(&moved, &file).expect("put it back");
    wait_all(&orchestrator, ServingStatus::Serving).await;
    orchestrator.stop().await;
}

/// A PostgreSQL database of its own (not a schema: connections to it can be
/// refused), dropped at the end.
struct OwnDatabase {
    admin: String,
    name: String,
    url: String,
}

impl OwnDatabase {
    fn create(base: &str) -> Self {
        let name = format!("chorus_health_{}", std::process::id());
        let (server, query) = match base.split_once('?') {
            Some((server, query)) => (server, format!("?{query}")),
            None => (base, String::new()),
        };
        let server = server.rsplit_once('/').map_or(server, |(server, _)| server);
        let mut admin = PgConnection::establish(base).expect("connect");
        // One statement each: neither runs inside a transaction.
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .expect("drop a leftover");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the database");
        Self {
            admin: base.to_owned(),
            url: format!("{server}/{name}{query}"),
            name,
        }
    }

    fn allow_connections(&self, allow: bool) {
        let mut admin = PgConnection::establish(&self.admin).expect("connect");
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS {allow}",
                self.name
            ))
            .expect("alter");
        if !allow {
            admin
                .batch_execute(&format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
                    self.name
                ))
                .expect("end its connections");
        }
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = PgConnection::establish(&self.admin) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_is_not_serving_while_postgresql_refuses_it() {
    let Some(base) = chorus_tests::db::postgres_url() else {
        eprintln!("{DATABASE_URL_VAR} is not set: PostgreSQL is not tested");
        return;
    };
    let database = tokio::task::spawn_blocking(move || OwnDatabase::create(&base))
        .await
        .expect("database");
    let orchestrator = orchestrator(&database.url).await;

    let database = tokio::task::spawn_blocking(move || {
        database.allow_connections(false);
        database
    })
    .await
    .expect("refuse");
    wait_all(&orchestrator, ServingStatus::NotServing).await;
    let database = tokio::task::spawn_blocking(move || {
        database.allow_connections(true);
        database
    })
    .await
    .expect("allow");
    wait_all(&orchestrator, ServingStatus::Serving).await;
    orchestrator.stop().await;
    tokio::task::spawn_blocking(move || drop(database))
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_tool_exec_is_not_serving_while_its_orchestrator_is_away() {
    let data = tempfile::tempdir().expect("data");
    let database = data.path().join("chorus.db").display().to_string();
    let key = make_key(&database, "tool-exec", Role::ToolExec).await;
    let key_file = data.path().join("tool-exec.key");
    std::fs::write(&key_file, key).expect("key file");
    let orchestrator = OrchestratorProcess::spawn(data.path(), &database, &[]).await;
    let listen = orchestrator.addr.to_string();
    let tool_exec =
        ToolExecProcess::spawn_with(orchestrator.addr, &key_file, &["--health-check-secs", "1"])
            .await;
    for name in TOOL_EXEC_NAMES {
        wait_health(tool_exec.addr, name, ServingStatus::Serving).await;
    }

    orchestrator.kill().await;
    for name in TOOL_EXEC_NAMES {
        wait_health(tool_exec.addr, name, ServingStatus::NotServing).await;
    }
    // Back on the same address: tool-exec serves again.
    let orchestrator =
        OrchestratorProcess::spawn(data.path(), &database, &["--listen", &listen]).await;
    wait_health(
        orchestrator.addr,
        AGENT_TOOLS_SERVICE,
        ServingStatus::Serving,
    )
    .await;
    for name in TOOL_EXEC_NAMES {
        wait_health(tool_exec.addr, name, ServingStatus::Serving).await;
    }
    assert!(tool_exec.stop().await.success());
    assert!(orchestrator.stop().await.success());
}
