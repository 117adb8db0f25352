//! How the process's allocator gives memory back.
//!
//! glibc's malloc keeps an arena per thread under contention (up to eight per
//! core) and returns to the system only what lies at the top of each: after a
//! burst of large answers, the freed memory stays resident. Measured with the
//! attacks of `tests/benches/api_load.rs` on the release orchestrator
//! (`docs/benchmarks.md`, "Memory after a burst"), resident after them (peak):
//! glibc's defaults 187 MiB (200), two arenas 93 MiB (106) by the environment
//! and 132 MiB (135) by this function, mimalloc's defaults 697 MiB (717). So
//! both servers keep glibc and limit it to two arenas at start.

/// Limits glibc's malloc to two arenas, unless `MALLOC_ARENA_MAX` says
/// otherwise. Call first thing in `main`, before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; it is called before
        // this process starts any thread.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
