//! Store tests. Every test runs its body once per backend: SQLite (a temp file)
//! always, PostgreSQL too when `CHORUS_TEST_DATABASE_URL` is set, each time in a
//! fresh schema that is dropped afterwards.

mod agents;
mod call_record;
mod provider_keys;
mod providers;
mod round_trips;
mod runs;
mod tasks;
mod workspaces;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use tempfile::TempDir;

use super::Store;
use crate::domain::{Name, TaskSource, Workspace};
use crate::secrets::SecretBox;

/// The variable that names a PostgreSQL database for tests (CI sets it).
const DATABASE_URL_VAR: &str = "CHORUS_TEST_DATABASE_URL";

/// A store on one backend, with what it needs to be re-opened and cleaned up.
pub(crate) struct TestStore {
    pub store: Store,
    /// What `Store::open` was given.
    pub url: String,
    /// The key provider API keys are sealed with (to open the store again).
    pub secrets: SecretBox,
    /// "sqlite" or "postgres", for assertion messages.
    pub backend: &'static str,
    /// Holds the SQLite file and the workspace roots.
    pub dir: TempDir,
    /// Dropped after `store`: removes the PostgreSQL schema.
    _schema: Option<SchemaGuard>,
}

/// One store per configured backend.
pub(crate) async fn test_stores() -> Vec<TestStore> {
    let mut stores = vec![sqlite().await];
    let url = std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty());
    assert!(
        url.is_some() || std::env::var("CHORUS_TEST_REQUIRE_POSTGRES").as_deref() != Ok("1"),
        "CHORUS_TEST_REQUIRE_POSTGRES=1 but {DATABASE_URL_VAR} is not set: set it to a PostgreSQL \
         database these tests may create schemas in (postgres://postgres@127.0.0.1:5432/test; .ci/run does)"
    );
    if let Some(url) = url {
        stores.push(postgres(url).await);
    }
    stores
}

async fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    // A directory that does not exist yet: open creates it.
    let path = dir.path().join("state").join("chorus.db");
    let url = format!("sqlite://{}", path.to_str().expect("utf-8 temp path"));
    let secrets = SecretBox::ephemeral();
    let store = Store::open(&url, secrets.clone())
        .await
        .expect("open sqlite");
    TestStore {
        store,
        url,
        secrets,
        backend: "sqlite",
        dir,
        _schema: None,
    }
}

async fn postgres(base_url: String) -> TestStore {
    let schema = format!("chorus_t_{}", uuid::Uuid::new_v4().simple());
    let guard = SchemaGuard {
        base_url: base_url.clone(),
        schema: schema.clone(),
    };
    let create = format!("CREATE SCHEMA {schema}");
    let admin_url = base_url.clone();
    tokio::task::spawn_blocking(move || {
        let mut conn = PgConnection::establish(&admin_url).expect("connect to the test database");
        conn.batch_execute(&create).expect("create the test schema");
    })
    .await
    .expect("create schema task");
    let separator = if base_url.contains('?') { '&' } else { '?' };
    let url = format!("{base_url}{separator}options=-c%20search_path%3D{schema}");
    let secrets = SecretBox::ephemeral();
    let store = Store::open(&url, secrets.clone())
        .await
        .expect("open postgres");
    TestStore {
        store,
        url,
        secrets,
        backend: "postgres",
        dir: tempfile::tempdir().expect("temp dir"),
        _schema: Some(guard),
    }
}

/// Drops a test's PostgreSQL schema.
struct SchemaGuard {
    base_url: String,
    schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        // Best effort: a failure leaves a schema behind, not a wrong result.
        if let Ok(mut conn) = PgConnection::establish(&self.base_url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

impl TestStore {
    /// A workspace named `name` on a fresh directory.
    pub async fn workspace(&self, name: &str) -> Workspace {
        let root = self.dir.path().join("roots").join(name);
        std::fs::create_dir_all(&root).expect("workspace root");
        self.store
            .create_workspace(name_of(name), root.to_str().expect("utf-8 root"))
            .await
            .unwrap_or_else(|e| panic!("{}: create workspace {name}: {e}", self.backend))
    }

    /// A workspace named `name` holding one task, described "x".
    pub async fn workspace_with_task(&self, name: &str) -> (Workspace, crate::domain::Task) {
        let ws = self.workspace(name).await;
        let (task, _) = self
            .store
            .create_task(ws.id, "x".into(), source())
            .await
            .unwrap_or_else(|e| panic!("{}: create task: {e}", self.backend));
        (ws, task)
    }
}

pub(crate) fn name_of(name: &str) -> Name {
    Name::parse("name", name).expect("valid test name")
}

pub(crate) fn source() -> TaskSource {
    TaskSource {
        kind: "test".into(),
        user_id: Some("u1".into()),
        conversation_id: None,
        request_id: None,
    }
}
