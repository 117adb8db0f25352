//! The A2A face with the official JavaScript SDK (`@a2a-js/sdk` 1.3.0) and
//! its *default* client factory — the transports it has by default, the card
//! resolved from the workspace's base URL — on each HTTP binding: JSON-RPC
//! (what the factory picks from the card) and HTTP+JSON (the factory's
//! preferred transport). Before, the factory found "no compatible
//! transport": Chorus served only gRPC.

use std::path::Path;

use chorus_sandbox::testing::{eventually, survivors};
use chorus_tests::a2a::{
    A2aSetup, TOOLS, create, events, js_sdk_or_skip, number, payload, plan,
    questions_then_greeting, report, run_js_client, sequences, state,
};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use serde_json::{Value, json};

/// The HTTP bindings, as the JS client's plan names them.
const HTTP_BINDINGS: [&str; 2] = ["default", "HTTP+JSON"];

fn error_message(result: &Value) -> &str {
    assert!(
        result["error"].is_object(),
        "the operation succeeded: {result}"
    );
    result["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_through_input_required_to_completed_with_the_default_factory_on_each_binding() {
    let Some(modules) = js_sdk_or_skip() else {
        return;
    };
    for binding in HTTP_BINDINGS {
        through_input_required(&modules, binding).await;
    }
}

async fn through_input_required(modules: &Path, b: &str) {
    let model = FakeOpenAi::start(questions_then_greeting()).await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let mut plan = setup.plan_on(
        b,
        json!([
            { "op": "send", "text": "Write a greeting in greeting.txt" },
            { "op": "push_create", "task_id": "$task", "url": "http://192.0.2.1:9/hook" },
            { "op": "push_list", "task_id": "$task", "key": "viewer" },
            { "op": "send", "text": "Bonjour", "task_id": "$task" },
            { "op": "get", "task_id": "$task", "history_length": 3, "key": "viewer" },
            { "op": "list", "context_id": "$context", "key": "viewer" },
            { "op": "subscribe", "task_id": "$task", "after": "2", "key": "viewer" },
            { "op": "send", "text": "a viewer writes", "key": "viewer" },
            { "op": "send", "text": "no key", "key": "none" },
        ]),
    );
    plan["keys"]["none"] = Value::Null;
    let results = run_js_client(modules, &plan).await;

    // The SDK's bundle names its REST transport's class `_RestTransport`.
    let chosen = if b == "default" {
        "JsonRpcTransport"
    } else {
        "_RestTransport"
    };
    assert_eq!(results[0]["transport"], chosen, "{b}");
    // The planner's question: input-required, its text in the status.
    let asked = events(&results[0]);
    assert_eq!(payload(&asked[0]).0, "task", "{b}: {asked:?}");
    let last = asked.last().expect("events");
    assert_eq!(state(last), "TASK_STATE_INPUT_REQUIRED", "{b}: {last}");
    assert!(last.to_string().contains("Which greeting?"), "{b}: {last}");
    // A push config for the task, listed.
    assert!(
        results[1]["config"]["id"].is_string(),
        "{b}: {}",
        results[1]
    );
    assert_eq!(
        results[2]["list"]["configs"].as_array().map(Vec::len),
        Some(1),
        "{b}: {}",
        results[2]
    );
    // The reply: to completed, the report and the files as artifacts.
    let answered = events(&results[3]);
    assert_eq!(results[3]["task"], results[0]["task"], "{b}: the same task");
    assert_eq!(
        state(answered.last().expect("events")),
        "TASK_STATE_COMPLETED",
        "{b}"
    );
    let artifacts: Vec<&str> = answered
        .iter()
        .filter(|r| payload(r).0 == "artifactUpdate")
        .filter_map(|r| payload(r).1["artifact"]["name"].as_str())
        .collect();
    assert_eq!(
        artifacts,
        ["completion-report", "files-changed"],
        "{b}: {answered:?}"
    );
    assert!(setup.root.path().join("greeting.txt").exists(), "{b}");
    // Each stream: its task (with its history so far), then every event
    // after it once, in order — the reply's up to GetTask's last.
    for stream in [asked, answered] {
        let seqs: Vec<u64> = stream.iter().flat_map(sequences).collect();
        assert_eq!(
            seqs,
            (1..=*seqs.last().expect("seq")).collect::<Vec<_>>(),
            "{b}"
        );
    }
    let seqs: Vec<u64> = answered.iter().flat_map(sequences).collect();
    let task = &results[4]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{b}: {task}"
    );
    let history_last = task["history"]
        .as_array()
        .and_then(|h| h.last())
        .and_then(|m| number(&m["metadata"]["chorus"]["sequence"]));
    assert_eq!(seqs.last().copied(), history_last, "{b}: {task}");
    // Listed by its context.
    let listed = results[5]["list"]["tasks"].as_array().expect("tasks");
    assert_eq!(listed.len(), 1, "{b}: {}", results[5]);
    assert_eq!(listed[0]["id"], results[0]["task"], "{b}");
    // Resubscribed after sequence 2: the rest replayed, once each, in order.
    let replayed: Vec<u64> = events(&results[6]).iter().flat_map(sequences).collect();
    assert_eq!(
        replayed,
        (3..=*seqs.last().expect("seq")).collect::<Vec<_>>(),
        "{b}"
    );
    // A viewer cannot send; nor can a caller without a key: the SDK shows
    // why, from the answer's body.
    let viewer = error_message(&results[7]);
    assert!(viewer.contains("role operator"), "{b}: {viewer}");
    let anonymous = error_message(&results[8]);
    assert!(anonymous.to_lowercase().contains("key"), "{b}: {anonymous}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_and_a_cancel_that_leaves_no_process_with_the_default_factory() {
    let Some(modules) = js_sdk_or_skip() else {
        return;
    };
    for b in HTTP_BINDINGS {
        let marker = format!("a2a-js-cancel-{}-{}", std::process::id(), b.len());
        let model = FakeOpenAi::start(vec![
            plan(),
            Step::tool_call(
                "bash",
                json!({ "command": format!("sh -c 'touch started; sleep 60; true' {marker}") }),
            ),
            plan(),
            create("blocking.txt"),
            report("wrote blocking.txt"),
        ])
        .await;
        let setup = A2aSetup::start(&model, TOOLS, None).await;
        let started = setup.root.path().join("started");
        let plan = setup.plan_on(
            b,
            json!([
                { "op": "send", "text": "Wait a minute", "cancel_when_file": started },
                { "op": "send", "text": "Write blocking.txt", "blocking": true },
            ]),
        );
        let results = run_js_client(&modules, &plan).await;

        assert_eq!(
            results[0]["canceled"]["status"]["state"], "TASK_STATE_CANCELED",
            "{b}: {}",
            results[0]
        );
        let stream = events(&results[0]);
        assert_eq!(
            state(stream.last().expect("events")),
            "TASK_STATE_CANCELED",
            "{b}"
        );
        // CancelTask answered once every process of the run was gone.
        assert_eq!(
            survivors(&marker),
            Vec::<i32>::new(),
            "{b}: the command outlived the cancel"
        );
        eventually("nothing of the run is left", || {
            survivors(&marker).is_empty()
        })
        .await;

        let answer = events(&results[1]);
        assert_eq!(
            answer.len(),
            1,
            "{b}: one answer: the task as it ended: {answer:?}"
        );
        assert_eq!(state(&answer[0]), "TASK_STATE_COMPLETED", "{b}: {answer:?}");
        assert!(setup.root.path().join("blocking.txt").exists(), "{b}");
    }
}
