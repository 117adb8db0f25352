//! Connections: which backend a URL names, the pool, SQLite's pragmas, migrations
//! and the write transaction that both backends share.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::r2d2::{self, CustomizeConnection, ManageConnection, Pool, R2D2Connection};
use diesel::{Connection, PgConnection, SqliteConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use super::{Db, StoreError};
use crate::owner_only;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// SQLite waits this long for another connection's write lock before it gives up.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;
/// Writes to one SQLite file serialize; a few connections let reads (WAL) overlap them.
const SQLITE_POOL_SIZE: u32 = 4;
const POSTGRES_POOL_SIZE: u32 = 10;
/// How long a caller waits for a free pooled connection.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the heartbeat's own connection (only a heartbeat that
/// has not finished holds it; a new connection is made within libpq's
/// connect timeout).
const LEASE_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(10);
/// Key of the PostgreSQL advisory lock that keeps replicas from migrating at once.
const MIGRATION_LOCK_KEY: i64 = 0x6368_6f72_7573; // "chorus"

/// One connection to either backend; queries are written once against it.
#[derive(diesel::MultiConnection)]
pub(super) enum AnyConnection {
    Sqlite(SqliteConnection),
    Pg(PgConnection),
}

pub(super) type ConnectionPool = Pool<Manager>;

/// A pooled connection, and whether a call on it failed on the database.
///
/// A connection goes out of the pool and back in unchecked, so a read is
/// one round trip to the database (r2d2's check on checkout would add a
/// `SELECT 1` before every call); only one a call failed on is checked when
/// it goes back (see [`Manager::has_broken`]) and dropped if that fails too.
pub(super) struct Session {
    conn: AnyConnection,
    failed: bool,
}

impl Session {
    /// Runs `f` on the connection, noting whether the database failed it.
    pub(super) fn run<T>(
        &mut self,
        f: impl FnOnce(&mut AnyConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = f(&mut self.conn);
        if matches!(
            result,
            Err(StoreError::Database(_) | StoreError::Unreachable(_))
        ) {
            self.failed = true;
        }
        result
    }
}

/// What `Store::open` was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// A file path.
    Sqlite(String),
    /// A libpq URL.
    Postgres(String),
}

impl Target {
    /// `postgres://` and `postgresql://` URLs name PostgreSQL; anything else is a
    /// SQLite file path, with or without `sqlite://`.
    pub(super) fn parse(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        if path.is_empty() {
            return Err(StoreError::Database(
                "the database URL is empty; give a SQLite file path or a postgres:// URL".into(),
            ));
        }
        if path == ":memory:" {
            return Err(StoreError::Database(
                "':memory:' is not supported: every pooled connection would see its own empty database; give a SQLite file path".into(),
            ));
        }
        if path.starts_with("file:") {
            return Err(StoreError::Database(format!(
                "'{path}' is a SQLite URI; give a plain file path"
            )));
        }
        Ok(Self::Sqlite(path.to_owned()))
    }

    fn connect(&self) -> diesel::ConnectionResult<AnyConnection> {
        match self {
            Self::Sqlite(path) => SqliteConnection::establish(path).map(AnyConnection::Sqlite),
            Self::Postgres(url) => {
                PgConnection::establish(&with_timeouts(url)).map(AnyConnection::Pg)
            }
        }
    }

    /// The target without credentials, for messages.
    fn describe(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("SQLite file '{path}'"),
            Self::Postgres(url) => {
                let host = url
                    .split_once("://")
                    .map(|(_, rest)| rest.rsplit_once('@').map_or(rest, |(_, host)| host))
                    .unwrap_or(url);
                let host = host.split(['/', '?']).next().unwrap_or(host);
                format!("PostgreSQL at '{host}'")
            }
        }
    }
}

/// libpq settings every connection gets unless the URL sets them: a
/// connection attempt, a dead peer and data the server stops acknowledging
/// (a partition that drops packets) each fail in seconds instead of the
/// minutes TCP would wait, so that a heartbeat fails in bounded time and the
/// replica stops its runs before another replica may claim them.
const PG_TIMEOUTS: [(&str, &str); 6] = [
    ("connect_timeout", "5"),
    ("keepalives", "1"),
    ("keepalives_idle", "5"),
    ("keepalives_interval", "2"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "10000"),
];

/// `url` with the [`PG_TIMEOUTS`] it does not set itself.
fn with_timeouts(url: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let set: Vec<&str> = query
        .split('&')
        .filter_map(|p| p.split('=').next())
        .collect();
    let mut url = url.to_owned();
    for (key, value) in PG_TIMEOUTS {
        if set.contains(&key) {
            continue;
        }
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(key);
        url.push('=');
        url.push_str(value);
    }
    url
}

/// The pools of a store: `main` for everything but the leases' heartbeat,
/// which has a connection of its own (`leases`), so that however busy the
/// main pool is, a replica renews its leases — and keeps its runs' fences up —
/// without waiting for a connection.
pub(super) struct Pools {
    pub main: ConnectionPool,
    pub leases: ConnectionPool,
}

/// Opens the pools: makes a SQLite file owner-only ([`prepare_sqlite_file`]),
/// migrates on one connection (so a bad URL fails at once with the database's
/// own message), then builds the pools.
pub(super) fn open_pools(target: Target) -> Result<Pools, StoreError> {
    if let Target::Sqlite(path) = &target {
        prepare_sqlite_file(Path::new(path))?;
    }
    let mut conn = target.connect().map_err(|e| {
        let message = format!("cannot connect to {}: {e}", target.describe());
        match target {
            Target::Postgres(_) => StoreError::Unreachable(message),
            Target::Sqlite(_) => StoreError::Database(message),
        }
    })?;
    migrate(&mut conn, &target)?;
    drop(conn);

    let size = match target {
        Target::Sqlite(_) => SQLITE_POOL_SIZE,
        Target::Postgres(_) => POSTGRES_POOL_SIZE,
    };
    Ok(Pools {
        main: pool(target.clone(), size, CHECKOUT_TIMEOUT)?,
        leases: pool(target, 1, LEASE_CHECKOUT_TIMEOUT)?,
    })
}

/// A pool of up to `size` connections to `target`, one kept open.
fn pool(target: Target, size: u32, checkout: Duration) -> Result<ConnectionPool, StoreError> {
    let description = target.describe();
    Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .test_on_check_out(false)
        .connection_timeout(checkout)
        .connection_customizer(Box::new(SessionSettings))
        .build(Manager { target })
        .map_err(|e| StoreError::Database(format!("cannot open {description}: {e}")))
}

/// Makes a SQLite database owner-only before SQLite opens it: its missing
/// directories are created 0700, a missing file is created empty with mode 0600
/// (SQLite gives its `-wal` and `-shm` files the database file's mode), and an
/// existing file and its companions readable by others are tightened (logged).
fn prepare_sqlite_file(path: &Path) -> Result<(), StoreError> {
    let failed = |what: &str, e: std::io::Error| {
        StoreError::Database(format!(
            "cannot {what} for the database '{}': {e}",
            path.display()
        ))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        owner_only::create_dir(dir).map_err(|e| failed("create the directory", e))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut file = path.as_os_str().to_owned();
                file.push(suffix);
                let file = std::path::PathBuf::from(file);
                if file.exists() {
                    owner_only::tighten_logged(&file, "database file");
                }
            }
            Ok(())
        }
        Err(e) => Err(failed("create the file", e)),
    }
}

fn migrate(conn: &mut AnyConnection, target: &Target) -> Result<(), StoreError> {
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::Database(format!(
            "cannot migrate {} to the current schema: {e}",
            target.describe()
        ))
    };
    match conn {
        AnyConnection::Sqlite(c) => {
            sqlite_pragmas(c).map_err(|e| failed(&e))?;
            c.run_pending_migrations(SQLITE_MIGRATIONS)
                .map_err(|e| failed(&e))?;
        }
        AnyConnection::Pg(c) => {
            // Replicas that start together take turns; the lock ends with the session.
            c.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
                .map_err(|e| failed(&e))?;
            let result = c.run_pending_migrations(POSTGRES_MIGRATIONS).map(drop);
            c.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
                .map_err(|e| failed(&e))?;
            result.map_err(|e| failed(&e))?;
        }
    }
    Ok(())
}

/// Per-connection settings of SQLite: WAL so readers never block the writer, a busy
/// timeout so writers queue instead of failing, enforced foreign keys,
/// `synchronous=NORMAL` (durable across application crashes; WAL keeps it
/// consistent), and `secure_delete`, so what a change replaces is overwritten
/// with zeros instead of lingering in free space (a key an earlier version
/// stored in clear does not outlive its sealing).
fn sqlite_pragmas(conn: &mut SqliteConnection) -> diesel::QueryResult<()> {
    conn.batch_execute(&format!(
        "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};
         PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;
         PRAGMA secure_delete = ON;"
    ))
}

/// A trivial query: does the connection still work?
pub(super) fn ping(conn: &mut AnyConnection) -> Result<(), StoreError> {
    match conn {
        AnyConnection::Sqlite(c) => c.batch_execute("SELECT 1").db(),
        AnyConnection::Pg(c) => c.batch_execute("SELECT 1").db(),
    }
}

/// Copies SQLite's WAL into the database file and empties it, so the page
/// versions it held before a change are gone from disk; nothing on PostgreSQL.
pub(super) fn truncate_wal(conn: &mut AnyConnection) -> Result<(), StoreError> {
    match conn {
        AnyConnection::Sqlite(c) => c.batch_execute("PRAGMA wal_checkpoint(TRUNCATE);").db(),
        AnyConnection::Pg(_) => Ok(()),
    }
}

/// Applies the session settings to every new pooled connection.
#[derive(Debug)]
struct SessionSettings;

impl CustomizeConnection<Session, r2d2::Error> for SessionSettings {
    fn on_acquire(&self, session: &mut Session) -> Result<(), r2d2::Error> {
        match &mut session.conn {
            AnyConnection::Sqlite(c) => sqlite_pragmas(c).map_err(r2d2::Error::QueryError),
            AnyConnection::Pg(c) => c.batch_execute(PG_SESSION).map_err(r2d2::Error::QueryError),
        }
    }
}

/// Every PostgreSQL session's limits. A transaction of Chorus runs its
/// statements back to back: one left open longer than a second has a
/// process behind it that was paused or cut from the database, and the
/// server ends it, so the rows it locked (a task, the event feed's head)
/// hold up no other replica's takeovers or heartbeats for longer. No
/// statement waits more than five seconds for a lock: a caller gets an error
/// it may retry instead of a call that hangs.
pub(super) const PG_SESSION: &str =
    "SET idle_in_transaction_session_timeout = 1000; SET lock_timeout = 5000";

/// Makes connections of the backend the target names. (diesel's own
/// `ConnectionManager` would try each backend in turn with the same URL.)
#[derive(Debug)]
pub(super) struct Manager {
    target: Target,
}

impl ManageConnection for Manager {
    type Connection = Session;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<Session, r2d2::Error> {
        let conn = self
            .target
            .connect()
            .map_err(r2d2::Error::ConnectionError)?;
        Ok(Session {
            conn,
            failed: false,
        })
    }

    /// Only when a pool is built to check connections on checkout (this
    /// store's are not).
    fn is_valid(&self, session: &mut Session) -> Result<(), r2d2::Error> {
        session.conn.ping().map_err(r2d2::Error::QueryError)
    }

    /// A connection left inside a transaction (a panic mid-way) is never
    /// reused; nor is one a call failed on that does not answer a trivial
    /// query now (the server ended its session, the network cut it).
    fn has_broken(&self, session: &mut Session) -> bool {
        if std::thread::panicking() || session.conn.is_broken() {
            return true;
        }
        std::mem::take(&mut session.failed) && ping(&mut session.conn).is_err()
    }
}

/// Runs `f` in a write transaction: `BEGIN IMMEDIATE` on SQLite (the write lock is
/// taken up front, so two writers queue on the busy timeout instead of failing to
/// upgrade a read lock), a plain `BEGIN` on PostgreSQL (rows are locked as they are
/// read, with `FOR UPDATE`). Commits on `Ok`, rolls back on `Err`.
pub(super) fn write_transaction<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match conn {
        AnyConnection::Sqlite(c) => {
            AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")
        }
        AnyConnection::Pg(c) => AnsiTransactionManager::begin_transaction(c),
    }
    .db()?;
    match f(conn) {
        Ok(value) => {
            AnyConnection::commit_transaction(conn).db()?;
            Ok(value)
        }
        Err(e) => {
            // If the rollback fails too, the connection is marked broken and the
            // pool drops it; the caller still gets the error that matters.
            let _ = AnyConnection::rollback_transaction(conn);
            Err(e)
        }
    }
}

/// Runs `$body` with `$c` bound to the backend's own connection. Through the
/// `MultiConnection` a query's SQL text is built again on every call (its
/// `SerializedQuery` writes the text on each walk); on the backend's own
/// connection a query of a static type finds its prepared statement by its
/// type alone. For the hottest queries (a call's run read and record, a task
/// read).
macro_rules! direct {
    ($conn:expr, |$c:ident| $body:expr) => {{
        match $conn {
            $crate::store::connection::AnyConnection::Sqlite($c) => $body,
            $crate::store::connection::AnyConnection::Pg($c) => $body,
        }
    }};
}
pub(super) use direct;

/// Reads the first row of a query, locking it until the transaction ends:
/// `SELECT ... FOR UPDATE` on PostgreSQL; on SQLite the write transaction already
/// holds the database's write lock.
macro_rules! first_locked {
    ($conn:expr, $query:expr) => {{
        use diesel::{OptionalExtension as _, QueryDsl as _, RunQueryDsl as _};
        match $conn {
            $crate::store::connection::AnyConnection::Pg(c) => {
                $query.for_update().first(c).optional()
            }
            $crate::store::connection::AnyConnection::Sqlite(c) => $query.first(c).optional(),
        }
    }};
}
pub(super) use first_locked;

#[cfg(test)]
mod timeout_tests {
    use super::with_timeouts;

    #[test]
    fn timeouts_are_added_unless_the_url_sets_them() {
        assert_eq!(
            with_timeouts("postgres://u@h/db"),
            "postgres://u@h/db?connect_timeout=5&keepalives=1&keepalives_idle=5&keepalives_interval=2&keepalives_count=3&tcp_user_timeout=10000"
        );
        let own = with_timeouts("postgres://u@h/db?sslmode=require&connect_timeout=30");
        assert!(
            own.starts_with("postgres://u@h/db?sslmode=require&connect_timeout=30&keepalives=1"),
            "{own}"
        );
        assert_eq!(own.matches("connect_timeout").count(), 1, "{own}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_the_backend() {
        assert_eq!(
            Target::parse("postgres://u@h/db"),
            Ok(Target::Postgres("postgres://u@h/db".into()))
        );
        assert_eq!(
            Target::parse("postgresql://h/db"),
            Ok(Target::Postgres("postgresql://h/db".into()))
        );
        assert_eq!(
            Target::parse("sqlite:///var/lib/chorus/db.sqlite"),
            Ok(Target::Sqlite("/var/lib/chorus/db.sqlite".into()))
        );
        assert_eq!(
            Target::parse("data/chorus.db"),
            Ok(Target::Sqlite("data/chorus.db".into()))
        );
        assert!(Target::parse("").is_err());
        assert!(Target::parse(":memory:").is_err());
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).expect("exists").mode() & 0o777
    }

    /// The bundled SQLite keeps a statement's plan whatever is bound to it
    /// (`.cargo/config.toml`): a `LIMIT ?` no longer makes every cached
    /// statement be compiled again at each call.
    #[test]
    fn sqlite_is_built_with_the_query_planner_stability_guarantee() {
        use diesel::RunQueryDsl as _;
        let base = tempfile::tempdir().expect("dir");
        let pool = open_pools(Target::Sqlite(
            base.path().join("q.db").display().to_string(),
        ))
        .expect("open")
        .main;
        let mut session = pool.get().expect("connection");
        let AnyConnection::Sqlite(conn) = &mut session.conn else {
            panic!("a SQLite connection");
        };
        let on: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "(SELECT count(*) FROM pragma_compile_options WHERE compile_options = 'ENABLE_QPSG')",
        ))
        .get_result(conn)
        .expect("the compile options");
        assert_eq!(
            on, 1,
            "SQLite was built without SQLITE_ENABLE_QPSG: build from the workspace, whose \
             .cargo/config.toml sets LIBSQLITE3_FLAGS"
        );
    }

    #[test]
    fn a_new_sqlite_database_is_owner_only_with_its_wal() {
        let base = tempfile::tempdir().expect("dir");
        let dir = base.path().join("state");
        let path = dir.join("chorus.db");
        let pool = open_pools(Target::Sqlite(path.display().to_string()))
            .expect("open")
            .main;
        let mut session = pool.get().expect("connection");
        let conn = &mut session.conn;
        conn.batch_execute("INSERT INTO api_keys VALUES ('k', 'n', 'viewer', 'h', 0, NULL)")
            .expect("a write, so the WAL has something");
        assert_eq!(mode(&dir), 0o700);
        for file in ["chorus.db", "chorus.db-wal", "chorus.db-shm"] {
            assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
        }
    }

    #[test]
    fn an_existing_sqlite_database_readable_by_others_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("chorus.db");
        for file in ["chorus.db", "chorus.db-wal"] {
            let file = dir.path().join(file);
            std::fs::write(&file, "").expect("file");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        // Held open: the last connection to close removes the WAL.
        let _pools = open_pools(Target::Sqlite(path.display().to_string())).expect("open");
        for file in ["chorus.db", "chorus.db-wal"] {
            assert_eq!(mode(&dir.path().join(file)), 0o600, "{file}");
        }
    }

    #[test]
    fn descriptions_hide_credentials() {
        let target = Target::Postgres("postgres://me:secret@db.local:5432/chorus?x=1".into());
        assert_eq!(target.describe(), "PostgreSQL at 'db.local:5432'");
    }
}
