//! `deploy/nftables/chorus-guard.nft`, loaded with `nft` as its header says
//! into a network namespace of the test's own, does what it promises: per
//! source address at most 64 connections open at once and 128 new ones in a
//! burst to Chorus's ports; other addresses, loopback's 127.0.0.1 and other
//! ports untouched. A refused connection's SYN is dropped (its client waits),
//! and the rule that dropped it counts it.
//!
//! Needs root (a network namespace, nftables) and `nft`. Without them the test
//! says so and passes, unless `CHORUS_TEST_REQUIRE_ROOT=1` (CI, which runs as
//! root and where `.ci/run` installs nftables): then it fails.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, getsockopt, socket, sockopt,
};

const RECIPE: &str = "deploy/nftables/chorus-guard.nft";
/// The recipe's limits, as its header states them.
const MAX_OPEN: usize = 64;
const BURST: usize = 128;

fn nft_found() -> bool {
    let found = Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CHORUS_TEST_REQUIRE_ROOT").as_deref() != Ok("1"),
            "CHORUS_TEST_REQUIRE_ROOT=1 but nft is not on PATH: install nftables (apt-get install nftables; .ci/run does)"
        );
        eprintln!("not run: nft is not on PATH (apt-get install nftables)");
    }
    found
}

/// Runs a command in the calling thread's namespaces; panics with its output
/// when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How many packets the recipe's rule with `comment` has dropped.
fn dropped(comment: &str) -> u64 {
    let table = run("nft", &["list", "table", "inet", "chorus_guard"]);
    table
        .lines()
        .filter(|line| line.contains(&format!("comment \"{comment}\"")))
        .filter_map(|line| {
            let (_, after) = line.split_once("counter packets ")?;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A TCP socket bound to `from`, connecting to 127.0.0.1:`port` without
/// waiting.
fn start_connect(from: Ipv4Addr, port: u16) -> OwnedFd {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("a socket");
    let local = SockaddrIn::from(SocketAddrV4::new(from, 0));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &local).expect("bind the source address");
    let target = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    match connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &target) {
        Ok(()) | Err(Errno::EINPROGRESS) => fd,
        Err(e) => panic!("connect from {from}: {e}"),
    }
}

/// Whether the connection of `fd` is established, at once (no wait).
fn established(fd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
    let ready = poll(&mut fds, PollTimeout::ZERO).expect("poll");
    ready == 1 && getsockopt(fd, sockopt::SocketError).expect("SO_ERROR") == 0
}

/// Connects from `from` and waits for the outcome, as signals: the
/// connection established (true), or the rule with `comment` counting one
/// more dropped SYN than `before` (false).
fn connects(from: Ipv4Addr, port: u16, comment: &str) -> (bool, OwnedFd) {
    let before = dropped(comment);
    let fd = start_connect(from, port);
    for _ in 0..10_000 {
        if established(&fd) {
            return (true, fd);
        }
        if dropped(comment) > before {
            return (false, fd);
        }
    }
    panic!("a connection from {from} was neither established nor dropped by \"{comment}\"");
}

/// Accepts every connection waiting on `listener` and closes it.
fn drain(listener: &TcpListener) -> usize {
    let mut n = 0;
    while listener.accept().is_ok() {
        n += 1;
    }
    n
}

#[test]
fn the_firewall_recipe_limits_each_address_and_leaves_others_alone() {
    if !chorus_sandbox::testing::root_for("loading nftables rules in a network namespace")
        || !nft_found()
    {
        return;
    }
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .join(RECIPE);
    // A thread of its own enters a new network namespace: the rules and the
    // connections never touch the host's.
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNET).expect("a network namespace of the test's own");
        run("ip", &["link", "set", "lo", "up"]);
        let chorus = TcpListener::bind("127.0.0.1:0").expect("a Chorus port");
        let tool_exec = TcpListener::bind("127.0.0.1:0").expect("a second Chorus port");
        let other = TcpListener::bind("127.0.0.1:0").expect("a port of something else");
        for l in [&chorus, &other] {
            l.set_nonblocking(true).expect("nonblocking");
        }
        let port = |l: &TcpListener| l.local_addr().expect("its address").port();
        let (p, q, o) = (port(&chorus), port(&tool_exec), port(&other));
        let recipe = recipe.to_str().expect("a UTF-8 path");
        let load = |args: &[&str]| run("nft", args);
        let defines = [
            "-D".to_owned(),
            format!("ORCHESTRATOR_PORT={p}"),
            "-D".to_owned(),
            format!("TOOL_EXEC_PORT={q}"),
            "-f".to_owned(),
            recipe.to_owned(),
        ];
        let defines: Vec<&str> = defines.iter().map(String::as_str).collect();
        load(&defines);
        // Loading it again replaces it (no second table, no error).
        load(&defines);

        // One address: 64 open at once, the next one's SYN dropped.
        let attacker = Ipv4Addr::new(127, 0, 0, 2);
        let mut open = Vec::new();
        for i in 0..MAX_OPEN {
            let (ok, fd) = connects(attacker, p, "too many open");
            assert!(ok, "connection {} of {attacker} refused", i + 1);
            open.push(fd);
        }
        let (ok, waiting) = connects(attacker, p, "too many open");
        assert!(
            !ok,
            "a 65th connection from {attacker} was established: the recipe must drop it"
        );
        assert!(!established(&waiting), "the dropped one stays unanswered");
        assert_eq!(drain(&chorus), MAX_OPEN, "Chorus saw the 64 only");

        // Another address, loopback's own and another port: not limited by it.
        let (ok, _other_address) = connects(Ipv4Addr::new(127, 0, 0, 3), p, "too many open");
        assert!(
            ok,
            "another address is not limited by the first one's connections"
        );
        let mut local = Vec::new();
        for _ in 0..(MAX_OPEN + 36) {
            let (ok, fd) = connects(Ipv4Addr::LOCALHOST, p, "too many open");
            assert!(ok, "127.0.0.1 (agents on the host) is not limited");
            local.push(fd);
            // Kept open on the client's side; the listener's queue emptied.
            drain(&chorus);
        }
        for _ in 0..(MAX_OPEN + 6) {
            let (ok, fd) = connects(attacker, o, "too many open");
            assert!(ok, "a port that is not Chorus's is not limited");
            local.push(fd);
        }
        drain(&other);

        // New connections of one address, each closed at once: a burst of
        // 128, then dropped until the rate lets more through.
        let churner = Ipv4Addr::new(127, 0, 0, 4);
        let mut made = 0;
        let refused = loop {
            let (ok, fd) = connects(churner, p, "too many new");
            if !ok {
                break fd;
            }
            made += 1;
            drain(&chorus);
            drop(fd);
            assert!(
                made < 4 * BURST,
                "{made} new connections in a row were never limited"
            );
        };
        assert!(
            made >= BURST,
            "only {made} new connections passed before one was dropped: the burst is {BURST}"
        );
        assert!(!established(&refused));
    })
    .join()
    .expect("the namespace's checks");
}
