//! The databases an end-to-end test runs on: a SQLite file always, and a fresh
//! PostgreSQL schema too when `CHORUS_TEST_DATABASE_URL` is set (CI sets it), so
//! tests can run in parallel; the schema is dropped afterwards.

use std::path::Path;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};

/// The variable naming a PostgreSQL database for tests.
pub const DATABASE_URL_VAR: &str = "CHORUS_TEST_DATABASE_URL";

/// One database for one test.
pub struct TestDatabase {
    /// What the orchestrator is given (`--database-url`).
    pub url: String,
    /// "sqlite" or "postgres", for assertion messages.
    pub backend: &'static str,
    /// (server URL, schema) of a PostgreSQL schema to drop.
    schema: Option<(String, String)>,
}

/// A SQLite file in `dir`, and a new PostgreSQL schema when one is configured.
pub fn databases(dir: &Path) -> Vec<TestDatabase> {
    let mut all = vec![TestDatabase {
        url: dir.join("chorus.db").display().to_string(),
        backend: "sqlite",
        schema: None,
    }];
    if let Some(base) = postgres_url() {
        let schema = format!("chorus_e2e_{}", uuid_like());
        let mut conn = PgConnection::establish(&base).expect("connect to the test database");
        conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
            .expect("create the test schema");
        let separator = if base.contains('?') { '&' } else { '?' };
        all.push(TestDatabase {
            url: format!("{base}{separator}options=-c%20search_path%3D{schema}"),
            backend: "postgres",
            schema: Some((base, schema)),
        });
    }
    all
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Some((base, schema)) = &self.schema
            && let Ok(mut conn) = PgConnection::establish(base)
        {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
        }
    }
}

/// The PostgreSQL database tests may use, if one is configured; with
/// `CHORUS_TEST_REQUIRE_POSTGRES=1` (CI) there must be one.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|u| !u.is_empty());
    assert!(
        url.is_some() || std::env::var("CHORUS_TEST_REQUIRE_POSTGRES").as_deref() != Ok("1"),
        "CHORUS_TEST_REQUIRE_POSTGRES=1 but {DATABASE_URL_VAR} is not set: set it to a PostgreSQL \
         database these tests may create schemas in (postgres://postgres@127.0.0.1:5432/test; .ci/run does)"
    );
    url
}

/// A name part unique to this process and call.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}_{}_{}",
        std::process::id(),
        nanos,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
