//! An attacker as a process of its own, so that a benchmark can confine its
//! CPU (see `chorus_tests::confined`) and the figures show what the service
//! does under the attack, not what the attacker's own CPU takes from it.
//!
//! - `attacker silent <addr> <connections> <addresses>`: keeps that many
//!   connections to `addr` open that never send a byte, from 127.0.0.2 and
//!   the next `<addresses>` - 1 loopback addresses; each one the server
//!   closes is opened again at once. A connection not established within
//!   [`CONNECT_WAIT`] (a firewall dropped its SYN) is given up and tried
//!   again.
//! - `attacker flood <addr> <token> <callers>`: `callers` ToolExec calls at a
//!   time, each presenting `token` (one signed by a key the service does not
//!   know), one after another.
//!
//! Prints `ready` once the attack is at full strength and goes on until its
//! standard input closes.

use std::net::{Ipv4Addr, SocketAddr};

use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::attacker::tool_call;
use chorus_tests::credentials::Bearer;
use serde_json::json;
use tokio::io::AsyncReadExt;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["silent", addr, connections, addresses] => {
                silent(
                    parse(addr, "addr"),
                    parse(connections, "connections"),
                    parse(addresses, "addresses"),
                )
                .await;
            }
            ["flood", addr, token, callers] => {
                flood(parse(addr, "addr"), token, parse(callers, "callers")).await;
            }
            _ => panic!(
                "usage: attacker silent <addr> <connections> <addresses> | flood <addr> <token> <callers>"
            ),
        }
        println!("ready");
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 64];
        while !matches!(stdin.read(&mut sink).await, Ok(0) | Err(_)) {}
    });
    // The attack's tasks end with the runtime.
    runtime.shutdown_background();
}

fn parse<T: std::str::FromStr>(text: &str, what: &str) -> T {
    text.parse()
        .unwrap_or_else(|_| panic!("{what}: '{text}' does not parse"))
}

/// How long a connection attempt waits to be established before it is tried
/// again: a SYN a firewall drops would otherwise wait minutes.
const CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the silent connections, each in a task that opens it again when the
/// server closes it; returns once each has been tried (open, or given up
/// after [`CONNECT_WAIT`]).
async fn silent(addr: SocketAddr, connections: usize, addresses: u8) {
    let (opened, mut all_open) = tokio::sync::mpsc::channel::<()>(connections.max(1));
    for i in 0..connections {
        let from = Ipv4Addr::new(127, 0, 0, 2 + (i % usize::from(addresses.max(1))) as u8);
        let opened = opened.clone();
        tokio::spawn(async move {
            let mut first = Some(opened);
            loop {
                let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
                    continue;
                };
                if socket.bind((from, 0).into()).is_err() {
                    continue;
                }
                let attempt = tokio::time::timeout(CONNECT_WAIT, socket.connect(addr)).await;
                if let Some(opened) = first.take() {
                    let _ = opened.send(()).await;
                }
                let Ok(Ok(mut stream)) = attempt else {
                    continue;
                };
                let mut sink = [0u8; 1024];
                while !matches!(stream.read(&mut sink).await, Ok(0) | Err(_)) {}
            }
        });
    }
    drop(opened);
    for _ in 0..connections {
        if all_open.recv().await.is_none() {
            break;
        }
    }
}

/// Starts the callers; returns once each has had a first answer.
async fn flood(addr: SocketAddr, token: &str, callers: usize) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("an endpoint")
        .connect()
        .await
        .expect("a connection to tool-exec");
    let (answered, mut all_answered) = tokio::sync::mpsc::channel::<()>(callers.max(1));
    for _ in 0..callers {
        let mut client = ToolExecClient::with_interceptor(channel.clone(), Bearer::new(token));
        let answered = answered.clone();
        tokio::spawn(async move {
            let mut first = Some(answered);
            loop {
                let _ = client
                    .execute_tool(tool_call("file.read", &json!({"path": "notes.txt"})))
                    .await;
                if let Some(answered) = first.take() {
                    let _ = answered.send(()).await;
                }
            }
        });
    }
    drop(answered);
    for _ in 0..callers {
        if all_answered.recv().await.is_none() {
            break;
        }
    }
}
