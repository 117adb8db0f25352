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
//!
//! Even with two arenas, what an attack made the process allocate stayed
//! resident once freed wherever something still lived above it (four viewer
//! keys' watches: 1,167 MB kept). So a thread also hands the arenas' free
//! pages back to the system (`malloc_trim`) every few seconds: resident
//! memory returns near its idle figure once an attack ends
//! (`tests/tests/attacks_memory.rs`).

use std::time::Duration;

/// How often the arenas' free pages are given back.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(5);

/// Limits glibc's malloc to two arenas, unless `MALLOC_ARENA_MAX` says
/// otherwise, and starts the thread that gives freed memory back every
/// [`GIVE_BACK_EVERY`]. Call first thing in `main`, before any other thread
/// starts; an error says the thread could not start.
pub fn give_back_freed_memory() -> std::io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only sets a malloc parameter; it is called before
            // this process starts any thread.
            #[allow(unsafe_code)]
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 2);
            }
        }
        std::thread::Builder::new()
            .name("give-back".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(GIVE_BACK_EVERY);
                    // SAFETY: malloc_trim only returns free pages of malloc's
                    // arenas to the system; it takes each arena's lock.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            })?;
    }
    Ok(())
}
