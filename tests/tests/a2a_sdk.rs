//! The A2A face with a client no one here wrote: the official Python SDK
//! (`a2a-sdk[grpc]` 1.3.0) over gRPC against the orchestrator binary. It
//! reads the workspace's card where A2A clients look, sends a message that
//! is planned, started and streamed to `completed` with the report and the
//! changed files as artifacts, answers the planner through
//! `input-required`, cancels a running task (no process left), resubscribes
//! after a disconnect (nothing missed, nothing twice), and is refused
//! without a key, with a viewer's key for sending, and for bad input, with
//! nothing changed.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{eventually, survivors};
use std::path::Path;

use chorus_tests::a2a::{
    A2aSetup, BINDINGS, TOOLS, create, error, events, payload, plan, python_or_skip,
    questions_then_greeting, refusal, report, run_client, run_script, sequences, state, transport,
};
use chorus_tests::db::databases;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use serde_json::{Value, json};

#[tokio::test]
async fn the_contract_chorus_serves_is_the_official_sdks() {
    use base64::Engine as _;
    use prost::Message as _;
    let Some(python) = python_or_skip() else {
        return;
    };
    let set = prost_types::FileDescriptorSet::decode(chorus_proto::FILE_DESCRIPTOR_SET)
        .expect("descriptors");
    let a2a = set
        .file
        .iter()
        .find(|f| f.package() == "lf.a2a.v1")
        .expect("Chorus compiles lf.a2a.v1");
    let encoded = base64::engine::general_purpose::STANDARD.encode(a2a.encode_to_vec());
    let compared = run_script(&python, "same_contract.py", encoded.as_bytes()).await;
    assert_eq!(compared["package"], compared["sdk_package"], "{compared}");
    assert_eq!(compared["differences"], json!([]), "{compared}");
}

/// Tasks the workspace holds, read with the Chorus API.
async fn tasks(setup: &mut A2aSetup) -> Vec<pb::Task> {
    setup
        .client
        .list_tasks(pb::ListTasksRequest {
            workspace_id: setup.workspace.id.clone(),
            ..Default::default()
        })
        .await
        .expect("tasks")
        .into_inner()
        .tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_then_a_message_streamed_to_completed_with_the_report_and_files_as_artifacts() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dbs = tempfile::tempdir().expect("databases");
    // A database of their own for each binding's run.
    let runs = BINDINGS.iter().enumerate().flat_map(|(i, binding)| {
        let dir = dbs.path().join(i.to_string());
        std::fs::create_dir(&dir).expect("a directory");
        databases(&dir).into_iter().map(move |db| (db, *binding))
    });
    for (db, binding) in runs {
        let b = format!("{} over {binding}", db.backend);
        let model =
            FakeOpenAi::start(vec![plan(), create("hello.txt"), report("wrote hello.txt")]).await;
        let mut setup = A2aSetup::start(&model, TOOLS, Some(&db.url)).await;
        let plan = setup.plan_on(
            binding,
            json!([
                { "op": "card" },
                { "op": "card", "auth": true, "key": "viewer" },
                { "op": "extended_card", "key": "viewer" },
                { "op": "send", "text": "Greet the world in hello.txt" },
                { "op": "get", "task_id": "$task", "history_length": 2, "key": "viewer" },
                { "op": "list", "context_id": "$context", "key": "viewer" },
            ]),
        );
        let results = run_client(&python, &plan).await;
        assert_eq!(results[3]["transport"], transport(binding), "{b}");

        // The public card: where and how to call each binding (JSON-RPC
        // first, which A2A's SDKs choose by default), no agent named.
        let card = &results[0]["card"];
        let interfaces: Vec<(&str, &str, &str)> = card["supportedInterfaces"]
            .as_array()
            .expect("interfaces")
            .iter()
            .map(|i| {
                assert_eq!(i["protocolVersion"], "1.0", "{b}: {i}");
                let text = |f: &str| i[f].as_str().unwrap_or_default();
                (text("protocolBinding"), text("url"), text("tenant"))
            })
            .collect();
        let console = format!(
            "http://{}/a2a/{}",
            setup.orchestrator.console_addr.expect("console"),
            setup.workspace.name
        );
        let grpc = setup.orchestrator.addr.to_string();
        assert_eq!(
            interfaces,
            [
                ("JSONRPC", console.as_str(), ""),
                ("HTTP+JSON", console.as_str(), ""),
                ("GRPC", grpc.as_str(), setup.workspace.name.as_str()),
            ],
            "{b}"
        );
        assert_eq!(
            card["securitySchemes"]["chorusApiKey"]["httpAuthSecurityScheme"]["scheme"], "bearer",
            "{b}"
        );
        let skills = |card: &Value| -> Vec<String> {
            card["skills"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .map(|s| s["id"].as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            skills(card),
            ["task"],
            "{b}: the public card names no agent"
        );
        // With a key, over HTTP and over gRPC: the workspace's agents are skills.
        for extended in [&results[1]["card"], &results[2]["card"]] {
            assert!(
                skills(extended).contains(&"worker".to_owned()),
                "{b}: {extended}"
            );
            assert!(
                !skills(extended).contains(&"task-validator".to_owned()),
                "{b}"
            );
        }

        // The stream: the task first, then every event once, in order, the
        // report and the files as artifacts, and completed last.
        let stream = events(&results[3]);
        assert_eq!(payload(&stream[0]).0, "task", "{b}");
        let last = stream.last().expect("events");
        assert_eq!(state(last), "TASK_STATE_COMPLETED", "{b}: {last}");
        let seqs: Vec<u64> = stream.iter().flat_map(sequences).collect();
        assert_eq!(
            seqs,
            (1..=*seqs.last().expect("seq")).collect::<Vec<_>>(),
            "{b}"
        );
        let artifacts: Vec<&Value> = stream
            .iter()
            .filter(|r| payload(r).0 == "artifactUpdate")
            .map(|r| &payload(r).1["artifact"])
            .collect();
        let named = |name: &str| {
            *artifacts
                .iter()
                .find(|a| a["name"] == name)
                .unwrap_or_else(|| panic!("{b}: no {name} artifact in {artifacts:?}"))
        };
        let report = named("completion-report");
        assert!(
            report["parts"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("wrote hello.txt"),
            "{b}: {report}"
        );
        assert_eq!(report["parts"][1]["data"]["status"], "complete", "{b}");
        let files = named("files-changed");
        assert_eq!(files["parts"][0]["filename"], "hello.txt", "{b}: {files}");
        assert_eq!(
            std::fs::read_to_string(setup.root.path().join("hello.txt")).expect("hello.txt"),
            "hello\n",
            "{b}"
        );
        // The agent ran with what Chorus granted it: its one call is in the history.
        assert!(
            stream
                .iter()
                .any(|r| r.to_string().contains("worker ran file.create: ok")),
            "{b}"
        );

        // GetTask with a history length; ListTasks by the context.
        let task = &results[4]["task"];
        // The stream carried every event GetTask shows, the tail after the
        // final status too.
        let last_seen = task["history"]
            .as_array()
            .and_then(|h| h.last())
            .and_then(|m| chorus_tests::a2a::number(&m["metadata"]["chorus"]["sequence"]));
        assert_eq!(seqs.last().copied(), last_seen, "{b}: {task}");
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{b}");
        assert_eq!(
            task["history"].as_array().map(Vec::len),
            Some(2),
            "{b}: {task}"
        );
        assert_eq!(task["artifacts"].as_array().map(Vec::len), Some(2), "{b}");
        let list = &results[5]["list"];
        assert_eq!(
            list["tasks"].as_array().map(Vec::len),
            Some(1),
            "{b}: {list}"
        );
        assert_eq!(list["tasks"][0]["id"], results[3]["task"], "{b}");
        // The task is a Chorus task like any other, from source a2a.
        let chorus = tasks(&mut setup).await;
        assert_eq!(chorus.len(), 1, "{b}");
        assert_eq!(
            chorus[0].source.as_ref().map(|s| s.kind.as_str()),
            Some("a2a"),
            "{b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planners_questions_are_input_required_and_the_next_message_answers_them() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        questions_answered_on(&python, binding).await;
    }
}

async fn questions_answered_on(python: &Path, binding: &str) {
    let model = FakeOpenAi::start(questions_then_greeting()).await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    // 192.0.2.0/24 is for documentation: a public address nothing answers.
    let hook = |n: usize| json!({ "op": "push_create", "task_id": "$task", "url": format!("http://192.0.2.1:9/hook{n}") });
    let mut ops = vec![json!({ "op": "send", "text": "Write a greeting in greeting.txt" })];
    ops.extend((1..=8).map(hook));
    ops.extend([
        // A reply that would make a 9th push config is refused, and changes
        // nothing: the task still waits for its answer.
        json!({ "op": "send", "text": "Bonjour, in French", "task_id": "$task",
                "push": { "url": "http://192.0.2.1:9/hook9" } }),
        json!({ "op": "get", "task_id": "$task" }),
        json!({ "op": "push_list", "task_id": "$task" }),
        json!({ "op": "send", "text": "Bonjour, in French", "task_id": "$task" }),
    ]);
    let mut results = run_client(python, &setup.plan_on(binding, Value::Array(ops))).await;
    for created in &results[1..=8] {
        assert!(created["config"]["id"].is_string(), "{created}");
    }
    assert_eq!(
        error(&results[9]),
        (
            "InvalidParamsError",
            refusal(binding, "INVALID_ARGUMENT").as_str()
        ),
        "{}",
        results[9]
    );
    assert!(
        results[9].to_string().contains("8 configs"),
        "{}",
        results[9]
    );
    assert_eq!(
        results[10]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "a refused reply was applied: {}",
        results[10]
    );
    assert_eq!(
        results[11]["list"]["configs"].as_array().map(Vec::len),
        Some(8),
        "{}",
        results[11]
    );
    results.drain(1..=11);

    let asked = events(&results[0]);
    let last = asked.last().expect("events");
    assert_eq!(state(last), "TASK_STATE_INPUT_REQUIRED", "{last}");
    let text = last["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("1. Which greeting?"), "{text}");

    let answered = events(&results[1]);
    assert_eq!(
        results[1]["task"], results[0]["task"],
        "the reply went to the same task"
    );
    assert_eq!(
        state(answered.last().expect("events")),
        "TASK_STATE_COMPLETED"
    );
    // The planner read the answer with its question.
    let requests = model.requests();
    let replanned = requests
        .iter()
        .map(Value::to_string)
        .find(|r| r.contains("Bonjour, in French"))
        .expect("the planner was asked again with the answer");
    assert!(replanned.contains("Which greeting?"), "{replanned}");
    assert!(setup.root.path().join("greeting.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_running_task_ends_its_stream_canceled_and_leaves_no_process() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        cancel_on(&python, binding).await;
    }
}

async fn cancel_on(python: &Path, binding: &str) {
    let marker = format!("a2a-cancel-{}", std::process::id());
    let model = FakeOpenAi::start(vec![
        plan(),
        Step::tool_call(
            "bash",
            json!({ "command": format!("sh -c 'touch started; sleep 60; true' {marker}") }),
        ),
    ])
    .await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let started = setup.root.path().join("started");
    let plan = setup.plan_on(
        binding,
        json!([
            { "op": "send", "text": "Wait a minute", "cancel_when_file": started },
        ]),
    );
    let results = run_client(python, &plan).await;

    let canceled = &results[0]["canceled"];
    assert_eq!(
        canceled["status"]["state"], "TASK_STATE_CANCELED",
        "{}",
        results[0]
    );
    let stream = events(&results[0]);
    assert_eq!(state(stream.last().expect("events")), "TASK_STATE_CANCELED");
    // CancelTask answered once every process of the run was gone.
    assert_eq!(
        survivors(&marker),
        Vec::<i32>::new(),
        "the agent's command outlived the cancel"
    );
    eventually("nothing of the run is left", || {
        survivors(&marker).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_resubscribes_and_misses_nothing_and_gets_nothing_twice() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        resubscribe_on(&python, binding).await;
    }
}

async fn resubscribe_on(python: &Path, binding: &str) {
    let model = FakeOpenAi::start(vec![
        plan(),
        create("a.txt"),
        create("b.txt"),
        create("c.txt"),
        report("wrote three files"),
    ])
    .await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let plan = setup.plan_on(
        binding,
        json!([
            { "op": "send", "text": "Write a.txt, b.txt and c.txt", "stop_after": 3 },
            { "op": "subscribe", "task_id": "$task", "after": "$sequence", "key": "viewer" },
            { "op": "subscribe", "task_id": "$task", "key": "viewer" },
        ]),
    );
    let results = run_client(python, &plan).await;

    let first: Vec<u64> = events(&results[0]).iter().flat_map(sequences).collect();
    let second: Vec<u64> = events(&results[1]).iter().flat_map(sequences).collect();
    assert_eq!(events(&results[0]).len(), 3, "the client left after 3");
    let all: Vec<u64> = first.iter().chain(&second).copied().collect();
    assert_eq!(
        all,
        (1..=*all.last().expect("seq")).collect::<Vec<_>>(),
        "first stream {first:?}, then {second:?}"
    );
    assert_eq!(
        state(events(&results[1]).last().expect("events")),
        "TASK_STATE_COMPLETED"
    );
    // A finished task without a place to replay from: nothing more to stream.
    assert_eq!(
        error(&results[2]),
        (
            "UnsupportedOperationError",
            refusal(binding, "FAILED_PRECONDITION").as_str()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_a_viewers_key_and_bad_input_are_refused_precisely_and_change_nothing() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        refusals_on(&python, binding).await;
    }
}

async fn refusals_on(python: &Path, binding: &str) {
    let model = FakeOpenAi::start(vec![plan(), create("x.txt"), report("wrote x.txt")]).await;
    let mut setup = A2aSetup::start(&model, TOOLS, None).await;
    // Over the description's limit; over the port's 16 MiB message limit.
    let huge = "x".repeat(5 * 1024 * 1024);
    let huger = "z".repeat(17 * 1024 * 1024);
    let long = "y".repeat(70 * 1024);
    let plan = setup.plan_on(
        binding,
        json!([
            { "op": "send", "text": "no key", "key": "none" },
            { "op": "send", "text": "a viewer", "key": "viewer" },
            { "op": "get", "task_id": "7d3c9a4e-0000-4000-8000-000000000001", "key": "viewer" },
            { "op": "send", "text": "a reply", "task_id": "7d3c9a4e-0000-4000-8000-000000000002" },
            { "op": "send", "text": "a reply", "task_id": "not-a-task" },
            { "op": "send", "text": "with a file", "raw": "bytes" },
            { "op": "send", "text": long },
            { "op": "send", "text": huge },
            { "op": "send", "text": huger },
            { "op": "send", "text": "an unknown skill", "skill": "nobody" },
            { "op": "send", "data": { "answers": [1, 2] } },
            { "op": "list", "key": "viewer" },
        ]),
    );
    let results = run_client(python, &plan).await;
    // The same refusals on every binding: A2A's error types, and the code
    // each binding refuses with.
    let expect = [
        ("A2AClientError", "UNAUTHENTICATED"),
        ("A2AClientError", "PERMISSION_DENIED"),
        ("TaskNotFoundError", "NOT_FOUND"),
        ("TaskNotFoundError", "NOT_FOUND"),
        // A2A's ids are opaque: one that is not a task's names no task.
        ("TaskNotFoundError", "NOT_FOUND"),
        ("ContentTypeNotSupportedError", "INVALID_ARGUMENT"),
        ("InvalidParamsError", "INVALID_ARGUMENT"),
        ("InvalidParamsError", "INVALID_ARGUMENT"),
        ("A2AClientError", "RESOURCE_EXHAUSTED"),
        ("InvalidParamsError", "INVALID_ARGUMENT"),
        ("InvalidParamsError", "INVALID_ARGUMENT"),
    ];
    for (i, (kind, code)) in expect.iter().enumerate() {
        assert_eq!(
            error(&results[i]),
            (*kind, refusal(binding, code).as_str()),
            "{binding}: operation {i}: {}",
            results[i]
        );
    }
    let message = |i: usize| {
        results[i]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // Over HTTP the SDK shows the status alone; the body says it too
    // (tests/tests/a2a_http.rs).
    if binding == "GRPC" {
        assert!(message(1).contains("operator"), "{}", message(1));
        assert!(message(8).contains("16 MiB"), "{}", message(8));
    }
    assert!(message(5).contains("text or data parts"), "{}", message(5));
    assert!(message(6).contains("65536"), "{}", message(6));
    assert!(message(7).contains("5242880 bytes"), "{}", message(7));
    assert!(
        message(9).contains("metadata.skill") && message(9).contains("nobody"),
        "{}",
        message(9)
    );
    assert_eq!(
        results[11]["list"]["tasks"].as_array().map_or(0, Vec::len),
        0
    );
    assert!(
        tasks(&mut setup).await.is_empty(),
        "a refused message created a task"
    );

    // A finished task takes no reply and cannot be canceled.
    let plan = setup.plan_on(binding, json!([
        { "op": "send", "text": "Write x.txt" },
        { "op": "send", "text": "more", "task_id": "$task", "push": { "url": "http://192.0.2.1:9/hook" } },
        { "op": "cancel", "task_id": "$task" },
        { "op": "push_list", "task_id": "$task" },
    ]));
    let results = run_client(python, &plan).await;
    assert_eq!(
        state(events(&results[0]).last().expect("events")),
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(
        error(&results[1]),
        (
            "UnsupportedOperationError",
            refusal(binding, "FAILED_PRECONDITION").as_str()
        )
    );
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("context")
    );
    assert_eq!(
        error(&results[2]),
        (
            "TaskNotCancelableError",
            refusal(binding, "FAILED_PRECONDITION").as_str()
        )
    );
    assert!(
        results[3]["list"].get("configs").is_none(),
        "the refused reply's push config stayed: {}",
        results[3]
    );
    assert_eq!(tasks(&mut setup).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_planner_refuses_is_rejected_and_a_skill_names_the_agent_that_runs() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let unassigned = Step::tool_call(
        "planner-output",
        json!({"type": "plan", "summary": "s", "requirements": [], "acceptanceCriteria": [], "plan": ["write"]}),
    );
    let model = FakeOpenAi::start(vec![
        Step::tool_call(
            "planner-output",
            json!({"type": "error", "error": "this cannot be planned"}),
        ),
        unassigned,
        create("skill.txt"),
        report("wrote skill.txt"),
    ])
    .await;
    let mut setup = A2aSetup::start(&model, TOOLS, None).await;
    let plan = setup.plan(json!([
        { "op": "send", "text": "Do the impossible" },
        { "op": "get", "task_id": "$task", "key": "viewer" },
        { "op": "send", "text": "Write skill.txt", "skill": "worker" },
        { "op": "list", "key": "viewer", "request": { "status": "TASK_STATE_REJECTED" } },
    ]));
    let results = run_client(&python, &plan).await;
    let refused = events(&results[0]).last().expect("events");
    assert_eq!(state(refused), "TASK_STATE_REJECTED", "{refused}");
    assert!(
        refused.to_string().contains("this cannot be planned"),
        "{refused}"
    );
    assert_eq!(results[1]["task"]["status"]["state"], "TASK_STATE_REJECTED");
    // The plan assigned no agent: the skill the message named ran it.
    assert_eq!(
        state(events(&results[2]).last().expect("events")),
        "TASK_STATE_COMPLETED"
    );
    assert!(setup.root.path().join("skill.txt").exists());
    let rejected = &results[3]["list"]["tasks"];
    assert_eq!(rejected.as_array().map(Vec::len), Some(1), "{rejected}");
    assert_eq!(rejected[0]["id"], results[0]["task"]);
    let chorus = tasks(&mut setup).await;
    assert_eq!(chorus.len(), 2);
    let failed = chorus
        .iter()
        .find(|t| t.status == "failed")
        .expect("the refused task");
    assert!(failed.auto_start.is_some(), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_answers_the_task_once_it_completes() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        blocking_send_on(&python, binding).await;
    }
}

async fn blocking_send_on(python: &Path, binding: &str) {
    let model = FakeOpenAi::start(vec![
        plan(),
        create("blocking.txt"),
        report("wrote blocking.txt"),
    ])
    .await;
    let mut setup = A2aSetup::start(&model, TOOLS, None).await;
    // The same message sent again (a client retrying: a second client, even)
    // makes no second task and answers the first one's.
    let plan = setup.plan_on(binding, json!([
        { "op": "send", "text": "Write blocking.txt", "blocking": true, "message_id": "retried-1" },
    ]));
    let results = run_client(python, &plan).await;
    let again = run_client(python, &plan).await;
    assert_eq!(results[0]["task"], again[0]["task"], "{binding}: {again:?}");
    assert_eq!(tasks(&mut setup).await.len(), 1, "{binding}: one task");
    assert_eq!(
        state(&events(&again[0])[0]),
        "TASK_STATE_COMPLETED",
        "{binding}: the first one's task, as it stands: {again:?}"
    );
    let answers = events(&results[0]);
    assert_eq!(
        answers.len(),
        1,
        "one answer: the task as it ended: {answers:?}"
    );
    let (kind, task) = payload(&answers[0]);
    assert_eq!(kind, "task");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let names: Vec<&str> = task["artifacts"]
        .as_array()
        .map(|a| a.iter().filter_map(|a| a["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["completion-report", "files-changed"], "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_of_a_long_task_answers_it_working_before_the_clients_deadline() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let marker = format!("a2a-long-{}", std::process::id());
    let model = FakeOpenAi::start(vec![
        plan(),
        Step::tool_call(
            "bash",
            json!({ "command": format!("sh -c 'sleep 60; true' {marker}") }),
        ),
    ])
    .await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let plan = setup.plan(json!([
        { "op": "send", "text": "Wait a minute", "blocking": true, "timeout": 3 },
        { "op": "cancel", "task_id": "$task" },
    ]));
    let results = run_client(&python, &plan).await;
    let answers = events(&results[0]);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let (kind, task) = payload(&answers[0]);
    assert_eq!(kind, "task");
    assert_eq!(
        task["status"]["state"], "TASK_STATE_WORKING",
        "answered as it stands: {task}"
    );
    assert_eq!(
        results[1]["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{}",
        results[1]
    );
    assert_eq!(survivors(&marker), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_starts_by_itself_left_planned_is_started_a_lease_later() {
    use chorus_tests::agents::{completed_by, mark_planned, wait_for};
    use diesel::{Connection, RunQueryDsl, SqliteConnection};
    // The replica that recorded the plan stopped before starting it: here, a
    // task made to start by itself and moved to planned by hand (no planner
    // run ends, so nothing but the sweep starts it).
    let model = FakeOpenAi::start(vec![create("stranded.txt"), report("wrote stranded.txt")]).await;
    let mut setup = A2aSetup::start_with(&model, TOOLS, None, &["--lease-secs", "1"]).await;
    let task = setup
        .client
        .create_task(pb::CreateTaskRequest {
            workspace_id: setup.workspace.id.clone(),
            description: "Write stranded.txt".into(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let db = setup.data.path().join("chorus.db");
    let mut conn = SqliteConnection::establish(&db.display().to_string()).expect("the database");
    diesel::sql_query(format!(
        "UPDATE tasks SET auto_start = '{{\"agent\":\"worker\"}}' WHERE id = '{}'",
        task.id
    ))
    .execute(&mut conn)
    .expect("auto_start set");
    mark_planned(&mut setup.client, &task.id).await;
    wait_for(&mut setup.client, &task.id, completed_by("worker")).await;
    assert!(setup.root.path().join("stranded.txt").exists());
}

/// A call that asks for approval is input-required over every binding, with
/// the call as a data part; the client's reply approves it (a data part) or
/// denies it (words), and the task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_is_input_required_and_the_clients_reply_answers_it() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for binding in BINDINGS {
        approval_answered_on(&python, binding).await;
    }
}

async fn approval_answered_on(python: &Path, binding: &str) {
    let model = FakeOpenAi::start(vec![
        plan(),
        create("approved.txt"),
        create("denied.txt"),
        report("wrote what was approved"),
    ])
    .await;
    let mut setup = A2aSetup::start(&model, TOOLS, None).await;
    let ask = chorus_tests::approvals::rule("file.create", "ask", "", 0);
    let workspace = setup.workspace.id.clone();
    chorus_tests::approvals::set_rules(&mut setup.client, &workspace, "worker", vec![ask]).await;
    let ops = json!([
        { "op": "send", "text": "Write two files" },
        { "op": "send", "task_id": "$task", "data": { "approve": true } },
        { "op": "send", "task_id": "$task", "text": "deny: not this one" },
    ]);
    let results = run_client(python, &setup.plan_on(binding, ops)).await;
    let asked = events(&results[0]);
    let last = asked.last().expect("events");
    assert_eq!(
        state(last),
        "TASK_STATE_INPUT_REQUIRED",
        "{binding}: {last}"
    );
    let parts = &last["statusUpdate"]["status"]["message"]["parts"];
    let text = parts[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("asks to run file.create") && text.contains("approved.txt"),
        "{binding}: {text}"
    );
    let call = &parts[1]["data"]["approvals"][0];
    assert_eq!(call["tool"], "file.create", "{binding}: {parts}");
    assert_eq!(
        call["arguments"]["path"], "approved.txt",
        "{binding}: {parts}"
    );
    // Approved: the call runs, and the next one asks.
    let second = events(&results[1]);
    assert_eq!(
        state(second.last().expect("events")),
        "TASK_STATE_INPUT_REQUIRED",
        "{binding}: {second:?}"
    );
    assert!(setup.root.path().join("approved.txt").exists(), "{binding}");
    // Denied in words: the agent goes on and the task completes.
    let third = events(&results[2]);
    assert_eq!(
        state(third.last().expect("events")),
        "TASK_STATE_COMPLETED",
        "{binding}: {third:?}"
    );
    assert!(!setup.root.path().join("denied.txt").exists(), "{binding}");
    let task = tasks(&mut setup).await.pop().expect("the task");
    let history = chorus_tests::agents::history(&mut setup.client, &task.id).await;
    let outcomes: Vec<String> = history
        .iter()
        .filter(|e| e.kind == "approval_answered")
        .map(|e| {
            chorus_tests::agents::data(e)["outcome"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(outcomes, ["approved", "denied"], "{binding}");
    let denied = history
        .iter()
        .find(|e| {
            e.kind == "approval_answered" && chorus_tests::agents::data(e)["outcome"] == "denied"
        })
        .map(chorus_tests::agents::data)
        .expect("denied");
    assert_eq!(denied["reason"], "not this one", "{binding}: {denied}");
}
