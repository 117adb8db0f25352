//! The network of a sandbox without network access: its own namespace, where
//! only the loopback interface exists; it is brought up so that programs can
//! still talk to themselves (a test server on 127.0.0.1).

use std::os::fd::AsRawFd;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

/// Brings up `lo` in the current network namespace.
pub fn loopback_up() -> std::io::Result<()> {
    let socket = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: an all-zero ifreq is a valid value of this plain C struct.
    #[allow(unsafe_code)]
    let mut request: nix::libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = nix::libc::c_char::from_ne_bytes([*byte]);
    }
    #[allow(clippy::cast_possible_truncation)]
    let flags = (nix::libc::IFF_UP | nix::libc::IFF_LOOPBACK | nix::libc::IFF_RUNNING) as i16;
    request.ifr_ifru.ifru_flags = flags;
    // SAFETY: SIOCSIFFLAGS reads a struct ifreq; `request` is one, alive for
    // the call, and the descriptor is an open socket.
    #[allow(unsafe_code)]
    let done = unsafe {
        nix::libc::ioctl(
            socket.as_raw_fd(),
            nix::libc::SIOCSIFFLAGS,
            std::ptr::from_mut(&mut request),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
