//! Round trips to PostgreSQL: a read is one, a recorded tool call two, and
//! a connection the server ended is dropped after the one call that found it
//! so. Counted by a proxy
//! between the store and the server that reads the client's side of the
//! protocol: every simple query (`Q`) and every extended-protocol `Sync`
//! (`S`) is one exchange the client waits for.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{DATABASE_URL_VAR, SchemaGuard, source};
use crate::secrets::SecretBox;
use crate::store::Store;

/// The first word of the client's startup message (protocol 3.x): the
/// messages after it are typed.
const PROTOCOL_3: u32 = 3 << 16;

/// Reads of a task on PostgreSQL make one round trip each: no check of the
/// connection before it is used. A connection whose session the server
/// ended fails the one call that finds it so, and is not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_postgresql_is_one_round_trip() {
    let url = std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty());
    let Some(base) = url else {
        assert!(
            std::env::var("CHORUS_TEST_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "CHORUS_TEST_REQUIRE_POSTGRES=1 but {DATABASE_URL_VAR} is not set: set it to a \
             PostgreSQL database these tests may create schemas in \
             (postgres://postgres@127.0.0.1:5432/test; .ci/run does)"
        );
        return;
    };
    let target = server_address(&base);
    let proxy = Counting::start(target).await;
    let schema = format!("chorus_rt_{}", uuid::Uuid::new_v4().simple());
    let _guard = SchemaGuard {
        base_url: base.clone(),
        schema: schema.clone(),
    };
    sql(&base, format!("CREATE SCHEMA {schema}")).await;
    let proxied = base.replacen(&target.to_string(), &proxy.addr.to_string(), 1);
    let separator = if proxied.contains('?') { '&' } else { '?' };
    // In clear, so the proxy can read it; named, so its sessions can be ended.
    let url = format!(
        "{proxied}{separator}sslmode=disable&application_name={schema}&options=-c%20search_path%3D{schema}"
    );
    let store = Store::open(&url, SecretBox::ephemeral())
        .await
        .expect("open the store through the proxy");
    let root = tempfile::tempdir().expect("a root");
    let ws = store
        .create_workspace(
            super::name_of("trips"),
            root.path().to_str().expect("a UTF-8 root"),
        )
        .await
        .expect("a workspace");
    let (task, _) = store
        .create_task(ws.id, "x".into(), source())
        .await
        .expect("a task");

    // Each pooled connection prepares the statement on its first read.
    for _ in 0..5 {
        store.get_task(task.id).await.expect("a read");
    }
    let before = proxy.counts();
    for _ in 0..20 {
        store.get_task(task.id).await.expect("a read");
    }
    let after = proxy.counts();
    let syncs: u64 =
        after.iter().map(|c| c.1).sum::<u64>() - before.iter().map(|c| c.1).sum::<u64>();
    // (A connection the pool opened meanwhile sets up its session with
    // simple queries: only those of the connections there before count.)
    let queries: u64 = before.iter().zip(&after).map(|(b, a)| a.0 - b.0).sum();
    assert_eq!(
        (syncs, queries),
        (20, 0),
        "20 reads of a task: one exchange each, and no other query on the connections they used"
    );

    // A recorded tool call: the task read, then its counters, its event and
    // the announcement of its change in one statement (`call_record`).
    let call = || {
        vec![(
            crate::domain::EventKind::ToolExecuted,
            serde_json::json!({"tool": "file.read", "status": "ok"}),
        )]
    };
    store.append_events(task.id, call()).await.expect("a call");
    let before = proxy.counts();
    for _ in 0..10 {
        store.append_events(task.id, call()).await.expect("a call");
    }
    let after = proxy.counts();
    let exchanges: u64 = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.0 - b.0) + (a.1 - b.1))
        .sum();
    assert_eq!(
        exchanges, 20,
        "10 recorded calls: two exchanges each (the task read; its counters, event and NOTIFY in one statement)"
    );

    // The server ends every session of the store (a restart, an idle
    // timeout, a cut): each connection fails at most the one call that
    // finds it so, and the store serves again.
    let (open, _) = store.pool_use();
    sql(
        &base,
        format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{schema}'"
        ),
    )
    .await;
    let mut failed = 0;
    for _ in 0..=open {
        if store.get_task(task.id).await.is_err() {
            failed += 1;
        }
    }
    assert!(
        failed <= open,
        "{failed} of {} reads failed after the server ended {open} sessions: a connection found \
         ended is not handed out again",
        open + 1
    );
    for _ in 0..5 {
        store
            .get_task(task.id)
            .await
            .expect("reads once the ended connections are gone");
    }
}

/// Runs `statements` on the test database at `base`, on a connection of
/// its own.
async fn sql(base: &str, statements: String) {
    let base = base.to_owned();
    tokio::task::spawn_blocking(move || {
        PgConnection::establish(&base)
            .expect("connect to the test database")
            .batch_execute(&statements)
            .unwrap_or_else(|e| panic!("{statements}: {e}"));
    })
    .await
    .expect("the statements ran");
}

/// `host:port` of a libpq URL (`postgres://user@host:port/db`).
fn server_address(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    std::net::ToSocketAddrs::to_socket_addrs(&host)
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{DATABASE_URL_VAR} names no reachable host:port ({host})"))
}

/// Forwards to PostgreSQL and counts each connection's round trips.
struct Counting {
    addr: SocketAddr,
    connections: Arc<Mutex<Vec<Arc<Trips>>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// The simple queries and the `Sync`s one client connection sent.
#[derive(Default)]
struct Trips {
    queries: AtomicU64,
    syncs: AtomicU64,
}

impl Counting {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(Mutex::new(Vec::new()));
        let counted = Arc::clone(&connections);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let trips = Arc::new(Trips::default());
                counted.lock().expect("the counts").push(Arc::clone(&trips));
                tokio::spawn(carry(client, server, trips));
            }
        });
        Self {
            addr,
            connections,
            accept,
        }
    }

    /// (simple queries, syncs) of each connection so far, oldest first.
    fn counts(&self) -> Vec<(u64, u64)> {
        self.connections
            .lock()
            .expect("the counts")
            .iter()
            .map(|t| {
                (
                    t.queries.load(Ordering::SeqCst),
                    t.syncs.load(Ordering::SeqCst),
                )
            })
            .collect()
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies the server's bytes back as they come, and the client's message by
/// message, counting its `Q` and `S` messages.
async fn carry(client: TcpStream, server: TcpStream, trips: Arc<Trips>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut typed = false;
    loop {
        let mut kind = [0u8; 1];
        if typed && from_client.read_exact(&mut kind).await.is_err() {
            return;
        }
        let mut length = [0u8; 4];
        if from_client.read_exact(&mut length).await.is_err() {
            return;
        }
        let mut body = vec![0u8; (u32::from_be_bytes(length) as usize).saturating_sub(4)];
        if from_client.read_exact(&mut body).await.is_err() {
            return;
        }
        if typed {
            match &kind {
                b"Q" => trips.queries.fetch_add(1, Ordering::SeqCst),
                b"S" => trips.syncs.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
            if to_server.write_all(&kind).await.is_err() {
                return;
            }
        } else if body.len() >= 4 {
            // SSL and GSS requests come untyped before the startup message.
            typed =
                u32::from_be_bytes([body[0], body[1], body[2], body[3]]) >> 16 == PROTOCOL_3 >> 16;
        }
        if to_server.write_all(&length).await.is_err() || to_server.write_all(&body).await.is_err()
        {
            return;
        }
    }
}
