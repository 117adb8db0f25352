//! The all-in-one binary as a new user starts it: one command, no set-up. It
//! makes its data directory owner-only, writes a first admin key there (0600)
//! and says where; the database, its WAL and the secrets key are 0600 too, and
//! a restart tightens what was left open; every call but health and reflection
//! needs a credential; the recipe
//! `-H "authorization: Bearer $(cat .chorus/admin.key)"` works; workspace roots
//! are refused at `/`, around the data directory and outside
//! `--workspace-roots`; a restart keeps the key.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use chorus_tests::orchestrator::OrchestratorProcess;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777
}

/// grpcurl as the operations guide shows it, through a shell.
async fn grpcurl(script: &str) -> std::process::Output {
    tokio::process::Command::new("sh")
        .args(["-c", script])
        .env(
            "GRPCURL",
            std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
        )
        .output()
        .await
        .expect("sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_makes_an_admin_key_and_everything_needs_a_credential() {
    let base = tempfile::tempdir().expect("base");
    let data = base.path().join(".chorus");
    let projects = base.path().join("projects");
    let project = projects.join("app");
    std::fs::create_dir_all(&project).expect("project");
    let database = data.join("chorus.db").display().to_string();
    let allowed = projects.display().to_string();
    let extra = ["--workspace-roots", allowed.as_str()];
    let orchestrator = OrchestratorProcess::spawn_as_installed(&data, &database, &extra).await;

    assert_eq!(mode(&data), 0o700, "the data directory is owner-only");
    // Every file that holds a secret: keys, the database and its WAL.
    let owner_only = [
        "admin.key",
        chorus_run_token::KEY_SET_FILE,
        "secrets.key",
        "chorus.db",
        "chorus.db-wal",
        "chorus.db-shm",
    ];
    for file in owner_only {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    let key = std::fs::read_to_string(data.join("admin.key")).expect("key");
    assert!(key.starts_with("chorus_"), "{key}");

    let addr = orchestrator.addr.to_string();
    let key_file = data.join("admin.key").display().to_string();
    let list = format!("\"$GRPCURL\" -plaintext {addr} list");
    let out = grpcurl(&list).await;
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        listed.contains("chorus.orchestrator.v1.Orchestrator"),
        "{listed}"
    );
    // Each port lists only what it serves.
    assert!(!listed.contains("chorus.tools.v1.ToolExec"), "{listed}");
    let tool_exec_list = format!(
        "\"$GRPCURL\" -plaintext {} list",
        orchestrator.tool_exec_addr
    );
    let listed = String::from_utf8_lossy(&grpcurl(&tool_exec_list).await.stdout).into_owned();
    assert!(listed.contains("chorus.tools.v1.ToolExec"), "{listed}");
    assert!(!listed.contains("chorus.orchestrator.v1"), "{listed}");

    let bare = format!(
        "\"$GRPCURL\" -plaintext -d '{{}}' {addr} chorus.orchestrator.v1.Orchestrator/ListWorkspaces"
    );
    let out = grpcurl(&bare).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Unauthenticated") && stderr.contains(&key_file),
        "the refusal says where the key is: {stderr}"
    );
    let with_key = format!(
        "\"$GRPCURL\" -plaintext -H \"authorization: Bearer $(cat {key_file})\" -d '{{}}' {addr} chorus.orchestrator.v1.Orchestrator/ListWorkspaces"
    );
    let out = grpcurl(&with_key).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut client = orchestrator.client().await;
    let create = |root: &Path| chorus_proto::orchestrator::v1::CreateWorkspaceRequest {
        name: "app".into(),
        root: root.display().to_string(),
    };
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    for (root, says) in [
        (Path::new("/"), "file system's root"),
        (base.path(), "Chorus's own data"),
        (data.as_path(), "Chorus's own data"),
        (elsewhere.path(), "outside the directories"),
    ] {
        let err = client
            .create_workspace(create(root))
            .await
            .expect_err("refused root");
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{root:?}: {err:?}"
        );
        assert!(err.message().contains(says), "{root:?}: {err:?}");
    }
    client
        .create_workspace(create(&project))
        .await
        .expect("a project root");
    drop(client);
    assert!(orchestrator.stop().await.success());

    // Left open by an earlier version or an operator: tightened at the next start.
    let open = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    open(&data, 0o755);
    open(&data.join("chorus.db"), 0o644);
    open(&data.join("secrets.key"), 0o644);

    // A restart finds the key it made and makes no other.
    let again = OrchestratorProcess::spawn_as_installed(&data, &database, &extra).await;
    assert_eq!(mode(&data), 0o700, "the data directory is tightened");
    for file in owner_only {
        assert_eq!(mode(&data.join(file)), 0o600, "{file} is tightened");
    }
    assert_eq!(
        std::fs::read_to_string(data.join("admin.key")).expect("key"),
        key
    );
    let out = grpcurl(&with_key.replace(&addr, &again.addr.to_string())).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(again.stop().await.success());
}

/// Started as a user that may not use its data directory (a volume made by
/// the image's uid 10001, mode 0700, run with `--user 65534`), the binary
/// exits naming the directory's owner and mode, its own uid and the fixes —
/// not a bare "Permission denied".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_another_user_is_refused_naming_owner_mode_and_fix() {
    if !chorus_sandbox::testing::root_for("starting the service as another user") {
        return;
    }
    let base = tempfile::tempdir().expect("base");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = base.path().join("data");
    std::fs::create_dir(&data).expect("data");
    std::fs::write(data.join("run-token-keys.json"), "{}").expect("a key file");
    std::os::unix::fs::chown(&data, Some(10001), Some(10001)).expect("chown");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let output = tokio::process::Command::new(chorus_tests::built_bin(
        "chorus-orchestrator",
        "chorus-orchestrator",
    ))
    .arg("--data-dir")
    .arg(&data)
    .args(["--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0"])
    .args(["--tool-exec-listen", "127.0.0.1:0"])
    .uid(65534)
    .gid(65534)
    .current_dir(base.path())
    .output()
    .await
    .expect("start chorus-orchestrator");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it started: {said}");
    for part in [
        &format!("{} belongs to uid 10001 (mode 0700)", data.display()),
        "runs as uid 65534",
        "--user 10001",
        "chown -R 65534",
        "fsGroup",
    ] {
        assert!(said.contains(part), "'{part}' not in: {said}");
    }
}

/// A first start with its PostgreSQL unreachable does not exit (which a
/// Kubernetes Deployment would answer with restarts): the port answers at
/// once — health NOT_SERVING, any other call UNAVAILABLE saying it waits for
/// its database — and once the database answers the orchestrator starts on
/// the same port. `--database-wait-secs` bounds the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_waits_for_an_unreachable_database_serving_not_serving() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Some(url) = chorus_tests::db::postgres_url() else {
        eprintln!("CHORUS_TEST_DATABASE_URL is not set: this test needs PostgreSQL; skipped");
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let db = chorus_tests::db::databases(dir.path())
        .into_iter()
        .find(|d| d.backend == "postgres")
        .expect("a PostgreSQL schema");
    let target: std::net::SocketAddr = "127.0.0.1:5432".parse().expect("address");
    assert!(
        url.contains("127.0.0.1:5432"),
        "the tests' PostgreSQL: {url}"
    );
    let proxy = chorus_tests::db_proxy::DbProxy::start(target).await;
    proxy.reset();
    let start = |wait: &str| {
        tokio::process::Command::new(chorus_tests::built_bin(
            "chorus-orchestrator",
            "chorus-orchestrator",
        ))
        .arg("--data-dir")
        .arg(dir.path().join(format!("data-{wait}")))
        .args(["--database-url", &proxy.url(&db.url, target)])
        .args(["--database-wait-secs", wait, "--log-format", "json"])
        .args(["--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0"])
        .args(["--tool-exec-listen", "127.0.0.1:0"])
        .arg("--workspace-roots")
        .arg(std::env::temp_dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chorus-orchestrator")
    };
    // The wait is bounded: with 0, it exits at once, naming the database.
    let refused = start("0").wait_with_output().await.expect("it ends");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("cannot connect to PostgreSQL at"), "{said}");

    let mut child = start("120");
    let mut log = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut until = async |message: &str| -> serde_json::Value {
        while let Some(line) = log.next_line().await.expect("its log") {
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if entry["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
            {
                return entry["fields"].clone();
            }
        }
        panic!("it ended before logging '{message}'");
    };
    let waiting = until("the database does not answer").await;
    let addr: std::net::SocketAddr = waiting["addr"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .expect("the port's address");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("the port answers while the database does not");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "chorus.orchestrator.v1.Orchestrator"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health answers")
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::NotServing as i32,
            "'{service}'"
        );
    }
    let mut api =
        chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient::new(channel);
    let err = api
        .list_workspaces(chorus_proto::orchestrator::v1::ListWorkspacesRequest::default())
        .await
        .expect_err("no database yet");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("waits for its database")
            && err.message().contains("--database-wait-secs"),
        "{err:?}"
    );

    // A connection that says nothing (a stuck prober, or someone holding
    // the port) does not keep the services from starting.
    let _silent = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a silent connection");

    // The database answers: the orchestrator starts, on the same port.
    proxy.open();
    let serving = until("orchestrator serving").await;
    assert_eq!(serving["addr"].as_str(), Some(addr.to_string().as_str()));
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    chorus_tests::wait_serving(addr, "chorus.orchestrator.v1.Orchestrator").await;
    let key = std::fs::read_to_string(dir.path().join("data-120").join("admin.key"))
        .expect("its first admin key");
    let mut client = chorus_tests::orchestrator::client_at(addr, key.trim()).await;
    client
        .list_workspaces(chorus_proto::orchestrator::v1::ListWorkspacesRequest::default())
        .await
        .expect("served");
    let _ = child.start_kill();
    let _ = child.wait().await;
}
