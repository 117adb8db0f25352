//! What the egress proxy costs (docs/benchmarks.md, "Egress proxy"), each
//! measure with the network modes side by side in one run, interleaved:
//!
//! 1. One sandboxed process start to exit (`true`): no network (a namespace
//!    of its own) and proxied (namespace, proxy process, three forwards, as
//!    a CLI agent gets). The host's network (bash with the grant before the
//!    proxy) and the Landlock port rule (CLI agents before) were measured by
//!    this bench before they were removed; docs/benchmarks.md has both.
//! 2. One TCP connection (connect, read one byte): to a server in a test
//!    network namespace, directly from the host's network (what a sandbox
//!    with the host's network had) and from inside a proxied sandbox through
//!    the proxy (CONNECT), and through the proxy asking the service first
//!    (a run whose approval rules decide the network grant's connections;
//!    the service answers at once, in process — the orchestrator's own
//!    answer is an AuthorizeToolCall, measured by tests/benches/approvals);
//!    to a server on the host's loopback, directly and through a forward. Timed by the same bash loop (`$EPOCHREALTIME`), a
//!    fresh connection each.
//!
//! `cargo bench -p chorus-sandbox --bench egress`
//! (root: the test network namespace; CHORUS_BENCH_STARTS: starts per mode,
//! default 100; CHORUS_BENCH_CONNECTIONS: connections per path, default 200).

use std::io::Write;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use chorus_sandbox::testing::{TEST_UID, TestNet, give_to_test_user};
use chorus_sandbox::{
    EgressRule, Forward, Identity, Network, NetworkQuestions, ProcessSpec, Sandbox, SandboxConfig,
};
use tokio::io::AsyncReadExt;

/// Durations, sorted.
struct Samples(Vec<Duration>);

impl Samples {
    fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Self(samples)
    }

    fn percentile(&self, p: f64) -> Duration {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((self.0.len().saturating_sub(1)) as f64 * p / 100.0).round() as usize;
        self.0.get(index).copied().unwrap_or_default()
    }

    fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    fn mean(&self) -> Duration {
        let n = u32::try_from(self.0.len().max(1)).unwrap_or(u32::MAX);
        self.0.iter().sum::<Duration>() / n
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn table(title: &str, rows: &[(&str, &Samples)]) {
    println!("## {title}\n");
    println!("| path | p50 ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    println!();
}

fn spec(ws: &std::path::Path, network: Network, script: &str) -> ProcessSpec {
    ProcessSpec {
        program: "/bin/bash".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: ws.to_path_buf(),
        read_write: vec![ws.to_path_buf()],
        read_only: Vec::new(),
        network,
        identity: Identity::User {
            uid: TEST_UID,
            gid: TEST_UID,
        },
        address_space_limit: true,
        covers: Vec::new(),
        run: None,
        fence: None,
        network_questions: None,
    }
}

async fn run(sandbox: &Sandbox, spec: &ProcessSpec) -> String {
    let mut child = sandbox.spawn(spec).expect("spawn");
    let mut out = String::new();
    let mut err = String::new();
    let mut stdout = child.take_stdout().expect("stdout");
    let mut stderr = child.take_stderr().expect("stderr");
    let (a, b) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    a.expect("stdout");
    b.expect("stderr");
    let status = child.wait().await.expect("wait");
    assert!(status.success(), "{status}: {out}{err}");
    out
}

/// A server on the host's loopback: one byte, then close.
fn host_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"x");
        }
    });
    port
}

fn proxied(allow: Vec<EgressRule>, forwards: Vec<Forward>) -> Network {
    Network::Proxied { allow, forwards }
}

async fn starts(sandbox: &Sandbox, ws: &std::path::Path, count: usize) {
    let port = host_server();
    let forwards: Vec<Forward> = [port, port + 1, port + 2]
        .iter()
        .map(|p| Forward {
            listen: format!("127.0.0.1:{p}").parse().expect("addr"),
            connect: format!("127.0.0.1:{port}"),
        })
        .collect();
    let modes = [
        ("no network (own namespace)", Network::None),
        (
            "proxied (proxy + 3 forwards)",
            proxied(
                vec![EgressRule::parse("api.anthropic.com:443").expect("rule")],
                forwards,
            ),
        ),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
    for round in 0..count + 10 {
        for (i, (_, network)) in modes.iter().enumerate() {
            let spec = spec(ws, network.clone(), "true");
            let started = Instant::now();
            run(sandbox, &spec).await;
            if round >= 10 {
                samples[i].push(started.elapsed());
            }
        }
    }
    let samples: Vec<Samples> = samples.into_iter().map(Samples::new).collect();
    let rows: Vec<(&str, &Samples)> = modes.iter().map(|(n, _)| *n).zip(samples.iter()).collect();
    table(
        &format!("One sandboxed process, start to exit (`true`, {count} per mode, interleaved)"),
        &rows,
    );
}

/// `script` run by bash outside any sandbox.
async fn unconfined(script: &str) -> String {
    let out = tokio::process::Command::new("/bin/bash")
        .args(["-c", script])
        .output()
        .await
        .expect("bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bash loop timing `count` connections, each: connect, (CONNECT through
/// the proxy), read one byte. Prints microseconds per connection.
fn connect_loop(count: usize, open: &str) -> String {
    format!(
        "for i in $(seq {count}); do s=$EPOCHREALTIME; {open} && head -c1 <&3 >/dev/null; e=$EPOCHREALTIME; exec 3<&-; \
         echo $(( (${{e/./}} - ${{s/./}}) )); done"
    )
}

fn parse_micros(out: &str) -> Vec<Duration> {
    out.lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .collect()
}

async fn connections(sandbox: &Sandbox, ws: &std::path::Path, count: usize) {
    let mut net = TestNet::create();
    let ip = net.ip;
    net.serve(
        "python3",
        &[
            "-u",
            "-c",
            &format!(
                "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('{ip}', 7000)); s.listen(128); print('ready')\nwhile True:\n    c,_=s.accept(); c.sendall(b'x'); c.close()"
            ),
        ],
        "ready",
    )
    .await;
    let port = host_server();
    let outside = format!("exec 3<>/dev/tcp/{ip}/7000");
    let tunnel = format!(
        "exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT {ip}:7000 HTTP/1.1\\r\\n\\r\\n' >&3 && read -r _ <&3 && read -r _ <&3"
    );
    let loopback = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let allow = vec![EgressRule::parse(&format!("{ip}:7000")).expect("rule")];
    let forwards = vec![Forward {
        listen: format!("127.0.0.1:{port}").parse().expect("addr"),
        connect: format!("127.0.0.1:{port}"),
    }];
    let mut rows: Vec<(&str, Vec<Duration>)> = vec![
        ("outside host, directly from the host's network", Vec::new()),
        ("outside host, through the proxy (CONNECT)", Vec::new()),
        (
            "outside host, through the proxy, asking the service first",
            Vec::new(),
        ),
        (
            "host loopback, directly from the host's network",
            Vec::new(),
        ),
        ("host loopback service, through a forward", Vec::new()),
    ];
    // The service's answer, at once: every connection may be made.
    let answered = NetworkQuestions::new(|_host: String, _port: u16| async { Ok(()) });
    // Interleaved in chunks, so drift hits every path alike.
    let chunk = 50.min(count);
    for _ in 0..count.div_ceil(chunk) {
        // None: the same bash outside any sandbox, on the host's network (as
        // a sandbox with the host's network, which no longer exists, had it).
        let scripts = [
            (None, &outside, false),
            (Some(proxied(allow.clone(), Vec::new())), &tunnel, false),
            (Some(proxied(allow.clone(), Vec::new())), &tunnel, true),
            (None, &loopback, false),
            (
                Some(proxied(Vec::new(), forwards.clone())),
                &loopback,
                false,
            ),
        ];
        for (i, (network, open, asks)) in scripts.into_iter().enumerate() {
            let script = connect_loop(chunk, open);
            let out = match network {
                Some(network) => {
                    let spec = ProcessSpec {
                        network_questions: asks.then(|| answered.clone()),
                        ..spec(ws, network, &script)
                    };
                    run(sandbox, &spec).await
                }
                None => unconfined(&script).await,
            };
            let got = parse_micros(&out);
            assert_eq!(got.len(), chunk, "{out}");
            rows[i].1.extend(got);
        }
    }
    let samples: Vec<(&str, Samples)> = rows
        .into_iter()
        .map(|(n, s)| (n, Samples::new(s)))
        .collect();
    let rows: Vec<(&str, &Samples)> = samples.iter().map(|(n, s)| (*n, s)).collect();
    table(
        &format!("One TCP connection from inside (connect, read a byte; {count} per path)"),
        &rows,
    );
}

#[tokio::main]
async fn main() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the egress bench needs root (a test network namespace)"
    );
    let sandbox = Sandbox::start(SandboxConfig {
        launcher: Some(env!("CARGO_BIN_EXE_chorus-sandbox").into()),
        ..SandboxConfig::default()
    })
    .await;
    assert_eq!(sandbox.status().state, "enforced", "{:?}", sandbox.status());
    let ws = tempfile::tempdir().expect("ws");
    give_to_test_user(ws.path());
    starts(&sandbox, ws.path(), env_number("CHORUS_BENCH_STARTS", 100)).await;
    connections(
        &sandbox,
        ws.path(),
        env_number("CHORUS_BENCH_CONNECTIONS", 200),
    )
    .await;
}
