//! Signals and inherited descriptors of the launcher's processes.
//!
//! The monitor and init take signals synchronously: every signal they act on is
//! blocked and fetched with `sigwait`. The program gets an empty mask and
//! default dispositions (Rust programs start with SIGPIPE ignored, and an
//! ignored signal stays ignored across exec).

use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, raise, sigprocmask};

/// The signals the monitor and init wait for.
const HANDLED: [Signal; 6] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
];

/// Blocks the handled signals; returns the set to wait on.
pub fn block() -> SigSet {
    let mut set = SigSet::empty();
    for signal in HANDLED {
        set.add(signal);
    }
    if let Err(e) = set.thread_block() {
        super::fail(&format!("cannot block signals: {e}"));
    }
    set
}

/// In the leader, before exec: every signal unblocked and at its default.
pub fn reset_for_exec() -> nix::Result<()> {
    for signal in Signal::iterator() {
        if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing SIG_DFL runs no code of ours in a signal context.
        #[allow(unsafe_code)]
        unsafe {
            nix::sys::signal::signal(signal, SigHandler::SigDfl)?;
        }
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
}

/// Ends this process by `signal` (as the program it stood for ended), or with
/// 128 + the signal's number if the signal does not kill.
pub fn die_by(signal: i32) -> ! {
    if let Ok(signal) = Signal::try_from(signal) {
        // SAFETY: as in `reset_for_exec`.
        #[allow(unsafe_code)]
        let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
        let mut set = SigSet::empty();
        set.add(signal);
        let _ = set.thread_unblock();
        let _ = raise(signal);
    }
    std::process::exit(128 + signal)
}

/// Marks every descriptor but stdin, stdout and stderr close-on-exec, so that
/// nothing the service leaked reaches the program.
pub fn close_inherited_descriptors() {
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC only sets a flag on
    // descriptors; it touches no memory.
    #[allow(unsafe_code)]
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            3u32,
            u32::MAX,
            nix::libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done != 0 {
        super::fail(&format!(
            "cannot close inherited descriptors: {}",
            std::io::Error::last_os_error()
        ));
    }
}
