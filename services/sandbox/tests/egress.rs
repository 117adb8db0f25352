//! A proxied sandbox, tried the way an agent with the network grant would:
//! the host's loopback (a database with trust authentication listens there),
//! the metadata address, every spelling of them, UDP — and what it may reach:
//! a destination its egress list names, exactly its forwards.

mod support;

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use chorus_sandbox::testing::{TEST_UID, TestNet, running_as_root as root};
use chorus_sandbox::{EgressRule, Forward, Identity, Network, ProcessSpec, Sandbox, Tier};
use tokio::io::AsyncReadExt;

in_both_tiers!(
    the_hosts_loopback_is_out_of_reach_directly_and_through_the_proxy,
    an_allowed_destination_is_reached_and_nothing_else,
    forwards_reach_exactly_their_target,
    udp_leaves_neither_a_proxied_nor_an_unnetworked_sandbox,
    an_invalid_forward_is_refused_before_anything_starts,
);

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let top = tempfile::tempdir().expect("tempdir");
    let ws = top.path().canonicalize().expect("canonical");
    if root() {
        std::os::unix::fs::chown(&ws, Some(TEST_UID), Some(TEST_UID)).expect("chown");
    }
    (top, ws)
}

fn proxied(ws: &Path, allow: &[&str], forwards: Vec<Forward>, script: &str) -> ProcessSpec {
    ProcessSpec {
        program: "/bin/bash".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/tmp".into()),
        ],
        cwd: ws.to_path_buf(),
        read_write: vec![ws.to_path_buf()],
        read_only: Vec::new(),
        network: Network::Proxied {
            allow: allow
                .iter()
                .map(|r| EgressRule::parse(r).expect("rule"))
                .collect(),
            forwards,
        },
        identity: if root() {
            Identity::User {
                uid: TEST_UID,
                gid: TEST_UID,
            }
        } else {
            Identity::Service
        },
        address_space_limit: true,
        covers: Vec::new(),
        run: None,
        fence: None,
        network_questions: None,
    }
}

async fn run(sandbox: &Sandbox, spec: &ProcessSpec) -> (String, String) {
    let mut child = sandbox.spawn(spec).expect("spawned");
    let mut out = child.take_stdout().expect("stdout");
    let mut err = child.take_stderr().expect("stderr");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    a.expect("stdout");
    b.expect("stderr");
    let status = child.wait().await.expect("waited");
    assert!(status.success(), "{status}: {stdout}\n{stderr}");
    (stdout, stderr)
}

/// A server on the host's loopback, as a database in a dev set-up: every
/// connection it accepts gets `secret` and is counted.
struct HostServer {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HostServer {
    fn start(greeting: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut stream = stream;
                let _ = stream.write_all(greeting.as_bytes());
            }
        });
        Self { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A bash function: `tunnel <host:port>` prints `<host:port> <status>` for a
/// CONNECT through the proxy, and the reason line when refused.
const TUNNEL: &str = r#"
tunnel() {
  exec 3<>/dev/tcp/127.0.0.1/3128 || { echo "$1 no-proxy"; return; }
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  read -r _ code _ <&3
  echo "$1 $code"
  if [ "$code" != 200 ]; then
    while read -r line <&3; do case "$line" in chorus-sandbox:*) echo "  $line";; esac; done
  fi
  exec 3<&-
}
"#;

async fn the_hosts_loopback_is_out_of_reach_directly_and_through_the_proxy(tier: Tier) {
    let sandbox = support::sandbox_in(tier).await;
    let (_top, ws) = workspace();
    let db = HostServer::start("secret");
    let port = db.port;
    // Rules naming the loopback itself: an address check refuses them all the
    // same (rules never open the host's loopback or link-local addresses).
    let allow = [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        "169.254.169.254:80".to_owned(),
    ];
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let script = format!(
        "{TUNNEL}
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo direct-reached || echo direct-refused
         for target in 127.0.0.1:{port} localhost:{port} localhost.:{port} '[::1]:{port}' \
             '[::ffff:127.0.0.1]:{port}' '[::ffff:7f00:1]:{port}' 169.254.169.254:80 \
             2130706433:{port} 0177.0.0.1:{port} 127.1:{port} 0x7f000001:{port} 0.0.0.0:{port}; do
           tunnel \"$target\"
         done
         curl -s --noproxy '' -o /dev/null -w 'curl %{{http_code}}\\n' http://127.0.0.1:{port}/ || true
         echo \"proxy=$HTTPS_PROXY\""
    );
    let (stdout, stderr) = run(&sandbox, &proxied(&ws, &allow, Vec::new(), &script)).await;
    assert!(stdout.contains("direct-refused"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("direct-reached"), "{stdout}");
    let codes: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with(' ') && l.contains(':') && !l.starts_with("proxy="))
        .collect();
    assert_eq!(codes.len(), 12, "{stdout}");
    for line in &codes {
        assert!(
            line.ends_with(" 403") || line.ends_with(" 400"),
            "reached or not refused: {line}\n{stdout}"
        );
    }
    assert!(stdout.contains("a loopback address"), "{stdout}");
    assert!(stdout.contains("link-local"), "{stdout}");
    assert!(stdout.contains("dotted decimal"), "{stdout}");
    // curl through the proxy (absolute form) is refused the same way.
    assert!(stdout.contains("curl 403"), "{stdout}");
    assert!(stdout.contains("proxy=http://127.0.0.1:3128"), "{stdout}");
    assert_eq!(db.accepted(), 0, "the database was reached:\n{stdout}");
}

async fn an_allowed_destination_is_reached_and_nothing_else(tier: Tier) {
    if !chorus_sandbox::testing::root_for("a test network namespace") {
        return;
    }
    let sandbox = support::sandbox_in(tier).await;
    let (_top, ws) = workspace();
    let files = tempfile::tempdir().expect("tempdir");
    std::fs::write(files.path().join("hello.txt"), "hello from outside\n").expect("write");
    let mut net = TestNet::create();
    let ip = net.ip;
    net.serve_files(files.path(), 8080).await;
    let rule = format!("{ip}:8080");
    let script = format!(
        "{TUNNEL}
         curl -sS http://{ip}:8080/hello.txt
         curl -sS -p http://{ip}:8080/hello.txt
         tunnel {ip}:8081
         tunnel {ip}:22
         tunnel example.com:443
         (exec 3<>/dev/tcp/{ip}/8080) 2>/dev/null && echo direct-reached || echo direct-refused"
    );
    let (stdout, stderr) = run(&sandbox, &proxied(&ws, &[&rule], Vec::new(), &script)).await;
    assert_eq!(
        stdout.matches("hello from outside").count(),
        2,
        "absolute form and CONNECT both reach it:\n{stdout}\n{stderr}"
    );
    for refused in [
        format!("{ip}:8081 403"),
        format!("{ip}:22 403"),
        "example.com:443 403".to_owned(),
    ] {
        assert!(stdout.contains(&refused), "{refused}:\n{stdout}");
    }
    assert!(
        stdout.contains(&format!("the agent's egress list allows only {rule}")),
        "{stdout}"
    );
    assert!(stdout.contains("direct-refused"), "{stdout}");

    // The same server is private: without a rule naming it, nothing.
    let (stdout, _) = run(
        &sandbox,
        &proxied(&ws, &[], Vec::new(), &format!("{TUNNEL} tunnel {ip}:8080")),
    )
    .await;
    assert!(stdout.contains(&format!("{ip}:8080 403")), "{stdout}");
    assert!(stdout.contains("egress list is empty"), "{stdout}");
}

async fn forwards_reach_exactly_their_target(tier: Tier) {
    let sandbox = support::sandbox_in(tier).await;
    let (_top, ws) = workspace();
    let service = HostServer::start("service");
    let other = HostServer::start("other");
    let forwards = vec![Forward {
        listen: format!("127.0.0.1:{}", service.port).parse().expect("addr"),
        connect: format!("127.0.0.1:{}", service.port),
    }];
    let script = format!(
        "{TUNNEL}
         exec 4<>/dev/tcp/127.0.0.1/{service_port} && head -c 7 <&4; echo
         (exec 3<>/dev/tcp/127.0.0.1/{other_port}) 2>/dev/null && echo other-reached || echo other-refused
         tunnel 127.0.0.1:{other_port}
         echo \"no_proxy=$NO_PROXY\"",
        service_port = service.port,
        other_port = other.port
    );
    let (stdout, stderr) = run(&sandbox, &proxied(&ws, &[], forwards, &script)).await;
    assert!(stdout.starts_with("service\n"), "{stdout}\n{stderr}");
    assert!(stdout.contains("other-refused"), "{stdout}");
    assert!(
        stdout.contains(&format!("127.0.0.1:{} 403", other.port)),
        "{stdout}"
    );
    assert!(
        stdout.contains("no_proxy=localhost,127.0.0.1,::1"),
        "{stdout}"
    );
    assert_eq!(service.accepted(), 1);
    assert_eq!(other.accepted(), 0);
}

async fn udp_leaves_neither_a_proxied_nor_an_unnetworked_sandbox(tier: Tier) {
    let sandbox = support::sandbox_in(tier).await;
    let (_top, ws) = workspace();
    let host = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let port = host.local_addr().expect("addr").port();
    // Outside the host: an address in a namespace of the test's own.
    let net = root().then(TestNet::create);
    let outside = net.as_ref().map_or_else(String::new, |net| {
        format!(
            "python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"leaked\", (\"{}\", 9999))' 2>&1 | tail -1; ",
            net.ip
        )
    });
    let script = format!("echo leaked > /dev/udp/127.0.0.1/{port}; {outside}echo sent");
    for network in [proxied(&ws, &[], Vec::new(), "").network, Network::None] {
        let spec = ProcessSpec {
            network: network.clone(),
            ..proxied(&ws, &[], Vec::new(), &script)
        };
        let (stdout, stderr) = run(&sandbox, &spec).await;
        assert!(
            stdout.ends_with("sent\n"),
            "{network:?}: {stdout}\n{stderr}"
        );
        if net.is_some() {
            // The seccomp filter refuses the socket itself; without it the
            // namespace has no route out.
            assert!(
                stdout.contains("Operation not permitted")
                    || stdout.contains("Network is unreachable"),
                "{network:?}: {stdout}"
            );
        }
    }
    // Loopback delivery is immediate: had a datagram reached the host's
    // socket, it would be queued before this one.
    let sender = UdpSocket::bind("127.0.0.1:0").expect("udp");
    sender
        .send_to(b"marker", ("127.0.0.1", port))
        .expect("send");
    let mut buf = [0u8; 64];
    let n = host.recv(&mut buf).expect("recv");
    assert_eq!(&buf[..n], b"marker");
}

async fn an_invalid_forward_is_refused_before_anything_starts(tier: Tier) {
    let sandbox = support::sandbox_in(tier).await;
    let (_top, ws) = workspace();
    let spec = proxied(
        &ws,
        &[],
        vec![Forward {
            listen: "10.1.2.3:80".parse().expect("addr"),
            connect: "127.0.0.1:1".to_owned(),
        }],
        "echo started",
    );
    let mut child = sandbox.spawn(&spec).expect("spawned");
    let mut out = String::new();
    let mut err = String::new();
    child
        .take_stdout()
        .expect("stdout")
        .read_to_string(&mut out)
        .await
        .expect("stdout");
    child
        .take_stderr()
        .expect("stderr")
        .read_to_string(&mut err)
        .await
        .expect("stderr");
    let status = child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(125), "{out}{err}");
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(out.is_empty());
}

/// The same tests, in both tiers, by a service that is not root.
#[test]
fn the_proxy_holds_for_a_service_that_is_not_root() {
    support::again_as_nobody("holds_for_a_service_that_is_not_root");
}
