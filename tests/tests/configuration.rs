//! Configuration as an operator gives it, on the real binaries: a TOML file
//! (`--config` or `CHORUS_CONFIG`) under environment variables under flags,
//! `--print-config` showing the effective values with where each came from
//! and secrets hidden, a file with a mistake refused naming the key and the
//! file, and a read-only data directory that works when everything the
//! orchestrator writes is placed elsewhere.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{TEST_UID, give_to_test_user};
use chorus_tests::built_bin;
use chorus_tests::orchestrator::OrchestratorProcess;

fn orchestrator_bin() -> std::path::PathBuf {
    built_bin("chorus-orchestrator", "chorus-orchestrator")
}

fn tool_exec_bin() -> std::path::PathBuf {
    built_bin("chorus-tool-exec", "chorus-tool-exec")
}

/// Runs `bin` in `dir` with only `env` (and PATH) in its environment.
fn run(bin: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn has_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "no line `{line}` in:\n{text}"
    );
}

/// The values of printed settings, without the comments that say where each
/// came from.
fn values(printed: &str) -> Vec<String> {
    printed
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            l.rsplit_once(" # ")
                .map_or(l, |(value, _)| value)
                .to_owned()
        })
        .collect()
}

const SECRETS_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[test]
fn defaults_then_the_file_then_the_environment_then_flags() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("chorus.toml");
    std::fs::write(
        &file,
        r#"
listen = "127.0.0.1:7001"
run-timeout-secs = 900
drain-secs = 3
request-timeout-secs = 20
database-url = "postgres://chorus:from-file@db/chorus"
workspace-roots = ["/srv/projects", "/srv/more"]
"#,
    )
    .expect("config");
    let file = file.display().to_string();
    let output = run(
        &orchestrator_bin(),
        dir.path(),
        &["--drain-secs", "5", "--print-config"],
        &[
            ("CHORUS_CONFIG", &file),
            ("CHORUS_RUN_TIMEOUT_SECS", "1200"),
            ("CHORUS_DATABASE_URL", "postgres://chorus:s3cret@db/chorus"),
            ("CHORUS_SECRETS_KEY", SECRETS_KEY),
        ],
    );
    let printed = stdout(&output);
    has_line(
        &printed,
        &format!(
            "# chorus-orchestrator: effective settings (defaults < {file} < environment < flags)"
        ),
    );
    has_line(&printed, "listen = \"127.0.0.1:7001\" # file");
    has_line(
        &printed,
        "run-timeout-secs = 1200 # CHORUS_RUN_TIMEOUT_SECS",
    );
    has_line(&printed, "drain-secs = 5 # --drain-secs");
    has_line(&printed, "request-timeout-secs = 20 # file");
    has_line(&printed, "handoff-timeout-secs = 600 # default");
    has_line(
        &printed,
        "workspace-roots = [\"/srv/projects\", \"/srv/more\"] # file",
    );
    has_line(
        &printed,
        "database-url = \"postgres://chorus:<hidden>@db/chorus\" # CHORUS_DATABASE_URL",
    );
    has_line(
        &printed,
        "runs-dir = \".chorus/runs\" # default: <data-dir>/runs",
    );
    has_line(&printed, "# the secrets key: CHORUS_SECRETS_KEY (hidden)");
    for secret in ["s3cret", "from-file", SECRETS_KEY] {
        assert!(!printed.contains(secret), "{secret} shown:\n{printed}");
    }
    // Printing starts nothing and writes nothing.
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        1,
        "only the configuration file"
    );
}

#[test]
fn a_file_with_a_mistake_is_refused_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    for (text, expected) in [
        (
            "data_dir = \"/var/lib/chorus\"\n",
            "unknown key `data_dir`; did you mean `data-dir`? (each key is the long name of a flag: see --help)",
        ),
        (
            "drain-secs = \"soon\"\n",
            "`drain-secs`: invalid value 'soon' for '--drain-secs <DRAIN_SECS>': invalid digit found in string",
        ),
        (
            "max-concurrent-requests = 0\n",
            "`max-concurrent-requests`: invalid value '0' for '--max-concurrent-requests <MAX_CONCURRENT_REQUESTS>': 0 is not in 1..=4294967295",
        ),
    ] {
        let file = dir.path().join("chorus.toml");
        std::fs::write(&file, text).expect("config");
        for bin in [orchestrator_bin(), tool_exec_bin()] {
            let output = run(
                &bin,
                dir.path(),
                &["--config", file.to_str().expect("utf-8"), "--print-config"],
                &[],
            );
            assert_eq!(output.status.code(), Some(2), "{text}");
            assert_eq!(
                String::from_utf8_lossy(&output.stderr),
                format!("error: configuration file {}: {expected}\n", file.display()),
                "{}",
                bin.display()
            );
        }
    }
}

#[test]
fn the_printed_settings_are_a_configuration_file_giving_the_same_settings() {
    let dir = tempfile::tempdir().expect("dir");
    for (bin, args) in [
        (
            orchestrator_bin(),
            vec![
                "--listen",
                "127.0.0.1:7002",
                "--max-concurrent-streams",
                "64",
                "--keep-run-dirs",
                "--agent-pass-env",
                "A,B",
                "--sandbox",
                "off",
            ],
        ),
        (
            tool_exec_bin(),
            vec![
                "--standalone",
                "--max-concurrent-requests",
                "8",
                "--keepalive-secs",
                "0",
            ],
        ),
    ] {
        let mut first = args.clone();
        first.push("--print-config");
        let printed = stdout(&run(&bin, dir.path(), &first, &[]));
        let file = dir.path().join("printed.toml");
        std::fs::write(&file, &printed).expect("save");
        let again = stdout(&run(
            &bin,
            dir.path(),
            &["--config", file.to_str().expect("utf-8"), "--print-config"],
            &[],
        ));
        assert_eq!(values(&again), values(&printed), "{}", bin.display());
    }
}

#[test]
fn tool_exec_reads_its_settings_from_the_file_too() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("tool-exec.toml");
    std::fs::write(
        &file,
        "standalone = true\nmax-concurrent-requests = 8\ndrain-secs = 5\ntool-timeout-secs = 30\n",
    )
    .expect("config");
    let printed = stdout(&run(
        &tool_exec_bin(),
        dir.path(),
        &["--config", file.to_str().expect("utf-8"), "--print-config"],
        &[("CHORUS_DRAIN_SECS", "7")],
    ));
    has_line(&printed, "standalone = true # file");
    has_line(&printed, "max-concurrent-requests = 8 # file");
    has_line(&printed, "drain-secs = 7 # CHORUS_DRAIN_SECS");
    has_line(&printed, "tool-timeout-secs = 30 # file");
    has_line(&printed, "# public-key = (unset)");
    has_line(
        &printed,
        "# standalone without public-key: the keys in .chorus/run-token.pub, a development key set made there when missing",
    );
}

/// A directory the test user may enter but not write (this test runs as
/// root: a non-root service cannot write a root-owned 0755 directory).
fn read_only_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("dir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_directory_works_when_everything_written_is_placed_apart() {
    if !chorus_sandbox::testing::running_as_root() {
        eprintln!("not root: the service cannot be run as another user here");
        return;
    }
    let base = tempfile::tempdir().expect("base");
    read_only_dir(base.path());
    let data = base.path().join("data");
    read_only_dir(&data);
    let projects = base.path().join("projects");
    read_only_dir(&projects);
    let root = projects.join("docs");
    read_only_dir(&root);
    // What it writes: one directory of its own, as a volume would be (here
    // beside the workspaces, to show it is never one).
    let state = projects.join("state");
    std::fs::create_dir(&state).expect("state");
    give_to_test_user(&state);
    let secrets_key = state.join("secrets.key");
    std::fs::write(&secrets_key, SECRETS_KEY).expect("secrets key");
    give_to_test_user(&secrets_key);
    let keys = state.join("keys").join("run-token-keys.json");
    let admin_key = state.join("admin.key");
    let runs = state.join("runs");

    let database = state.join("chorus.db").display().to_string();
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let (keys_arg, admin_arg, runs_arg, secrets_arg, projects_arg) = (
        path(&keys),
        path(&admin_key),
        path(&runs),
        path(&secrets_key),
        path(&projects),
    );
    let orchestrator = OrchestratorProcess::spawn_as_user(
        &data,
        &database,
        &[
            "--run-token-keys",
            &keys_arg,
            "--admin-key-file",
            &admin_arg,
            "--runs-dir",
            &runs_arg,
            "--secrets-key-file",
            &secrets_arg,
            "--workspace-roots",
            &projects_arg,
            "--sandbox",
            "off",
        ],
        TEST_UID,
        &admin_key,
    )
    .await;
    let mut client = orchestrator.client().await;
    let ws = client
        .create_workspace(pb::CreateWorkspaceRequest {
            name: "docs".into(),
            root: root.display().to_string(),
        })
        .await
        .expect("workspace")
        .into_inner();
    client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id,
            description: "works without a writable data directory".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task");
    // The key set is rotated where it was placed.
    let rotated = client
        .rotate_run_token_key(pb::RotateRunTokenKeyRequest {})
        .await
        .expect("rotate")
        .into_inner();
    assert_eq!(rotated.keys.len(), 2);
    assert!(keys.exists(), "the key set is where --run-token-keys says");
    // The placed paths are the orchestrator's own: never a workspace.
    let refused = client
        .create_workspace(pb::CreateWorkspaceRequest {
            name: "state".into(),
            root: state.display().to_string(),
        })
        .await
        .expect_err("the state directory is no workspace");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    assert!(orchestrator.stop().await.success());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(state.join("chorus.db"))
            .expect("database")
            .uid(),
        TEST_UID,
        "it ran as the test user, for whom the data directory is read-only"
    );
    assert_eq!(
        std::fs::read_dir(&data).expect("data dir").count(),
        0,
        "nothing was written to the data directory"
    );
}
