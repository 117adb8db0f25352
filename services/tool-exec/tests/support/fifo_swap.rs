//! A regular file and a FIFO that swap names in a loop (`renameat2` with
//! RENAME_EXCHANGE, so each name always exists): a name is a regular file one
//! moment and a FIFO the next, at any step of a tool call.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use nix::fcntl::{OFlag, RenameFlags, renameat2};
use nix::sys::stat::Mode;

/// The swapping thread; dropping it stops the thread.
pub struct FifoSwap {
    names: [PathBuf; 2],
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
}

impl FifoSwap {
    /// Makes `dir/<file>` holding `content` and the FIFO `dir/<fifo>`, and swaps
    /// them until stopped. Returns once they have swapped once.
    pub fn start(dir: &Path, file: &str, fifo: &str, content: &str) -> Self {
        std::fs::write(dir.join(file), content).expect("write the file");
        nix::unistd::mkfifo(&dir.join(fifo), Mode::from_bits_truncate(0o644)).expect("mkfifo");
        let handle = File::open(dir).expect("open the directory");
        let stop = Arc::new(AtomicBool::new(false));
        let (first, swapped) = mpsc::channel();
        let thread = {
            let stop = Arc::clone(&stop);
            let (file, fifo) = (file.to_owned(), fifo.to_owned());
            std::thread::spawn(move || {
                let mut swaps = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    renameat2(
                        &handle,
                        file.as_str(),
                        &handle,
                        fifo.as_str(),
                        RenameFlags::RENAME_EXCHANGE,
                    )
                    .expect("renameat2 RENAME_EXCHANGE");
                    swaps += 1;
                    if swaps == 1 {
                        let _ = first.send(());
                    }
                    // Stay a varying while, so that swaps land at every step of a call.
                    for _ in 0..swaps % 7 {
                        std::thread::yield_now();
                    }
                }
                swaps
            })
        };
        swapped.recv().expect("the names swapped once");
        Self {
            names: [dir.join(file), dir.join(fifo)],
            stop,
            thread: Some(thread),
        }
    }

    /// Stops swapping; returns how many swaps there were.
    pub fn stop(mut self) -> usize {
        self.halt()
    }

    fn halt(&mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let swaps = self
            .thread
            .take()
            .map_or(0, |thread| thread.join().unwrap_or(0));
        // A reader blocked opening the FIFO (the bug this guards against) is let
        // go: opening it for reading and writing never blocks and counts as a
        // writer; closing it then gives the reader end of file.
        for name in &self.names {
            let _ = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(OFlag::O_NONBLOCK.bits())
                .open(name);
        }
        swaps
    }
}

impl Drop for FifoSwap {
    fn drop(&mut self) {
        self.halt();
    }
}
