//! The network of a landlock-tier sandbox: without a network namespace of its
//! own, the sandbox shares the service's network, so the launcher answers
//! every `connect`, `bind` and `listen` of the sandbox itself (a seccomp
//! filter that hands those calls to it: user notification).
//!
//! What it allows is what a namespace-tier sandbox could reach:
//!
//! - **connect** to the proxy's and the forwards' addresses (those a
//!   namespace-tier sandbox has on its own loopback) goes to the listeners
//!   the launcher bound for them; to an address the sandbox itself bound —
//!   that address and port exactly, kept bound by the launcher until the
//!   sandbox ends, so nothing else can take it — as asked; anything else is
//!   refused (ENETUNREACH, or ECONNREFUSED for loopback) — the same answers a
//!   sandbox with only a loopback gets;
//! - **bind** of an IPv4 or IPv6 socket: to a loopback address only (the
//!   unspecified address becomes loopback), so nothing outside the host can
//!   connect in;
//! - **listen**: on a socket the launcher bound only (an unbound socket would
//!   be bound by the kernel to every address).
//!
//! The launcher never lets the kernel go on with a call whose address it
//! read (another thread of the process could change it in between): it makes
//! a socket itself, connects or binds it, and puts it in place of the
//! program's (`SECCOMP_IOCTL_NOTIF_ADDFD`), then answers the call. Only Unix
//! sockets' calls go on as the program made them: a swap to a TCP socket
//! in between meets Landlock's TCP rules, which allow no port at all.
//!
//! It reads the address from `/proc/<pid>/mem` (the monitor is an ancestor
//! of every process of the sandbox, which is what ptrace's rules ask), and
//! checks that the call is still waiting before it uses what it read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect, getsockname, getsockopt,
    listen, setsockopt, socket, sockopt,
};

/// How long the launcher waits for a connection it makes for a program
/// whose socket blocks.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Most sockets bound for a sandbox and not yet listening, kept here.
const MAX_BOUND: usize = 256;
/// Most listening sockets of a sandbox held here (beyond them, an address
/// is the sandbox's only while its program holds the socket).
const MAX_LISTENING: usize = 1024;

/// The calls that signal another process by its pid, or open one (the
/// launcher answers them where Landlock cannot scope signals).
const SIGNAL_CALLS: [libc::c_long; 6] = [
    libc::SYS_kill,
    libc::SYS_tkill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_pidfd_open,
];

/// In the leader, last of its filters: hands `connect`, `bind` and `listen`
/// (and, with `gate_signals`, the calls that signal or open another process)
/// to the launcher. Returns the listener descriptor the monitor answers on.
///
/// # Errors
/// The kernel refused the filter (before 5.0 there is no user notification;
/// a runtime's own notifying filter makes it EBUSY).
pub fn install(gate_signals: bool) -> Result<OwnedFd, String> {
    use super::bpf::{ARCH, AUDIT_ARCH, NR, jump, load, ret};
    let mut handed = vec![libc::SYS_connect, libc::SYS_bind, libc::SYS_listen];
    if gate_signals {
        handed.extend(SIGNAL_CALLS);
    }
    let count = u8::try_from(handed.len()).unwrap_or(u8::MAX);
    // Another architecture: allowed here (the deny list kills it).
    let mut program = vec![
        load(ARCH),
        jump(libc::BPF_JEQ, AUDIT_ARCH, 1, 0),
        ret(libc::SECCOMP_RET_ALLOW),
        load(NR),
    ];
    for (i, nr) in handed.iter().enumerate() {
        // Equal: skip the rest of the comparisons and the "allow".
        let skip = count - u8::try_from(i).unwrap_or(0);
        program.push(jump(
            libc::BPF_JEQ,
            u32::try_from(*nr).unwrap_or(u32::MAX),
            skip,
            0,
        ));
    }
    program.push(ret(libc::SECCOMP_RET_ALLOW));
    program.push(ret(libc::SECCOMP_RET_USER_NOTIF));
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap_or(u16::MAX),
        filter: program.as_ptr().cast_mut().cast(),
    };
    // SAFETY: seccomp(2) reads `prog`, which points at `program`, alive for
    // the call; it returns a new descriptor or -1.
    #[allow(unsafe_code)]
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &raw const prog,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot install the filter that hands network calls to the launcher (seccomp user notification, Linux 5.9 or later): {}",
            io::Error::last_os_error()
        ));
    }
    let raw = RawFd::try_from(fd).map_err(|e| e.to_string())?;
    // SAFETY: the kernel just returned this descriptor to this process.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// What the launcher lets a sandbox reach, and what it bound for it.
pub struct Supervisor {
    listener: OwnedFd,
    /// Addresses the program connects to → where the launcher connects
    /// instead (the proxy's and the forwards' listeners).
    routes: HashMap<SocketAddr, SocketAddr>,
    /// The addresses the sandbox bound, each exactly (loopback, with its
    /// port): it may connect to them, and to no other loopback address.
    own: HashSet<SocketAddr>,
    /// Sockets bound for the sandbox and not yet listening, by inode, with
    /// their addresses.
    bound: VecDeque<(u64, OwnedFd, SocketAddr)>,
    /// The sandbox's listening sockets, held until it ends: the address
    /// stays the sandbox's even once its program closed its own descriptor.
    listening: Vec<OwnedFd>,
    /// The monitor, whose descendants (less `outside`) are the sandbox's
    /// processes: the only ones a signal of the sandbox may reach.
    monitor: nix::unistd::Pid,
    outside: Vec<nix::unistd::Pid>,
}

/// One call the kernel handed over.
struct Call {
    id: u64,
    pid: u32,
    nr: libc::c_long,
    args: [u64; 6],
}

/// The sandbox's processes, seen from the monitor when a call that signals
/// comes in: a signal reaches them only (EPERM for any other process).
struct Family {
    monitor: i32,
    members: HashSet<i32>,
}

impl Family {
    fn holds(&self, pid: i32) -> bool {
        pid != self.monitor && self.members.contains(&pid)
    }

    /// kill(2) from `caller`: one process, every process (-1) or a group.
    fn kill(&self, caller: i32, pid: i32, signal: i32) -> Result<(), Errno> {
        let targets: Vec<i32> = match pid {
            p if p > 0 => {
                if !self.holds(p) {
                    return Err(Errno::EPERM);
                }
                vec![p]
            }
            -1 => self
                .members
                .iter()
                .copied()
                .filter(|p| *p != caller && self.holds(*p))
                .collect(),
            group => {
                let group = if group == 0 {
                    super::tree::group_of(caller).unwrap_or(0)
                } else {
                    -group
                };
                let members: Vec<i32> = self
                    .members
                    .iter()
                    .copied()
                    .filter(|p| self.holds(*p) && super::tree::group_of(*p) == Some(group))
                    .collect();
                if members.is_empty() && group > 0 && !self.holds(group) {
                    return Err(Errno::EPERM);
                }
                members
            }
        };
        let mut outcome = Err(Errno::ESRCH);
        for target in targets {
            if super::tree::send_number(target, &self.members, signal).is_ok() {
                outcome = Ok(());
            }
        }
        outcome
    }

    /// tgkill(2) (and tkill(2), whose process is looked up).
    fn tgkill(&self, process: i32, thread: i32, signal: i32) -> Result<(), Errno> {
        if !self.holds(process) || super::tree::process_of(thread) != Some(process) {
            return Err(Errno::EPERM);
        }
        // SAFETY: tgkill(2) reads no memory.
        #[allow(unsafe_code)]
        let done = unsafe { libc::syscall(libc::SYS_tgkill, process, thread, signal) };
        if done == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }
}

/// How the launcher answers a call.
enum Answer {
    /// Let the kernel make the call as the program asked.
    GoOn,
    /// Put `socket` at the program's descriptor, then return `result`.
    Replace {
        socket: OwnedFd,
        result: i32,
        /// Whether the program's descriptor was close-on-exec.
        cloexec: bool,
    },
    /// Return this (0 or a negative errno) without making the call.
    Return(i32),
}

impl Supervisor {
    /// `outside`: the monitor's children that are not of the sandbox (its
    /// egress proxy).
    pub fn new(
        listener: OwnedFd,
        routes: HashMap<SocketAddr, SocketAddr>,
        outside: Vec<nix::unistd::Pid>,
    ) -> Self {
        Self {
            listener,
            routes,
            own: HashSet::new(),
            bound: VecDeque::new(),
            listening: Vec::new(),
            monitor: nix::unistd::getpid(),
            outside,
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Receives one waiting call and answers it (a call whose process died
    /// meanwhile gets none).
    pub fn serve_one(&mut self) {
        let Some(call) = self.receive() else { return };
        if let Ok(answer) = self.answer(&call) {
            self.send(&call, answer);
        }
    }

    fn receive(&self) -> Option<Call> {
        // SAFETY: seccomp_notif is plain data; zeroed is what the kernel asks
        // for before SECCOMP_IOCTL_NOTIF_RECV.
        #[allow(unsafe_code)]
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `notif`.
        #[allow(unsafe_code)]
        let done = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &raw mut notif,
            )
        };
        (done == 0).then(|| Call {
            id: notif.id,
            pid: notif.pid,
            nr: libc::c_long::from(notif.data.nr),
            args: notif.data.args,
        })
    }

    /// Whether the call is still waiting (so what was read of its process
    /// belongs to it, not to a process that took its pid since).
    fn still_waiting(&self, id: u64) -> bool {
        // SAFETY: the ioctl reads the u64 at `id`.
        #[allow(unsafe_code)]
        let done = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &raw const id,
            )
        };
        done == 0
    }

    fn send(&self, call: &Call, answer: Answer) {
        let (error, flags) = match answer {
            Answer::GoOn => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE),
            Answer::Return(result) => (result, 0),
            Answer::Replace {
                socket,
                result,
                cloexec,
            } => {
                let target = u32::try_from(call.args[0] & 0xffff_ffff).unwrap_or(u32::MAX);
                let addfd = libc::seccomp_notif_addfd {
                    id: call.id,
                    flags: u32::try_from(libc::SECCOMP_ADDFD_FLAG_SETFD).unwrap_or(1),
                    srcfd: u32::try_from(socket.as_raw_fd()).unwrap_or(u32::MAX),
                    newfd: target,
                    newfd_flags: if cloexec {
                        u32::try_from(libc::O_CLOEXEC).unwrap_or(0)
                    } else {
                        0
                    },
                };
                // SAFETY: the ioctl reads one seccomp_notif_addfd.
                #[allow(unsafe_code)]
                let done = unsafe {
                    libc::ioctl(
                        self.listener.as_raw_fd(),
                        libc::SECCOMP_IOCTL_NOTIF_ADDFD,
                        &raw const addfd,
                    )
                };
                if done < 0 {
                    (-(Errno::last() as i32), 0)
                } else {
                    (result, 0)
                }
            }
        };
        let mut response = libc::seccomp_notif_resp {
            id: call.id,
            val: 0,
            error,
            flags: u32::try_from(flags).unwrap_or(0),
        };
        // SAFETY: the ioctl reads one seccomp_notif_resp.
        #[allow(unsafe_code)]
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &raw mut response,
            );
        }
    }

    fn answer(&mut self, call: &Call) -> Result<Answer, Gone> {
        match call.nr {
            libc::SYS_listen => self.on_listen(call),
            libc::SYS_connect | libc::SYS_bind => {
                let address = read_address(call)?;
                if !self.still_waiting(call.id) {
                    return Err(Gone);
                }
                let Some(address) = address else {
                    // Not an IPv4 or IPv6 address: a Unix socket's call.
                    return Ok(Answer::GoOn);
                };
                let flags = OpenFlags(fd_flags(call.pid, call.args[0]).unwrap_or(0));
                Ok(if call.nr == libc::SYS_connect {
                    self.on_connect(address, flags)
                } else {
                    self.on_bind(address, flags)
                })
            }
            nr if SIGNAL_CALLS.contains(&nr) => Ok(self.on_signal(call)),
            _ => Ok(Answer::Return(-libc::ENOSYS)),
        }
    }

    /// A call that signals (or opens) processes by pid: it reaches the
    /// sandbox's own processes only, as Landlock's signal scope would have it
    /// (EPERM for any other), and the launcher sends what it sends.
    fn on_signal(&self, call: &Call) -> Answer {
        let family = Family {
            monitor: self.monitor.as_raw(),
            members: super::tree::family(self.monitor, &self.outside),
        };
        // An `int` argument: its low 32 bits, signed.
        let int = |i: usize| {
            u32::try_from(call.args[i] & 0xffff_ffff)
                .unwrap_or(0)
                .cast_signed()
        };
        let caller = i32::try_from(call.pid).unwrap_or(0);
        let answer = |done: Result<(), Errno>| match done {
            Ok(()) => Answer::Return(0),
            Err(e) => Answer::Return(-(e as i32)),
        };
        match call.nr {
            libc::SYS_kill => answer(family.kill(caller, int(0), int(1))),
            libc::SYS_tkill => {
                let thread = int(0);
                let process = super::tree::process_of(thread).unwrap_or(0);
                answer(family.tgkill(process, thread, int(1)))
            }
            libc::SYS_tgkill => answer(family.tgkill(int(0), int(1), int(2))),
            // Their target is read here; what they send (a siginfo in the
            // program's memory) goes as the program made it.
            _ if family.holds(int(0)) => Answer::GoOn,
            _ => Answer::Return(-libc::EPERM),
        }
    }

    fn on_connect(&self, asked: SocketAddr, flags: OpenFlags) -> Answer {
        let to = if let Some(route) = self.routes.get(&asked) {
            *route
        } else if self.own.contains(&canonical(asked)) {
            asked
        } else if asked.ip().is_loopback() {
            return Answer::Return(-libc::ECONNREFUSED);
        } else {
            return Answer::Return(-libc::ENETUNREACH);
        };
        match connect_for(to, flags.nonblocking()) {
            Ok((socket, result)) => Answer::Replace {
                socket,
                result,
                cloexec: flags.cloexec(),
            },
            Err(e) => Answer::Return(-(e as i32)),
        }
    }

    fn on_bind(&mut self, asked: SocketAddr, flags: OpenFlags) -> Answer {
        let ip = match asked.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip if ip.is_loopback() => ip,
            _ => return Answer::Return(-libc::EADDRNOTAVAIL),
        };
        let address = SocketAddr::new(ip, asked.port());
        let made = new_socket(address, flags.nonblocking()).and_then(|socket| {
            setsockopt(&socket, sockopt::ReuseAddr, &true)?;
            bind(socket.as_raw_fd(), &SockaddrStorage::from(address))?;
            let local: SockaddrStorage = getsockname(socket.as_raw_fd())?;
            Ok((socket, local))
        });
        match made {
            Ok((socket, local)) => {
                let Some(local) = socket_address(&local) else {
                    return Answer::Return(-libc::EADDRNOTAVAIL);
                };
                let Ok(kept) = socket.try_clone() else {
                    return Answer::Return(-libc::EMFILE);
                };
                let Some(inode) = inode_of(&kept) else {
                    return Answer::Return(-libc::EMFILE);
                };
                if self.bound.len() == MAX_BOUND
                    && let Some((_, _, gone)) = self.bound.pop_front()
                {
                    // No longer held here: it is the sandbox's no more.
                    self.own.remove(&gone);
                }
                self.own.insert(canonical(local));
                self.bound.push_back((inode, kept, local));
                Answer::Replace {
                    socket,
                    result: 0,
                    cloexec: flags.cloexec(),
                }
            }
            Err(e) => Answer::Return(-(e as i32)),
        }
    }

    fn on_listen(&mut self, call: &Call) -> Result<Answer, Gone> {
        let link = std::fs::read_link(format!(
            "/proc/{}/fd/{}",
            call.pid,
            call.args[0] & 0xffff_ffff
        ));
        if !self.still_waiting(call.id) {
            return Err(Gone);
        }
        let inode = link.ok().and_then(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        });
        let Some(at) = inode.and_then(|i| self.bound.iter().position(|(b, ..)| *b == i)) else {
            // Not a socket the launcher bound: an unbound one would be bound
            // to every address, a Unix one is not offered.
            return Ok(Answer::Return(-libc::EACCES));
        };
        let Some((_, socket, address)) = self.bound.remove(at) else {
            return Ok(Answer::Return(-libc::EACCES));
        };
        let backlog = i32::try_from(call.args[1] & 0x7fff_ffff).unwrap_or(128);
        let backlog = nix::sys::socket::Backlog::new(backlog.clamp(1, 4096))
            .unwrap_or(nix::sys::socket::Backlog::MAXCONN);
        Ok(match listen(&socket, backlog) {
            Ok(()) => {
                if self.listening.len() < MAX_LISTENING {
                    self.listening.push(socket);
                } else {
                    // Not held: another process may take it once the
                    // sandbox's program closes its own.
                    self.own.remove(&canonical(address));
                }
                Answer::Return(0)
            }
            Err(e) => Answer::Return(-(e as i32)),
        })
    }
}

/// The call's process is gone.
struct Gone;

/// The IPv4 or IPv6 address a `connect` or `bind` passes, read from the
/// process's memory; None for another family.
fn read_address(call: &Call) -> Result<Option<SocketAddr>, Gone> {
    let len = usize::try_from(call.args[2].min(128)).unwrap_or(0);
    if len < 2 {
        return Ok(None);
    }
    let mem = std::fs::File::open(format!("/proc/{}/mem", call.pid)).map_err(|_| Gone)?;
    let mut bytes = vec![0u8; len];
    mem.read_exact_at(&mut bytes, call.args[1])
        .map_err(|_| Gone)?;
    let family = i32::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    Ok(match family {
        libc::AF_INET if len >= 8 => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7])),
            port(&bytes),
        )),
        libc::AF_INET6 if len >= 24 => {
            let octets: [u8; 16] = bytes[8..24].try_into().unwrap_or([0; 16]);
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(&bytes),
            ))
        }
        // A short IPv4 or IPv6 address: the kernel refuses it too.
        libc::AF_INET | libc::AF_INET6 => {
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
        }
        _ => None,
    })
}

/// The open flags of a program's descriptor (as `fdinfo` shows them).
#[derive(Debug, Clone, Copy)]
struct OpenFlags(u32);

impl OpenFlags {
    fn nonblocking(self) -> bool {
        self.0 & 0o4000 != 0
    }

    /// `fdinfo` shows close-on-exec as O_CLOEXEC.
    fn cloexec(self) -> bool {
        self.0 & 0o2_000_000 != 0
    }
}

/// The open flags of the process's descriptor (`/proc/<pid>/fdinfo`), in
/// which O_CLOEXEC stands for close-on-exec.
fn fd_flags(pid: u32, fd: u64) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd & 0xffff_ffff)).ok()?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
    u32::from_str_radix(flags.trim(), 8).ok()
}

fn new_socket(address: SocketAddr, nonblocking: bool) -> nix::Result<OwnedFd> {
    let family = if address.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let mut flags = SockFlag::SOCK_CLOEXEC;
    if nonblocking {
        flags |= SockFlag::SOCK_NONBLOCK;
    }
    socket(family, SockType::Stream, flags, None)
}

/// A socket connected to `to` (or, for a program whose socket does not
/// block, on its way: EINPROGRESS), and what the program's call returns.
fn connect_for(to: SocketAddr, nonblocking: bool) -> nix::Result<(OwnedFd, i32)> {
    let socket = new_socket(to, true)?;
    match connect(socket.as_raw_fd(), &SockaddrStorage::from(to)) {
        Ok(()) => {}
        Err(Errno::EINPROGRESS) if nonblocking => return Ok((socket, -libc::EINPROGRESS)),
        Err(Errno::EINPROGRESS) => {
            let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLOUT)];
            let wait = PollTimeout::try_from(CONNECT_WAIT).unwrap_or(PollTimeout::NONE);
            if poll(&mut fds, wait)? == 0 {
                return Err(Errno::ETIMEDOUT);
            }
            let error = getsockopt(&socket, sockopt::SocketError)?;
            if error != 0 {
                return Err(Errno::from_raw(error));
            }
        }
        Err(e) => return Err(e),
    }
    if !nonblocking {
        let flags = nix::fcntl::fcntl(&socket, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) - nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&socket, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    }
    Ok((socket, 0))
}

/// An IPv4 or IPv6 socket address as the standard library's.
fn socket_address(address: &SockaddrStorage) -> Option<SocketAddr> {
    address
        .as_sockaddr_in()
        .map(|a| SocketAddr::from(std::net::SocketAddrV4::from(*a)))
        .or_else(|| {
            address
                .as_sockaddr_in6()
                .map(|a| SocketAddr::from(std::net::SocketAddrV6::from(*a)))
        })
}

/// One spelling of an address: an IPv4-mapped IPv6 address as IPv4.
fn canonical(address: SocketAddr) -> SocketAddr {
    match address.ip() {
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), address.port()),
            None => address,
        },
        IpAddr::V4(_) => address,
    }
}

fn inode_of(socket: &OwnedFd) -> Option<u64> {
    let file = std::fs::File::from(socket.try_clone().ok()?);
    file.metadata().ok().map(|m| m.ino())
}
