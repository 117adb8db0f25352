//! The network grant asks before each connection: once the egress list
//! allows a destination, the sandbox's proxy asks the service (the run's
//! approval rules) whether it may be reached now; the answer lets it
//! through, refuses it with a reason the program reads, or keeps it waiting
//! until a person answers. In every sandbox configuration the suite runs in.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::common::Harness;

fn output(outcome: &chorus_tool_exec::context::ToolOutcome) -> chorus_catalog::outputs::Bash {
    serde_json::from_value(outcome.output.clone()).expect("bash output")
}

/// What the test's answerer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Say {
    Yes,
    No,
    /// Wait until the test says yes.
    Later,
}

/// A question: host and port.
type Asked = (String, u16);

/// Sends its question on its channel when dropped still holding it.
struct Unanswered(Option<(mpsc::UnboundedSender<Asked>, Asked)>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((to, question)) = self.0.take() {
            let _ = to.send(question);
        }
    }
}

#[tokio::test]
async fn the_network_grant_asks_before_each_connection_and_waits_for_the_answer() {
    if !chorus_sandbox::testing::root_for("a test network namespace") {
        return;
    }
    let mut h = Harness::new().await;
    let (_net, ip) = crate::common::outside_server().await;

    let say = Arc::new(Mutex::new(Say::Yes));
    let (asked_tx, mut asked) = mpsc::unbounded_channel::<(String, u16)>();
    let (later_tx, later) = watch::channel(false);
    let (withdrawn_tx, mut withdrawn) = mpsc::unbounded_channel::<(String, u16)>();
    let questions = {
        let say = Arc::clone(&say);
        chorus_sandbox::NetworkQuestions::new(move |host: String, port: u16| {
            let now = *say.lock().expect("say");
            let _ = asked_tx.send((host.clone(), port));
            let mut later = later.clone();
            // Told when the question is dropped unanswered.
            let unanswered = Unanswered(Some((withdrawn_tx.clone(), (host.clone(), port))));
            async move {
                let mut unanswered = unanswered;
                let said = match now {
                    Say::Yes => Ok(()),
                    Say::No => Err(format!(
                        "egress to {host}:{port} is refused: denied by the approval rule 'deny network host={host}'"
                    )),
                    Say::Later => {
                        let _ = later.wait_for(|answered| *answered).await;
                        Ok(())
                    }
                };
                unanswered.0 = None;
                said
            }
        })
    };
    let command = json!({ "command": format!("curl -sS http://{ip}:8080/f.txt") });
    h.egress = vec![format!("{ip}:8080")];

    // Allowed: asked once, with the host and port, then reached.
    let allowed = h
        .call_asking(questions.clone(), "bash", command.clone())
        .await
        .expect("bash");
    assert_eq!(
        output(&allowed).stdout,
        "outside\n",
        "{:?}",
        output(&allowed)
    );
    assert_eq!(asked.try_recv().ok(), Some((ip.to_string(), 8080)));
    assert!(asked.try_recv().is_err(), "one question a connection");

    // The channel the proxy asks on is the proxy's alone: the program
    // holds no socket it could ask (or forge questions) on.
    let held = h
        .call_asking(
            questions.clone(),
            "bash",
            json!({ "command": "for f in /proc/$$/fd/*; do readlink \"$f\"; done | grep -c socket || true" }),
        )
        .await
        .expect("bash");
    assert_eq!(output(&held).stdout, "0\n", "{:?}", output(&held));
    assert!(asked.try_recv().is_err(), "no connection, no question");

    // Refused: the program reads why; nothing was fetched.
    *say.lock().expect("say") = Say::No;
    let refused = h
        .call_asking(questions.clone(), "bash", command.clone())
        .await
        .expect("bash");
    let out = output(&refused);
    assert!(
        out.stdout.contains("denied by the approval rule") && !out.stdout.contains("outside"),
        "{out:?}"
    );
    assert_eq!(asked.try_recv().ok(), Some((ip.to_string(), 8080)));

    // A client that goes away while its connection waits withdraws the
    // question: the service stops asking it, while the program goes on.
    // (The client closes once the test has seen the question, and the
    // program ends once the test has seen it withdrawn: each waits for a
    // line from a FIFO.)
    *say.lock().expect("say") = Say::Later;
    for fifo in ["close", "end"] {
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "666"])
            .arg(h.root.join(fifo))
            .status()
            .expect("mkfifo");
        assert!(made.success(), "mkfifo");
    }
    let quitter = json!({ "command": format!(
        "exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT {ip}:8080 HTTP/1.1\\r\\n\\r\\n' >&3 && read -r _ < close && exec 3<&- && read -r _ < end && echo left"
    ) });
    let tell = |fifo: &str| {
        let fifo = h.root.join(fifo);
        async move {
            tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
                .await
                .expect("task")
                .expect("the program is told");
        }
    };
    let (left, ()) = tokio::join!(h.call_asking(questions.clone(), "bash", quitter), async {
        assert_eq!(asked.recv().await, Some((ip.to_string(), 8080)));
        tell("close").await;
        // Bounded so that a question left waiting fails the test, not hangs it.
        let gone = tokio::time::timeout(std::time::Duration::from_secs(60), withdrawn.recv())
            .await
            .expect("the question was left waiting after its client went away");
        assert_eq!(gone, Some((ip.to_string(), 8080)));
        tell("end").await;
    });
    assert_eq!(output(&left.expect("bash")).stdout, "left\n");

    // Waiting: the connection is held until the answer comes, then made.
    *say.lock().expect("say") = Say::Later;
    let call = tokio::spawn({
        let (questions, command) = (questions.clone(), command.clone());
        async move { h.call_asking(questions, "bash", command).await }
    });
    assert_eq!(asked.recv().await, Some((ip.to_string(), 8080)));
    assert!(!call.is_finished(), "the connection waits for its answer");
    let _ = later_tx.send(true);
    let waited = call.await.expect("task").expect("bash");
    assert_eq!(output(&waited).stdout, "outside\n", "{:?}", output(&waited));
}

#[tokio::test]
async fn what_the_egress_list_refuses_is_never_asked_about() {
    let h = Harness::new().await;
    let (asked_tx, mut asked) = mpsc::unbounded_channel::<(String, u16)>();
    let questions = chorus_sandbox::NetworkQuestions::new(move |host: String, port: u16| {
        let _ = asked_tx.send((host, port));
        async { Ok(()) }
    });
    // An empty egress list: the proxy refuses before it would ask.
    let refused = h
        .call_asking(
            questions,
            "bash",
            json!({ "command": "curl -sS http://192.0.2.1:8080/ || true" }),
        )
        .await
        .expect("bash");
    assert!(
        output(&refused).stdout.contains("egress list is empty"),
        "{:?}",
        output(&refused)
    );
    assert!(asked.try_recv().is_err(), "nothing was asked");
}
