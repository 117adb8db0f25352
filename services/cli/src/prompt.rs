//! Asking the person at the terminal.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use nix::sys::termios::{self, LocalFlags, SetArg};

use crate::fail::Fail;

/// Whether there is a person to ask: standard input is a terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// One line from standard input, after `question` on standard error; None
/// at the end of input.
pub fn line(question: &str) -> Result<Option<String>, Fail> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let read = std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Fail::error(format!("cannot read the answer: {e}")))?;
    if read == 0 {
        return Ok(None);
    }
    Ok(Some(answer.trim_end_matches(['\n', '\r']).to_owned()))
}

/// The next line a person types, for a question asked while something else
/// may answer it first (an approval answered elsewhere): one thread reads
/// standard input for the whole process, so that a question given up leaves
/// no reader behind to take the next line. None at the end of input.
pub async fn next_line(question: &str) -> Option<String> {
    use std::sync::OnceLock;
    use tokio::sync::{Mutex, mpsc};
    static LINES: OnceLock<Mutex<mpsc::UnboundedReceiver<String>>> = OnceLock::new();
    let lines = LINES.get_or_init(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Mutex::new(rx)
    });
    let mut lines = lines.lock().await;
    // What was typed before the question answers nothing.
    while lines.try_recv().is_ok() {}
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    lines
        .recv()
        .await
        .map(|l| l.trim_end_matches('\r').to_owned())
}

/// A secret from standard input: at a terminal, after `question`, without
/// echo; else the first line of what is piped in.
pub fn secret(question: &str) -> Result<String, Fail> {
    let stdin = std::io::stdin();
    let echo_off = if stdin.is_terminal() {
        let saved = termios::tcgetattr(&stdin)
            .map_err(|e| Fail::error(format!("cannot read the terminal's settings: {e}")))?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &quiet)
            .map_err(|e| Fail::error(format!("cannot turn the terminal's echo off: {e}")))?;
        Some(saved)
    } else {
        None
    };
    let answer = if echo_off.is_some() {
        line(question)
    } else {
        line("")
    };
    if let Some(saved) = echo_off {
        let _ = termios::tcsetattr(&stdin, SetArg::TCSANOW, &saved);
        eprintln!();
    }
    let secret = answer?.unwrap_or_default().trim().to_owned();
    if secret.is_empty() {
        return Err(Fail::usage("no key was given on standard input"));
    }
    Ok(secret)
}
