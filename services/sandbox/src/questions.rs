//! Questions about the network grant: before the egress proxy of a sandbox
//! connects to a destination its egress list allows, it asks the service
//! that started the sandbox whether that destination may be reached now —
//! the run's approval rules may allow it, deny it, or wait for a person.
//!
//! The service gives the launcher one end of a socket pair (its descriptor
//! named in the policy, [`crate::Policy::questions_fd`]); only the proxy
//! process keeps it (the monitor closes its copy once the proxy is forked, so
//! no process of the sandbox ever holds it). Each question is one line of
//! JSON, [`Question`]; each answer one line, [`Answer`], with the question's
//! id — many connections may wait at once, and are answered in any order. A
//! broken channel is a refusal. A question whose client went away before its
//! answer is withdrawn (the same id, `withdrawn`): the service stops asking
//! it, so nobody is asked about a connection that will not be made.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::oneshot;

/// The longest line either side reads: a question or an answer is far
/// shorter; a longer line ends the channel.
pub const MAX_LINE: usize = 8 * 1024;

/// May the proxy connect to `host`:`port`?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub id: u64,
    /// The host as the program named it: a name, or an address (an IPv6
    /// address without brackets).
    pub host: String,
    pub port: u16,
    /// The question `id` asked before no longer wants an answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawn: bool,
}

/// The answer to question `id`: None allows it; else why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub id: u64,
    #[serde(default)]
    pub refusal: Option<String>,
}

type Asking = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// The service's answerer: for a host and port, Ok when the connection may
/// be made, else the reason it may not (shown to the program).
#[derive(Clone)]
pub struct NetworkQuestions(Arc<dyn Fn(String, u16) -> Asking + Send + Sync>);

impl NetworkQuestions {
    pub fn new<F, Fut>(ask: F) -> Self
    where
        F: Fn(String, u16) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        Self(Arc::new(move |host, port| Box::pin(ask(host, port))))
    }

    /// Answers the questions that come on `stream` until its other end
    /// closes (the sandbox has ended).
    pub async fn answer(self, stream: UnixStream) {
        let (reader, writer) = stream.into_split();
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        let mut lines = BufReader::new(reader);
        let mut line = Vec::new();
        // The questions being answered: once the sandbox has ended, nobody
        // waits for their answers, and they are dropped with this set.
        let mut asking = tokio::task::JoinSet::new();
        let mut by_id: HashMap<u64, tokio::task::AbortHandle> = HashMap::new();
        loop {
            line.clear();
            match read_line(&mut lines, &mut line).await {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
            let Ok(question) = serde_json::from_slice::<Question>(&line) else {
                return;
            };
            while asking.try_join_next().is_some() {}
            by_id.retain(|_, handle| !handle.is_finished());
            if question.withdrawn {
                if let Some(handle) = by_id.remove(&question.id) {
                    handle.abort();
                }
                continue;
            }
            let ask = Arc::clone(&self.0);
            let writer = Arc::clone(&writer);
            let id = question.id;
            let handle = asking.spawn(async move {
                let refusal = ask(question.host, question.port).await.err();
                let answer = Answer {
                    id: question.id,
                    refusal,
                };
                let _ = write_line(&mut *writer.lock().await, &answer).await;
            });
            by_id.insert(id, handle);
        }
    }
}

impl fmt::Debug for NetworkQuestions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NetworkQuestions(..)")
    }
}

/// The questions waiting for their answers, by id; None once the channel
/// broke (nothing more is asked).
type Waiting = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Answer>>>>>;

/// The proxy's side: asks and waits for the answer.
#[derive(Debug)]
pub(crate) struct Asker {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    waiting: Waiting,
    next: AtomicU64,
}

impl Asker {
    /// Asks on `stream`; reads the answers in a task of its own (which ends,
    /// refusing every question still waiting, when the channel breaks).
    pub(crate) fn start(stream: UnixStream) -> Self {
        let (reader, writer) = stream.into_split();
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let answers = Arc::clone(&waiting);
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader);
            let mut line = Vec::new();
            loop {
                line.clear();
                let Ok(true) = read_line(&mut lines, &mut line).await else {
                    break;
                };
                let Ok(answer) = serde_json::from_slice::<Answer>(&line) else {
                    break;
                };
                let mut waiting = answers.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(to) = waiting.as_mut().and_then(|w| w.remove(&answer.id)) {
                    let _ = to.send(answer);
                }
            }
            // Every question still waiting is refused; none is asked again.
            answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        });
        Self {
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            waiting,
            next: AtomicU64::new(1),
        }
    }

    /// Ok when `host`:`port` may be reached now, else why not.
    pub(crate) async fn ask(&self, host: String, port: u16) -> Result<(), String> {
        let broken = || {
            format!(
                "egress to {host}:{port} is refused: the service that decides on the network grant could not be asked"
            )
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (to, answered) = oneshot::channel();
        match self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            Some(waiting) => waiting.insert(id, to),
            None => return Err(broken()),
        };
        let question = Question {
            id,
            host: host.clone(),
            port,
            withdrawn: false,
        };
        // Dropped before its answer (the client went away): withdrawn.
        let pending = Withdraw {
            id,
            writer: Arc::clone(&self.writer),
            waiting: Arc::clone(&self.waiting),
            armed: true,
        };
        if write_line(&mut *self.writer.lock().await, &question)
            .await
            .is_err()
        {
            return Err(broken());
        }
        let answered = answered.await;
        pending.disarm();
        match answered {
            Ok(Answer { refusal: None, .. }) => Ok(()),
            Ok(Answer {
                refusal: Some(why), ..
            }) => Err(why),
            Err(_) => Err(broken()),
        }
    }
}

/// Withdraws question `id` when dropped armed.
struct Withdraw {
    id: u64,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    waiting: Waiting,
    armed: bool,
}

impl Withdraw {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(waiting) = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            waiting.remove(&self.id);
        }
        let (writer, id) = (Arc::clone(&self.writer), self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let withdrawn = Question {
                    id,
                    host: String::new(),
                    port: 0,
                    withdrawn: true,
                };
                let _ = write_line(&mut *writer.lock().await, &withdrawn).await;
            });
        }
    }
}

/// Reads one line (without its newline) into `line`: false at the end of
/// the stream; an error past [`MAX_LINE`].
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(false);
        }
        let (taken, ended) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        if line.len() > MAX_LINE {
            return Err(std::io::Error::other("a line past the limit"));
        }
        if ended {
            line.pop();
            return Ok(true);
        }
    }
}

async fn write_line<T: Serialize>(writer: &mut OwnedWriteHalf, value: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn questions_are_answered_by_id_in_any_order_and_a_broken_channel_refuses() {
        let (proxy, service) = UnixStream::pair().expect("pair");
        // The service allows port 443, keeps port 80 waiting until port 22
        // has been refused, then refuses it too.
        let (refused_22, later) = tokio::sync::watch::channel(false);
        let refused_22 = Arc::new(refused_22);
        let answering = NetworkQuestions::new(move |host: String, port: u16| {
            let refused_22 = Arc::clone(&refused_22);
            let mut later = later.clone();
            async move {
                match port {
                    443 => Ok(()),
                    22 => {
                        let _ = refused_22.send(true);
                        Err(format!("{host}:22 is denied"))
                    }
                    _ => {
                        let _ = later.wait_for(|done| *done).await;
                        Err(format!("{host}:{port} waited and is denied"))
                    }
                }
            }
        });
        let served = tokio::spawn(answering.answer(service));
        let asker = Asker::start(proxy);
        let (slow, allowed, denied) = tokio::join!(
            asker.ask("example.org".into(), 80),
            asker.ask("example.org".into(), 443),
            asker.ask("10.1.2.3".into(), 22),
        );
        assert_eq!(allowed, Ok(()));
        assert_eq!(denied, Err("10.1.2.3:22 is denied".to_owned()));
        assert_eq!(slow, Err("example.org:80 waited and is denied".to_owned()));

        served.abort();
        let _ = served.await;
        let broken = asker.ask("example.org".into(), 443).await;
        assert!(
            broken.is_err_and(|why| why.contains("could not be asked")),
            "a broken channel refuses"
        );
    }
}
