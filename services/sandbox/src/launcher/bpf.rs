//! The few classic BPF instructions the launcher's hand-written seccomp
//! programs use (seccompiler builds the rest).

use nix::libc;
use seccompiler::sock_filter;

/// Offsets in `struct seccomp_data`.
pub const NR: u32 = 0;
pub const ARCH: u32 = 4;

/// `AUDIT_ARCH_*` of the architecture this is built for.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// Loads the word at `offset` of `struct seccomp_data`.
pub fn load(offset: u32) -> sock_filter {
    sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    }
}

/// Returns `value` (an action).
pub fn ret(value: u32) -> sock_filter {
    sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: value,
    }
}

/// Compares the loaded word with `value` (`op`: BPF_JEQ, BPF_JGE, ...) and
/// skips `jt` instructions when true, `jf` when false.
pub fn jump(op: u32, value: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k: value,
    }
}
