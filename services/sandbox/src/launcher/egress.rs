//! The launcher's side of a proxied network ([`Network::Proxied`]).
//!
//! The sandbox gets a network namespace of its own, as without network; its
//! one way out is a proxy outside it:
//!
//! 1. the monitor, still single-threaded and before it creates the PID
//!    namespace, forks the **proxy process** with one end of a socket pair.
//!    A separate process, because the proxy needs threads (its runtime, name
//!    resolution) and, after `unshare(CLONE_NEWPID)`, the monitor can make
//!    none (the kernel refuses `CLONE_THREAD` once the namespace for children
//!    differs from the process's own; `CLONE_NEWUSER` wants a single-threaded
//!    caller too). It stays in the host's namespaces, as the service's user,
//!    dies with the monitor, and the monitor kills it when init is gone;
//! 2. init, inside the new network namespace (loopback up), binds the proxy's
//!    listener at [`PROXY_ADDR`] and one per forward, and sends them over the
//!    pair (`SCM_RIGHTS`) before it starts the program. The sockets stay in
//!    the sandbox's namespace: connecting to them from inside reaches the
//!    proxy, and the proxy's own connections leave from the host's network;
//! 3. the proxy process serves them (see [`super::proxy`]).
//!
//! The program's environment points every usual proxy variable at the proxy
//! (`HTTP(S)_PROXY`, `ALL_PROXY`, lower case too) and leaves the forwards'
//! addresses out (`NO_PROXY`). For programs that take no proxy variable
//! (git's `git://` and ssh transports), the launcher itself is a CONNECT
//! client: `chorus-sandbox connect <host> <port>` (ssh's ProxyCommand), or
//! `chorus-sandbox <host> <port>` (how git calls `GIT_PROXY_COMMAND`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::signal::{Signal, kill};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, getpid, getppid};

use super::proxy;
use crate::egress::{EgressRule, Forward, MAX_FORWARDS, PROXY_ADDR};
use crate::policy::{MESSAGE_PREFIX, Network, Policy};

/// The proxy process, as the monitor knows it.
#[derive(Debug)]
pub struct Proxy {
    pid: Pid,
}

impl Proxy {
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Kills the proxy process and waits for it.
    pub fn stop(&self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// In the monitor: for a proxied policy, starts the proxy process and
/// returns it with the end of the pair init sends the listeners on.
///
/// # Errors
/// The policy's forwards are not valid, or the process could not start.
pub fn start(
    policy: &Policy,
    questions: Option<OwnedFd>,
) -> Result<Option<(Proxy, OwnedFd)>, String> {
    let Network::Proxied { allow, forwards } = &policy.network else {
        return Ok(None);
    };
    check_forwards(forwards)?;
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| format!("cannot make a socket pair: {e}"))?;
    let monitor = getpid();
    // SAFETY: the monitor is single-threaded (the launcher starts no thread
    // in it), so the child may do anything after fork.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    match forked {
        Ok(ForkResult::Child) => {
            drop(theirs);
            serve(&ours, policy, allow, forwards, monitor, questions)
        }
        // Only the proxy keeps the channel of questions: nothing forked
        // from here (init, the program) ever holds it.
        Ok(ForkResult::Parent { child }) => {
            drop(questions);
            Ok(Some((Proxy { pid: child }, theirs)))
        }
        Err(e) => Err(format!("cannot start the egress proxy: {e}")),
    }
}

/// The channel of questions the service gave (descriptor `fd`, see
/// [`crate::questions`]), owned from here on; it must be a stream socket.
///
/// # Errors
/// `fd` is not an open stream socket past the standard streams.
pub fn questions_channel(fd: RawFd) -> Result<OwnedFd, String> {
    let bad = |why: String| format!("the policy's channel of questions (descriptor {fd}) {why}");
    if fd < 3 {
        return Err(bad("is a standard stream".to_owned()));
    }
    // SAFETY: the descriptor is only looked at here; it is owned below
    // once it is known to be open.
    #[allow(unsafe_code)]
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let kind = nix::sys::stat::fstat(borrowed).map_err(|e| bad(format!("is not open: {e}")))?;
    if kind.st_mode & nix::libc::S_IFMT != nix::libc::S_IFSOCK {
        return Err(bad("is not a socket".to_owned()));
    }
    // SAFETY: `fd` is open (fstat succeeded) and the launcher inherited it
    // for this use alone: nothing else in this process refers to it.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let kind: SockType = nix::sys::socket::getsockopt(&owned, nix::sys::socket::sockopt::SockType)
        .map_err(|e| bad(format!("is not a socket: {e}")))?;
    if kind != SockType::Stream {
        return Err(bad("is not a stream socket".to_owned()));
    }
    Ok(owned)
}

/// Forwards listen on distinct loopback addresses, never the proxy's.
fn check_forwards(forwards: &[Forward]) -> Result<(), String> {
    if forwards.len() > MAX_FORWARDS {
        return Err(format!("more than {MAX_FORWARDS} forwards"));
    }
    for (i, forward) in forwards.iter().enumerate() {
        if !forward.listen.ip().is_loopback() {
            return Err(format!(
                "a forward listens on {}, which is not a loopback address",
                forward.listen
            ));
        }
        if forward.listen == PROXY_ADDR || forwards[..i].iter().any(|f| f.listen == forward.listen)
        {
            return Err(format!("two listeners on {}", forward.listen));
        }
    }
    Ok(())
}

/// The proxy process: waits for the listeners, then serves them until it is
/// killed (by the monitor, or by its parent-death signal).
fn serve(
    channel: &OwnedFd,
    policy: &Policy,
    allow: &[EgressRule],
    forwards: &[Forward],
    monitor: Pid,
    questions: Option<OwnedFd>,
) -> ! {
    let fatal = |message: String| -> ! {
        eprintln!("{MESSAGE_PREFIX}the egress proxy stopped: {message}");
        std::process::exit(1)
    };
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid() != monitor {
        std::process::exit(1);
    }
    // Nothing of the program's output passes here.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
    let mut listeners = match receive(channel, 1 + forwards.len()) {
        Ok(Some(listeners)) => listeners.into_iter(),
        // init did not get as far: nothing to serve.
        Ok(None) => std::process::exit(0),
        Err(e) => fatal(format!("cannot receive the listeners: {e}")),
    };
    // It needs nothing of root: a root service's proxy runs as the sandbox's
    // user, without capabilities (a service that is not root has none to
    // give up), and cannot be traced or read by anything of that user.
    if nix::unistd::geteuid().is_root()
        && let Err(e) = super::confine::identity(policy.identity)
    {
        fatal(format!("cannot switch to the sandbox's user: {e}"));
    }
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid() != monitor {
        std::process::exit(1);
    }
    let _ = nix::sys::prctl::set_dumpable(false);
    let Some(proxy_listener) = listeners.next() else {
        fatal("no listener".to_owned())
    };
    let forwards = listeners
        .zip(forwards)
        .map(|(listener, forward)| (TcpListener::from(listener), forward.connect.clone()))
        .collect();
    let rules = proxy::Rules {
        allow: allow.to_vec(),
        local: local_addresses(),
        questions,
    };
    match proxy::run(TcpListener::from(proxy_listener), forwards, rules) {
        Ok(()) => std::process::exit(0),
        Err(e) => fatal(e.to_string()),
    }
}

/// Receives `count` descriptors in one message; None when the other end
/// closed without sending.
fn receive(channel: &OwnedFd, count: usize) -> nix::Result<Option<Vec<OwnedFd>>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1 + MAX_FORWARDS]);
    let message = recvmsg::<()>(
        channel.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if message.bytes == 0 {
        return Ok(None);
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            for fd in raw {
                // SAFETY: the kernel installed `fd` in this process's table for
                // this message (SCM_RIGHTS); nothing else refers to it, so this
                // value becomes its only owner.
                #[allow(unsafe_code)]
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if fds.len() == count {
        Ok(Some(fds))
    } else {
        Err(nix::errno::Errno::EPROTO)
    }
}

/// In init, inside the sandbox's network namespace: binds the proxy's
/// listener and the forwards' and hands them to the proxy process.
///
/// # Errors
/// A listener could not be bound, or the hand-over failed.
pub fn hand_over(policy: &Policy, channel: OwnedFd) -> Result<(), String> {
    let Network::Proxied { forwards, .. } = &policy.network else {
        return Ok(());
    };
    let mut listeners = Vec::with_capacity(1 + forwards.len());
    for address in std::iter::once(PROXY_ADDR).chain(forwards.iter().map(|f| f.listen)) {
        let listener =
            TcpListener::bind(address).map_err(|e| format!("cannot listen on {address}: {e}"))?;
        listeners.push(listener);
    }
    // The proxy process holds them then; nothing of them stays here.
    send_listeners(&channel, &listeners)
}

/// In a landlock-tier monitor, which shares the service's network: binds the
/// proxy's and the forwards' listeners on loopback at ports the kernel picks
/// and hands them to the proxy process. Returns where each address a
/// namespace-tier sandbox would have on its own loopback really is (the
/// launcher connects the program there, see `notify`).
///
/// # Errors
/// A listener could not be bound, or the hand-over failed.
pub fn hand_over_shared(
    policy: &Policy,
    channel: OwnedFd,
) -> Result<HashMap<SocketAddr, SocketAddr>, String> {
    let Network::Proxied { forwards, .. } = &policy.network else {
        return Ok(HashMap::new());
    };
    let mut listeners = Vec::with_capacity(1 + forwards.len());
    let mut routes = HashMap::new();
    for address in std::iter::once(PROXY_ADDR).chain(forwards.iter().map(|f| f.listen)) {
        let loopback = match address.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        let listener = TcpListener::bind(SocketAddr::new(loopback, 0))
            .map_err(|e| format!("cannot listen on {loopback}: {e}"))?;
        let real = listener
            .local_addr()
            .map_err(|e| format!("cannot read a listener's address: {e}"))?;
        routes.insert(address, real);
        listeners.push(listener);
    }
    send_listeners(&channel, &listeners)?;
    Ok(routes)
}

fn send_listeners(channel: &OwnedFd, listeners: &[TcpListener]) -> Result<(), String> {
    let raw: Vec<RawFd> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    sendmsg::<()>(
        channel.as_raw_fd(),
        &[IoSlice::new(b"L")],
        &[ControlMessage::ScmRights(&raw)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| format!("cannot hand the listeners to the egress proxy: {e}"))?;
    Ok(())
}

/// The variables a proxied program gets on top of its environment.
pub fn program_env(network: &Network) -> Vec<(OsString, OsString)> {
    let Network::Proxied { forwards, .. } = network else {
        return Vec::new();
    };
    let url = format!("http://{PROXY_ADDR}");
    let mut direct = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    for forward in forwards {
        let ip = match forward.listen.ip() {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => ip.to_string(),
        };
        if !direct.contains(&ip) {
            direct.push(ip);
        }
    }
    let direct = direct.join(",");
    let mut env: Vec<(OsString, OsString)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .iter()
    .map(|name| ((*name).into(), url.clone().into()))
    .collect();
    env.push(("NO_PROXY".into(), direct.clone().into()));
    env.push(("no_proxy".into(), direct.into()));
    env
}

/// The addresses of the host's interfaces (the proxy treats them as private).
fn local_addresses() -> Vec<IpAddr> {
    let Ok(addresses) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addresses
        .filter_map(|a| a.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

/// Copies until end of input, each read passed on at once. (Not
/// `std::io::copy`: between a socket and a pipe it splices, and a splice from
/// a blocking socket waits for its whole length, so a request and its answer
/// would wait on each other.)
fn pump(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// `chorus-sandbox [connect] <host> <port>`: a CONNECT client of the proxy
/// on stdin and stdout, for ssh's ProxyCommand and git's GIT_PROXY_COMMAND.
pub fn connect_main(host: &str, port: &str) -> ! {
    let fail = |message: String| -> ! {
        eprintln!("{MESSAGE_PREFIX}{message}");
        std::process::exit(1)
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut proxy = TcpStream::connect(PROXY_ADDR).unwrap_or_else(|e| {
        fail(format!(
            "cannot reach the egress proxy at {PROXY_ADDR} (is this a sandbox with network?): {e}"
        ))
    });
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    if let Err(e) = proxy.write_all(request.as_bytes()) {
        fail(format!("cannot talk to the egress proxy: {e}"));
    }
    // Byte by byte: nothing of the tunnel is read past the head.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match proxy.read(&mut byte) {
            Ok(1) if head.len() < proxy::MAX_HEAD => head.push(byte[0]),
            _ => fail("the egress proxy closed the connection".to_owned()),
        }
    }
    let status = String::from_utf8_lossy(&head);
    if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
        let mut body = String::new();
        let _ = proxy.take(1024).read_to_string(&mut body);
        let line = status.lines().next().unwrap_or_default();
        fail(format!("{authority}: {line}: {}", body.trim()));
    }
    let Ok(mut from_proxy) = proxy.try_clone() else {
        fail("cannot duplicate a socket".to_owned())
    };
    // Unbuffered: std's stdout holds bytes back until a newline, and git's
    // protocol is not lines.
    let Ok(stdout) = std::io::stdout().as_fd().try_clone_to_owned() else {
        fail("cannot duplicate stdout".to_owned())
    };
    let reader = std::thread::spawn(move || {
        pump(&mut from_proxy, &mut std::fs::File::from(stdout));
    });
    let Ok(stdin) = std::io::stdin().as_fd().try_clone_to_owned() else {
        fail("cannot duplicate stdin".to_owned())
    };
    pump(&mut std::fs::File::from(stdin), &mut proxy);
    let _ = proxy.shutdown(Shutdown::Write);
    let _ = reader.join();
    std::process::exit(0)
}
