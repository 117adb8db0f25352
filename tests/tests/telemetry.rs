//! One task is one trace across every process: the orchestrator and a separate
//! tool-exec, both exporting OTLP to a receiver in this test, run a task whose
//! agent (the fake CLI, through the real chorus-tools) calls tools and hands off
//! to another agent. Every span of the task's work shares the task's trace id,
//! with the parent links of who called whom, and the metrics arrive.

use std::collections::HashMap;

use chorus_auth::Role;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    add_agent, call, ends, ends_run, handoff, planned_task, report, start, wait_for,
};
use chorus_tests::credentials::make_key;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::otlp::{Receiver, Span};
use chorus_tests::tool_exec_process::ToolExecProcess;
use serde_json::json;

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

/// The spans from `span` up to its trace's root, `span` first.
fn ancestry<'a>(span: &'a Span, by_id: &HashMap<&str, &'a Span>) -> Vec<&'a Span> {
    let mut chain = vec![span];
    let mut at = span;
    while let Some(parent) = by_id.get(at.parent_span_id.as_str()) {
        chain.push(parent);
        at = parent;
    }
    chain
}

fn names(chain: &[&Span]) -> Vec<String> {
    chain
        .iter()
        .map(|s| format!("{}: {}", s.service, s.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_one_trace_across_orchestrator_chorus_tools_and_tool_exec() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let database = data.path().join("chorus.db").display().to_string();
    let service_key = make_key(&database, "tool-exec", Role::ToolExec).await;
    let key_file = data.path().join("tool-exec.key");
    std::fs::write(&key_file, &service_key).expect("key file");

    let orchestrator_addr = free_port();
    let tool_exec = ToolExecProcess::spawn_with_env(orchestrator_addr, &key_file, &env).await;
    let listen = orchestrator_addr.to_string();
    let tools_at = tool_exec.addr.to_string();
    let fake_cli = chorus_tests::agents::fake_cli().display().to_string();
    let orchestrator = OrchestratorProcess::spawn_with_env(
        data.path(),
        &database,
        &[
            "--listen",
            &listen,
            "--tool-exec-addr",
            &tools_at,
            "--claude-bin",
            &fake_cli,
        ],
        &env,
    )
    .await;
    let mut client = orchestrator.client().await;
    let ws = chorus_tests::flows::workspace(&mut client, root.path()).await;
    let writer = [
        "Write the draft.".to_owned(),
        call(&json!({"tool": "file.create", "path": "draft.md", "content": "Once.\n"})),
        report("complete", "draft written"),
        "fake: say Draft done.".to_owned(),
    ];
    let script = [
        "Write a story.".to_owned(),
        handoff("writer", &writer),
        call(&json!({"tool": "file.read", "path": "draft.md"})),
        report("complete", "story written"),
        "fake: say All done.".to_owned(),
    ]
    .join("\n");
    let task = planned_task(&mut client, &ws, &script).await;
    let started = start(&mut client, &task, "writer-workflow", 60).await;
    let root_run = started.run.expect("run").id;
    let events = wait_for(&mut client, &task.id, |e| ends(e, &root_run)).await;
    assert_eq!(events.last().expect("end").kind, "agent_completed");

    // An API agent's model requests are spans of its run, with the GenAI
    // conventions' attributes, and its tokens are counted.
    let model = FakeOpenAi::start(vec![
        Step::tool_call("file_read", json!({"path": "draft.md"})),
        Step::text("Read it."),
    ])
    .await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "api".into(),
            kind: pb::ProviderKind::OpenaiCompatible.into(),
            base_url: model.base_url(),
            model: "fake-model".into(),
            api_key: "sk-test".into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(&mut client, &ws, "reader", &["file.read"], "api").await;
    let api_task = planned_task(&mut client, &ws, "Read the draft.").await;
    start(&mut client, &api_task, "reader", 60).await;
    wait_for(&mut client, &api_task.id, ends_run).await;
    // A call refused for want of a credential is counted by its reason.
    let refused = chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient::new(
        chorus_tests::orchestrator::channel_to(orchestrator.addr).await,
    )
    .list_tasks(chorus_proto::orchestrator::v1::ListTasksRequest::default())
    .await
    .expect_err("no credential");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    drop(client);
    // Stopping flushes what each service still holds.
    assert!(orchestrator.stop().await.success());
    assert!(tool_exec.stop().await.success());

    let is = |service: &'static str, name: &'static str| {
        move |s: &Span| s.service == service && s.name == name
    };
    receiver
        .wait_until("spans of both runs and their tool calls", |spans, _| {
            [
                is("chorus-orchestrator", "run writer-workflow"),
                is("chorus-orchestrator", "run writer"),
                is("chorus-tool-exec", "execute file.create"),
                is("chorus-tool-exec", "execute file.read"),
                is("chorus-tools", "chorus-tools handoff"),
                is("chorus-orchestrator", "run reader"),
            ]
            .iter()
            .all(|wanted| spans.iter().any(wanted))
        })
        .await;
    let spans = receiver.spans();
    let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let one = |service: &'static str, name: &'static str| {
        let found: Vec<&Span> = spans.iter().filter(|s| is(service, name)(s)).collect();
        assert_eq!(found.len(), 1, "{service} {name}: {found:#?}");
        found[0]
    };
    // The task's trace: CreateTask's task span, under the call's own span.
    let task_span = spans
        .iter()
        .find(|s| s.name == "task" && s.attributes.get("chorus.task_id") == Some(&task.id))
        .expect("the task span");
    let trace = &task_span.trace_id;

    // The first run hangs under the task, linked to StartTask.
    let lead = one("chorus-orchestrator", "run writer-workflow");
    assert_eq!(&lead.trace_id, trace);
    assert_eq!(lead.parent_span_id, task_span.span_id);
    assert_eq!(lead.attributes["chorus.run_id"], root_run);
    let start_call = spans
        .iter()
        .find(|s| s.name == "chorus.orchestrator.v1.Orchestrator/StartTask")
        .expect("the StartTask span");
    assert!(lead.links.contains(&start_call.span_id), "{lead:#?}");

    // The child run: under the Handoff call, made by the lead's chorus-tools.
    let child = one("chorus-orchestrator", "run writer");
    let chain = ancestry(child, &by_id);
    let path = names(&chain);
    assert!(chain.iter().all(|s| &s.trace_id == trace), "{path:#?}");
    for step in [
        "chorus-orchestrator: chorus.orchestrator.v1.Orchestrator/Handoff",
        "chorus-tools: chorus-tools handoff",
        "chorus-orchestrator: run writer-workflow",
        "chorus-orchestrator: task",
    ] {
        assert!(path.contains(&step.to_owned()), "{step} not in {path:#?}");
    }

    // A tool call: chorus-tools → tool-exec's ExecuteTool → authorize, execute
    // and record, each asking the orchestrator under its own span.
    let execute = one("chorus-tool-exec", "execute file.create");
    let path = names(&ancestry(execute, &by_id));
    for step in [
        "chorus-tool-exec: chorus.tools.v1.ToolExec/ExecuteTool",
        "chorus-tools: chorus-tools file.create",
        "chorus-orchestrator: run writer",
        "chorus-orchestrator: task",
    ] {
        assert!(path.contains(&step.to_owned()), "{step} not in {path:#?}");
    }
    assert_eq!(execute.attributes["chorus.outcome"], "ok");
    let recorded = spans
        .iter()
        .find(|s| {
            s.service == "chorus-orchestrator"
                && s.name == "chorus.orchestrator.v1.AgentTools/RecordToolCall"
                && names(&ancestry(s, &by_id)).contains(&"chorus-tool-exec: record".to_owned())
        })
        .expect("the orchestrator's RecordToolCall under tool-exec's record span");
    assert_eq!(&recorded.trace_id, trace);
    for authorized in spans.iter().filter(|s| {
        s.service == "chorus-orchestrator"
            && s.name == "chorus.orchestrator.v1.AgentTools/AuthorizeToolCall"
    }) {
        let path = names(&ancestry(authorized, &by_id));
        assert!(
            path.contains(&"chorus-tool-exec: authorize".to_owned())
                && path.last().is_some_and(|root| root.ends_with("CreateTask")),
            "{path:#?}"
        );
    }

    // Every span of the task's work is in the task's trace.
    let runs: Vec<&String> = spans
        .iter()
        .filter(|s| s.attributes.get("chorus.task_id") == Some(&task.id))
        .filter_map(|s| s.attributes.get("chorus.run_id"))
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for span in spans.iter().filter(|s| {
        s.attributes.get("chorus.task_id") == Some(&task.id)
            || s.attributes
                .get("chorus.run_id")
                .is_some_and(|r| runs.contains(&r))
    }) {
        assert_eq!(&span.trace_id, trace, "{span:#?}");
    }

    // The API agent's model requests: under its run, in its task's trace.
    let api_run = one("chorus-orchestrator", "run reader");
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "chat fake-model")
        .collect();
    // The tool call, the answer, and the reminder to report.
    assert!(chats.len() >= 2, "{chats:#?}");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, api_run.span_id);
        assert_eq!(chat.trace_id, api_run.trace_id);
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.request.model"], "fake-model");
        assert!(
            chat.attributes["gen_ai.usage.input_tokens"]
                .parse::<u64>()
                .is_ok_and(|n| n > 0),
            "{chat:#?}"
        );
        assert!(chat.attributes.contains_key("gen_ai.usage.output_tokens"));
    }
    // Its tool call went to tool-exec within the same trace.
    let read = spans
        .iter()
        .find(|s| s.name == "execute file.read" && s.trace_id == api_run.trace_id)
        .expect("the API agent's file.read in tool-exec");
    assert!(names(&ancestry(read, &by_id)).contains(&"chorus-orchestrator: run reader".to_owned()));

    // The metrics of both services.
    receiver
        .wait_until(
            "the run, tool, handoff, event, RPC, refusal and connection metrics",
            |_, points| {
                [
                    ("chorus-orchestrator", "chorus.runs.started"),
                    ("chorus-orchestrator", "chorus.runs.ended"),
                    ("chorus-orchestrator", "chorus.handoff.duration"),
                    ("chorus-orchestrator", "chorus.events.appended"),
                    ("chorus-orchestrator", "rpc.server.call.duration"),
                    ("chorus-orchestrator", "gen_ai.client.token.usage"),
                    ("chorus-orchestrator", "chorus.db.pool.connections"),
                    ("chorus-orchestrator", "chorus.runs.active"),
                    ("chorus-orchestrator", "chorus.refusals"),
                    ("chorus-orchestrator", "chorus.connections.open"),
                    ("chorus-tool-exec", "chorus.connections.open"),
                    ("chorus-orchestrator", "chorus.sandbox"),
                    ("chorus-tool-exec", "chorus.sandbox"),
                    ("chorus-tool-exec", "chorus.tool.calls"),
                    ("chorus-tool-exec", "chorus.tool.duration"),
                    ("chorus-tool-exec", "rpc.server.call.duration"),
                ]
                .iter()
                .all(|(service, metric)| {
                    points
                        .iter()
                        .any(|p| p.service == *service && p.metric == *metric)
                })
            },
        )
        .await;
    let points = receiver.points();
    let ended: f64 = points
        .iter()
        .filter(|p| {
            p.metric == "chorus.runs.ended"
                && p.attributes.get("chorus.end").map(String::as_str) == Some("completed")
        })
        .map(|p| p.value)
        .fold(0.0, f64::max);
    assert!(ended >= 1.0, "{points:#?}");
    assert!(points.iter().any(|p| p.metric == "chorus.tool.calls"
        && p.attributes.get("chorus.tool").map(String::as_str) == Some("file.create")
        && p.attributes.get("chorus.outcome").map(String::as_str) == Some("ok")));
    assert!(
        points.iter().any(|p| p.metric == "chorus.refusals"
            && p.attributes.get("chorus.reason").map(String::as_str) == Some("unauthenticated")
            && p.attributes.get("chorus.caller").map(String::as_str) == Some("anonymous")
            && p.value >= 1.0),
        "{points:#?}"
    );
    // Which sandbox each service has, and its tier.
    for service in ["chorus-orchestrator", "chorus-tool-exec"] {
        assert!(
            points.iter().any(|p| p.service == service
                && p.metric == "chorus.sandbox"
                && p.attributes.contains_key("chorus.sandbox.state")
                && p.attributes.contains_key("chorus.sandbox.tier")),
            "{service}: {points:#?}"
        );
    }
}
