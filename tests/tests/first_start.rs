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
