//! Provider API keys at rest, as an attacker who reads the database and an
//! operator who runs agents see them: the SQLite files never hold a key in
//! clear text, yet a run receives it; a key an earlier version stored in clear
//! is encrypted on the next start and still works; `env:` and `file:`
//! references are resolved when a run starts, and one that does not resolve
//! refuses StartTask and changes nothing; a start with another secrets key
//! refuses the run with a clear error.

use std::path::Path;
use std::time::Duration;

use chorus_orchestrator::secrets::KeySource;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, ends_run, history, planned_task, start, task_of, team, wait_for,
};
use chorus_tests::db::databases;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::{Orchestrator, OrchestratorProcess};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use serde_json::json;

/// Version of the migration that marks keys stored in clear (`2026-11-23-100000_secrets`).
const SECRETS_MIGRATION: &str = "20261123100000";

/// A model that answers each run with a completion report.
async fn model(runs: usize) -> FakeOpenAi {
    let report = Step::tool_call(
        "completion-report",
        json!({"status": "complete", "summary": "Done.", "output": "ok"}),
    );
    FakeOpenAi::start(vec![report; runs]).await
}

/// An in-process orchestrator on `database_url` whose secrets key is `key`.
async fn start_orchestrator(database_url: &str, data_dir: &Path, key: KeySource) -> Orchestrator {
    let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key pair");
    Orchestrator::start_configured(database_url, signer, true, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
        config.secrets_key = key;
    })
    .await
}

/// The secrets key file of `data_dir`, made when missing.
fn key_file(data_dir: &Path) -> KeySource {
    KeySource::default_file(data_dir)
}

/// Starts the team's agent on a new task, waits for the run's end and returns
/// the Authorization header of the model's last request.
async fn run_once(
    client: &mut Client,
    team: &chorus_tests::agents::Team,
    model: &FakeOpenAi,
) -> Option<String> {
    let task = planned_task(client, &team.workspace, "Report.").await;
    start(client, &task, &team.agent, 0).await;
    let events = wait_for(client, &task.id, ends_run).await;
    assert_eq!(
        events.last().map(|e| e.kind.as_str()),
        Some("agent_completed")
    );
    model.authorization().last().cloned().flatten()
}

fn update_key(workspace: &pb::Workspace, api_key: &str) -> pb::UpdateProviderRequest {
    pb::UpdateProviderRequest {
        workspace_id: workspace.id.clone(),
        name: "model".into(),
        api_key: Some(api_key.into()),
        ..Default::default()
    }
}

async fn provider(client: &mut Client, workspace: &pb::Workspace) -> pb::Provider {
    client
        .get_provider(pb::GetProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "model".into(),
        })
        .await
        .expect("provider")
        .into_inner()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The SQLite database and its companions, as bytes: what a reader of the
/// data directory gets.
fn database_bytes(database: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let mut file = database.as_os_str().to_owned();
        file.push(suffix);
        all.extend(std::fs::read(&file).unwrap_or_default());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_files_never_hold_a_key_in_clear_and_a_run_still_receives_it() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let database = data.path().join("chorus.db");
    let url = database.display().to_string();
    let model = model(1).await;
    let orchestrator = start_orchestrator(&url, data.path(), key_file(data.path())).await;
    let mut client = orchestrator.client().await;
    let created_key = "sk-created-4d1f9a7e2b";
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        created_key,
        "model-in-the-database",
        &[],
        "You report.",
    )
    .await;
    let bytes = database_bytes(&database);
    assert!(
        contains(&bytes, "model-in-the-database"),
        "the provider's row is in these files"
    );
    assert!(
        !contains(&bytes, created_key),
        "CreateProvider left the key in clear"
    );

    let updated_key = "sk-updated-93c0e51b6a";
    let updated = client
        .update_provider(update_key(&team.workspace, updated_key))
        .await
        .expect("update")
        .into_inner();
    assert_eq!(
        (updated.api_key_set, updated.api_key_source.as_str()),
        (true, "stored")
    );
    let bytes = database_bytes(&database);
    for key in [created_key, updated_key] {
        assert!(!contains(&bytes, key), "{key} is in the database files");
    }

    let sent = run_once(&mut client, &team, &model).await;
    assert_eq!(
        sent.as_deref(),
        Some(format!("Bearer {updated_key}").as_str())
    );
    let bytes = database_bytes(&database);
    assert!(
        !contains(&bytes, updated_key),
        "a run left the key in clear"
    );
    drop(client);
    orchestrator.stop().await;

    // Another secrets key: the stored key does not decrypt, so the run is
    // refused before anything is written, with what to do.
    let other = KeySource::Value {
        base64: "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=".into(),
        var: "CHORUS_SECRETS_KEY",
    };
    let orchestrator = start_orchestrator(&url, data.path(), other).await;
    let mut client = orchestrator.client().await;
    let task = planned_task(&mut client, &team.workspace, "Report.").await;
    let err = client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            agent: team.agent.clone(),
            ..Default::default()
        })
        .await
        .expect_err("another key");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .starts_with("the API key of provider 'model' cannot be decrypted")
            && err.message().contains("CHORUS_SECRETS_KEY"),
        "{}",
        err.message()
    );
    assert_eq!(task_of(&mut client, &task.id).await.status, "planned");
    drop(client);
    orchestrator.stop().await;
}

#[derive(QueryableByName)]
struct StoredKey {
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    api_key: Option<String>,
}

/// Runs `sql` on the database at `url` as another program would.
fn execute(url: &str, sql: &str) {
    if url.starts_with("postgres") {
        PgConnection::establish(url)
            .expect("connect")
            .batch_execute(sql)
            .expect(sql);
    } else {
        let mut conn = SqliteConnection::establish(url).expect("open");
        // A program sharing the file waits for the other's lock, as the
        // orchestrator does.
        conn.batch_execute("PRAGMA busy_timeout = 5000;")
            .expect("busy timeout");
        conn.batch_execute(sql).expect(sql);
    }
}

/// The `api_key` column of the one provider.
fn stored_key(url: &str) -> Option<String> {
    let query = diesel::sql_query("SELECT api_key FROM providers");
    let rows: Vec<StoredKey> = if url.starts_with("postgres") {
        query.load(&mut PgConnection::establish(url).expect("connect"))
    } else {
        query.load(&mut SqliteConnection::establish(url).expect("open"))
    }
    .expect("select");
    assert_eq!(rows.len(), 1);
    rows.into_iter().next().and_then(|r| r.api_key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_an_earlier_version_stored_in_clear_is_encrypted_on_start_and_still_works() {
    let dir = tempfile::tempdir().expect("dir");
    for db in databases(dir.path()) {
        let b = db.backend;
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        let model = model(1).await;
        let orchestrator = start_orchestrator(&db.url, data.path(), key_file(data.path())).await;
        let mut client = orchestrator.client().await;
        let team = team(
            &mut client,
            root.path(),
            pb::ProviderKind::OpenaiCompatible,
            &model.base_url(),
            "",
            "fake-model",
            &[],
            "You report.",
        )
        .await;
        drop(client);
        orchestrator.stop().await;

        // As the previous version wrote it: in clear, before the secrets migration.
        let legacy = "sk-legacy-in-clear-5e8c21";
        execute(
            &db.url,
            &format!(
                "UPDATE providers SET api_key = '{legacy}';
                 DELETE FROM __diesel_schema_migrations WHERE version = '{SECRETS_MIGRATION}';"
            ),
        );
        assert_eq!(stored_key(&db.url).as_deref(), Some(legacy), "{b}");

        let orchestrator = start_orchestrator(&db.url, data.path(), key_file(data.path())).await;
        let stored = stored_key(&db.url).expect(b);
        assert!(
            stored.starts_with("enc:v1:") && !stored.contains(legacy),
            "{b}: {stored}"
        );
        if b == "sqlite" {
            let bytes = database_bytes(Path::new(&db.url));
            assert!(
                !contains(&bytes, legacy),
                "the SQLite files keep the old key"
            );
        }
        let mut client = orchestrator.client().await;
        assert_eq!(
            provider(&mut client, &team.workspace).await.api_key_source,
            "stored",
            "{b}"
        );
        let sent = run_once(&mut client, &team, &model).await;
        assert_eq!(
            sent.as_deref(),
            Some(format!("Bearer {legacy}").as_str()),
            "{b}"
        );
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_references_resolve_at_run_start_and_one_that_does_not_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    for db in databases(dir.path()) {
        let b = db.backend;
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        let secrets = tempfile::tempdir().expect("secrets");
        let key_path = secrets.path().join("model.key");
        std::fs::write(&key_path, "sk-from-a-file\n").expect("key file");
        let model = model(2).await;
        let key_dir = secrets.path().display().to_string();
        let orchestrator = OrchestratorProcess::spawn_with_env(
            data.path(),
            &db.url,
            &["--provider-key-dir", &key_dir],
            &[
                ("PROVIDER_KEY_FAKE_MODEL", "sk-from-the-environment"),
                // Not a provider key variable: never sent anywhere.
                ("FAKE_DATABASE_PASSWORD", "hunter2"),
            ],
        )
        .await;
        let mut client = orchestrator.client().await;
        let team = team(
            &mut client,
            root.path(),
            pb::ProviderKind::OpenaiCompatible,
            &model.base_url(),
            "env:PROVIDER_KEY_FAKE_MODEL",
            "fake-model",
            &[],
            "You report.",
        )
        .await;
        let shown = provider(&mut client, &team.workspace).await;
        assert_eq!(
            (shown.api_key_set, shown.api_key_source.as_str()),
            (true, "env:PROVIDER_KEY_FAKE_MODEL"),
            "{b}"
        );
        let sent = run_once(&mut client, &team, &model).await;
        assert_eq!(
            sent.as_deref(),
            Some("Bearer sk-from-the-environment"),
            "{b}"
        );

        let file_ref = format!("file:{}", key_path.display());
        let shown = client
            .update_provider(update_key(&team.workspace, &file_ref))
            .await
            .expect("file reference")
            .into_inner();
        assert_eq!(shown.api_key_source, file_ref, "{b}");
        let sent = run_once(&mut client, &team, &model).await;
        assert_eq!(sent.as_deref(), Some("Bearer sk-from-a-file"), "{b}");

        let missing_file = secrets.path().join("gone.key");
        for (reference, names) in [
            (
                "env:PROVIDER_KEY_NO_SUCH_VARIABLE".to_owned(),
                "PROVIDER_KEY_NO_SUCH_VARIABLE".to_owned(),
            ),
            (
                format!("file:{}", missing_file.display()),
                missing_file.display().to_string(),
            ),
        ] {
            client
                .update_provider(update_key(&team.workspace, &reference))
                .await
                .expect("a reference is stored as written");
            let task = planned_task(&mut client, &team.workspace, "Report.").await;
            let before = history(&mut client, &task.id).await.len();
            let requests = model.requests().len();
            let err = client
                .start_task(pb::StartTaskRequest {
                    task_id: task.id.clone(),
                    agent: team.agent.clone(),
                    ..Default::default()
                })
                .await
                .expect_err("unresolved reference");
            assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{b}: {err:?}");
            assert!(
                err.message().starts_with("provider 'model': ") && err.message().contains(&names),
                "{b}: {}",
                err.message()
            );
            assert_eq!(
                task_of(&mut client, &task.id).await.status,
                "planned",
                "{b}"
            );
            assert_eq!(history(&mut client, &task.id).await.len(), before, "{b}");
            let runs = client
                .list_runs(pb::ListRunsRequest {
                    task_id: task.id.clone(),
                })
                .await
                .expect("runs")
                .into_inner()
                .runs;
            assert!(runs.is_empty(), "{b}: {runs:?}");
            assert_eq!(model.requests().len(), requests, "{b}: nothing was sent");
        }
        // An admin cannot have the orchestrator send any other secret it can
        // read to the model URL of their choosing.
        let before = provider(&mut client, &team.workspace).await;
        for (reference, says) in [
            ("env:FAKE_DATABASE_PASSWORD", "--provider-key-env-prefix"),
            ("file:/etc/machine-id", "--provider-key-dir"),
            (
                &format!("file:{}", data.path().join("admin.key").display()),
                "own data",
            ),
        ] {
            let err = client
                .update_provider(update_key(&team.workspace, reference))
                .await
                .expect_err("a reference outside the rules");
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
            assert!(
                err.message().contains(says),
                "{b}: {reference}: {}",
                err.message()
            );
        }
        assert_eq!(provider(&mut client, &team.workspace).await, before, "{b}");
        drop(client);
        assert!(orchestrator.stop().await.success(), "{b}");
    }
}
