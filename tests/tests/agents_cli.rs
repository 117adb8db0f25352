//! Agents run by the orchestrator through CLI providers, with the fake CLI in
//! place of the model: the real flags, environment, chorus-tools, tool-exec and
//! orchestrator. A task is started, tools are called (one allowed, one denied),
//! the completion report settles it; failures, timeouts, cancels and missing
//! reports end it with a reason; no process of a run survives it.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{TEST_UID, running_as_root, survivors};
use chorus_tests::agents::{
    self, Client, data, ends_run, planned_task, start, summary, task_of, team, wait_for,
};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

/// An orchestrator whose CLIs are the fake CLI; it keeps run directories (the
/// fake CLI writes what it was given there).
async fn orchestrator(data_dir: &Path) -> Orchestrator {
    orchestrator_keeping(data_dir, true).await
}

async fn orchestrator_keeping(data_dir: &Path, keep_run_dirs: bool) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data_dir, |config| {
        config.runner.keep_run_dirs = keep_run_dirs;
    })
    .await
}

async fn cli_team(client: &mut Client, root: &Path, kind: pb::ProviderKind) -> agents::Team {
    team(
        client,
        root,
        kind,
        "",
        "",
        "",
        &["file.read", "task.comment"],
        "You read notes and report.",
    )
    .await
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("record")).expect("json")
}

fn env_of(record: &Value, name: &str) -> String {
    record["env"][name].as_str().unwrap_or_default().to_owned()
}

async fn completes_with_one_allowed_and_one_denied_tool(
    kind: pb::ProviderKind,
    transport: pb::ToolTransport,
) {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("seed");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), kind).await;
    agents::use_transport(&mut client, &team, transport).await;
    let script = format!(
        "Read the notes.\n\
         fake: record {}\n\
         fake: say Reading the notes.\n\
         fake: call {{\"tool\":\"file.read\",\"path\":\"notes.txt\"}}\n\
         fake: call {{\"tool\":\"file.write\",\"path\":\"notes.txt\",\"content\":\"x\"}}\n\
         fake: call {{\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"Read the notes.\",\"output\":\"alpha\"}}\n\
         fake: say Done.",
        "record.json"
    );
    let task = planned_task(&mut client, &team.workspace, &script).await;
    // A cost limit: Claude Code gets what is left of it as its own limit too.
    client
        .update_task_budget(pb::UpdateTaskBudgetRequest {
            task_id: task.id.clone(),
            budget: Some(pb::Budget {
                cost_usd: Some(2.5),
                ..Default::default()
            }),
        })
        .await
        .expect("a budget");
    let started = start(&mut client, &task, &team.agent, 0).await;
    assert_eq!(started.task.expect("task").status, "active");
    let run = started.run.expect("run");
    assert_eq!(run.state, "spawning");

    let events = wait_for(&mut client, &task.id, ends_run).await;
    let kinds = summary(&events);
    let expected = [
        "run_opened",
        "status_changed active",
        "agent_started",
        "tool_executed file.read ok",
        "tool_denied file.write",
        "completion_report_submitted complete",
        "status_changed completed",
        "tool_executed completion-report ok",
        "agent_completed",
    ];
    let mut at = 0;
    for step in expected {
        let found = kinds[at..].iter().position(|k| k == step);
        assert!(
            found.is_some(),
            "'{step}' missing (in order) from {kinds:#?}"
        );
        at += found.unwrap_or(0) + 1;
    }
    assert!(
        kinds.iter().any(|k| k == "agent_progress text"),
        "{kinds:#?}"
    );
    assert!(
        kinds
            .iter()
            .any(|k| k.starts_with("agent_progress") && k.ends_with(" tool_use")),
        "{kinds:#?}"
    );
    let denied = events
        .iter()
        .find(|e| e.kind == "tool_denied")
        .expect("denied");
    assert!(
        data(denied)["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed")
    );
    let completed = data(events.last().expect("end"));
    assert_eq!(completed["reason"], "completed");
    assert!(
        completed["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{completed}"
    );
    assert!(
        completed["session_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("sess-") || s.starts_with("sess")),
        "{completed}"
    );

    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "completed");
    let run = client
        .get_run(pb::GetRunRequest { id: run.id.clone() })
        .await
        .expect("run")
        .into_inner();
    assert_eq!(run.state, "finished");
    assert!(!run.session_id.is_empty());
    assert!(run.usage.expect("usage").output_tokens > 0);

    // What the CLI was given.
    let record = read_json(&orchestrator.run_file("record.json"));
    let argv: Vec<String> = serde_json::from_value(record["argv"].clone()).expect("argv");
    let chorus_tools = chorus_tests::chorus_tools_bin().display().to_string();
    let flag = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .map(|i| argv[i + 1].clone())
    };
    match (kind, transport) {
        (pb::ProviderKind::ClaudeCode, pb::ToolTransport::Mcp) => {
            assert_eq!(&argv[..1], ["-p"]);
            assert_eq!(flag("--max-budget-usd").as_deref(), Some("2.500000"));
            assert_eq!(flag("--tools").as_deref(), Some(""), "no built-in tool");
            assert!(argv.contains(&"--strict-mcp-config".to_owned()));
            let config: Value =
                serde_json::from_str(&flag("--mcp-config").expect("--mcp-config")).expect("JSON");
            assert_eq!(
                config["mcpServers"]["chorus"],
                json!({"type": "stdio", "command": chorus_tools, "args": ["mcp"]}),
                "chorus-tools mcp, the only server, with no secret in it"
            );
            let allowed = flag("--allowedTools").unwrap_or_default();
            let mut allowed: Vec<&str> = allowed.split(' ').collect();
            allowed.sort_unstable();
            assert_eq!(
                allowed,
                [
                    "mcp__chorus__completion-report",
                    "mcp__chorus__file_read",
                    "mcp__chorus__help",
                    "mcp__chorus__task_comment",
                ],
                "exactly the granted tools"
            );
            assert_eq!(flag("--disallowedTools").as_deref(), Some("Agent Task"));
            assert!(
                !argv.iter().any(|a| a.contains("Bash")),
                "no shell at all: {argv:?}"
            );
            let prompt = flag("--append-system-prompt").expect("system prompt");
            assert!(prompt.starts_with("You read notes and report."), "{prompt}");
            assert!(
                !prompt.contains("chorus-tools") && prompt.contains("completion-report tool"),
                "native tools, not the shell form: {prompt}"
            );
        }
        (pb::ProviderKind::ClaudeCode, _) => {
            assert_eq!(&argv[..1], ["-p"]);
            assert_eq!(flag("--max-budget-usd").as_deref(), Some("2.500000"));
            assert_eq!(flag("--output-format").as_deref(), Some("stream-json"));
            assert!(argv.contains(&"--verbose".to_owned()));
            assert_eq!(flag("--tools").as_deref(), Some("Bash"));
            assert_eq!(
                flag("--allowedTools"),
                Some(format!("Bash({chorus_tools} *)"))
            );
            assert_eq!(flag("--disallowedTools").as_deref(), Some("Agent Task"));
            let prompt = flag("--append-system-prompt").expect("system prompt");
            assert!(prompt.starts_with("You read notes and report."), "{prompt}");
            assert!(
                prompt.contains(&format!("{chorus_tools} '{{\"tool\": \"<name>\"")),
                "{prompt}"
            );
            assert!(
                prompt.contains("### file.read") && !prompt.contains("### file.write"),
                "{prompt}"
            );
        }
        (_, pb::ToolTransport::Mcp) => {
            assert_eq!(&argv[..3], ["run", "--format", "json"]);
            let config: Value =
                serde_json::from_str(&env_of(&record, "OPENCODE_CONFIG_CONTENT")).expect("config");
            assert_eq!(
                config["mcp"]["chorus"],
                json!({"type": "local", "command": [chorus_tools, "mcp"], "enabled": true})
            );
            assert_eq!(config["tools"]["bash"], false, "no shell at all");
            assert_eq!(config["permission"]["bash"], "deny");
            for tool in ["edit", "write", "read", "webfetch", "task"] {
                assert_eq!(config["tools"][tool], false, "{tool}");
            }
        }
        _ => {
            assert_eq!(&argv[..3], ["run", "--format", "json"]);
            let config: Value =
                serde_json::from_str(&env_of(&record, "OPENCODE_CONFIG_CONTENT")).expect("config");
            // Only a plain call: one single-quoted argument, nothing after it.
            let bash: Vec<(String, String)> = config["permission"]["bash"]
                .as_object()
                .expect("bash rules")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            assert_eq!(
                bash,
                [
                    ("*".to_owned(), "deny".to_owned()),
                    (format!("{chorus_tools} '*'"), "allow".to_owned()),
                    (format!("{chorus_tools} '*'*'*"), "deny".to_owned()),
                ]
            );
            assert_eq!(config["permission"]["external_directory"], "deny");
            assert_eq!(config["permission"]["edit"], "deny");
            assert_eq!(config["tools"]["bash"], true);
            assert_eq!(config["tools"]["edit"], false);
            let instructions = config["instructions"][0]
                .as_str()
                .expect("instructions file");
            assert!(instructions.ends_with("chorus-instructions.md"));
        }
    }
    // In its run directory's empty work directory, not the workspace (which
    // its sandbox does not show), as the workspace's owner.
    let home = env_of(&record, "HOME");
    let run_dir = Path::new(&home).parent().expect("run dir");
    assert!(
        home.starts_with(&orchestrator.runs.path().display().to_string()),
        "{home}"
    );
    assert_eq!(
        record["cwd"].as_str(),
        Some(run_dir.join("work").to_str().expect("utf-8"))
    );
    if running_as_root() {
        assert_eq!(record["uid"], TEST_UID);
    }
    assert!(env_of(&record, "PATH").starts_with(&format!(
        "{}:",
        Path::new(&chorus_tools).parent().expect("dir").display()
    )));
    assert_eq!(env_of(&record, "CHORUS_TASK_ID"), task.id);
    assert_eq!(
        env_of(&record, "CHORUS_TOOLS_ADDR"),
        orchestrator.tool_exec_addr.to_string()
    );
    assert_eq!(
        env_of(&record, "CHORUS_ORCHESTRATOR_ADDR"),
        orchestrator.addr.to_string()
    );

    // The ended run's token can do nothing, and leaves no trace.
    let last = task.last_sequence;
    let env = chorus_tests::ToolsEnv {
        token: Some(env_of(&record, "CHORUS_RUN_TOKEN")),
        tools_addr: Some(orchestrator.tool_exec_addr.to_string()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };
    for call in [
        r#"{"tool":"file.read","path":"notes.txt"}"#,
        r#"{"tool":"task.comment","text":"late"}"#,
    ] {
        let out = chorus_tests::chorus_tools(&env, &[call]).await;
        out.expect_failure(1, "failed_precondition");
    }
    assert_eq!(
        task_of(&mut client, &task.id).await.last_sequence,
        last,
        "no trace of refused calls"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_agent_completes_a_task_through_chorus_tools() {
    completes_with_one_allowed_and_one_denied_tool(
        pb::ProviderKind::ClaudeCode,
        pb::ToolTransport::Shell,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opencode_agent_completes_a_task_through_chorus_tools() {
    completes_with_one_allowed_and_one_denied_tool(
        pb::ProviderKind::Opencode,
        pb::ToolTransport::Shell,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_agent_completes_a_task_over_mcp_with_no_shell() {
    completes_with_one_allowed_and_one_denied_tool(
        pb::ProviderKind::ClaudeCode,
        pb::ToolTransport::Mcp,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opencode_agent_completes_a_task_over_mcp_with_no_shell() {
    completes_with_one_allowed_and_one_denied_tool(
        pb::ProviderKind::Opencode,
        pb::ToolTransport::Mcp,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ends_without_a_report_is_resumed_once_with_a_reminder() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::ClaudeCode).await;
    let script = "fake: say I looked around.\n\
         fake-resume: record resumed.json\n\
         fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"Reported after the reminder.\",\"output\":\"none\"}";
    let task = planned_task(&mut client, &team.workspace, script).await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let kinds = summary(&events);
    assert!(
        kinds.contains(&"agent_progress reminder".to_owned()),
        "{kinds:#?}"
    );
    assert!(
        kinds.contains(&"status_changed completed".to_owned()),
        "{kinds:#?}"
    );
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    let record = read_json(&orchestrator.run_file("resumed.json"));
    let argv: Vec<String> = serde_json::from_value(record["argv"].clone()).expect("argv");
    let resume = argv
        .iter()
        .position(|a| a == "--resume")
        .map(|i| argv[i + 1].clone());
    assert!(
        resume.as_deref().is_some_and(|s| s.starts_with("sess-")),
        "{argv:?}"
    );
    assert!(
        argv[1].contains("completion report"),
        "the reminder is the new message: {argv:?}"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_reports_leaves_the_task_waiting_with_the_reason() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::Opencode).await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "fake: say nothing to report\nfake-resume: say still nothing",
    )
    .await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert!(summary(&events).contains(&"agent_progress reminder".to_owned()));
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "waiting");
    assert_eq!(
        task.status_reason,
        "agent 'worker' ended without a completion report, even after a reminder"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cli_fails_the_task_with_its_exit_code_and_last_stderr_lines() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::ClaudeCode).await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "fake: stderr model overloaded, giving up\nfake: exit 3",
    )
    .await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let end = events.last().expect("end");
    assert_eq!(end.kind, "run_failed");
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(
        task.status_reason,
        format!(
            "{} exited with code 3; last output:\nmodel overloaded, giving up",
            "claude"
        )
    );
    assert_eq!(data(end)["reason"], task.status_reason);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cli_fails_the_run_with_a_message_naming_it() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key pair");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| config.runner.claude_bin = "/nonexistent/claude".into(),
    )
    .await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::ClaudeCode).await;
    let task = planned_task(&mut client, &team.workspace, "anything").await;
    start(&mut client, &task, &team.agent, 0).await;
    wait_for(&mut client, &task.id, ends_run).await;
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "failed");
    assert!(
        task.status_reason
            .starts_with("cannot start /nonexistent/claude:"),
        "{}",
        task.status_reason
    );
    orchestrator.stop().await;
}

/// Starts a run whose CLI leaves children that try every way out of the run
/// (each with `marker` as an argument) and waits until they run; returns the task.
async fn stubborn_run(
    client: &mut Client,
    root: &Path,
    marker: &str,
    timeout_secs: u32,
) -> pb::Task {
    let team = cli_team(client, root, pb::ProviderKind::ClaudeCode).await;
    let task = planned_task(client, &team.workspace, &format!("fake: stubborn {marker}")).await;
    start(client, &task, &team.agent, timeout_secs).await;
    wait_for(client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "stubborn children started"
    })
    .await;
    // A shell forking a child looks like one more escapee until the child has
    // exec'd: wait until exactly the escapees are left.
    chorus_sandbox::testing::eventually("the children run before the end", || {
        survivors(marker).len() == chorus_sandbox::testing::ESCAPEES
    })
    .await;
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_every_process_of_the_run_even_ones_that_left_its_group() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let marker = &format!("chorus-escapee-run-timeout-{}", std::process::id());
    let task = stubborn_run(&mut client, root.path(), marker, 2).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(events.last().expect("end").kind, "run_failed");
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "alive after the timeout"
    );
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "failed");
    assert!(
        task.status_reason.starts_with("timed out after 2 s"),
        "{}",
        task.status_reason
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_every_process_of_the_run_before_it_returns() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let marker = &format!("chorus-escapee-cancel-task-{}", std::process::id());
    let task = stubborn_run(&mut client, root.path(), marker, 0).await;
    let canceled = client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "the user changed their mind".into(),
            ..Default::default()
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(canceled.status, "canceled");
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "alive after CancelTask returned"
    );
    let events = wait_for(&mut client, &task.id, |e| e.kind == "run_canceled").await;
    assert_eq!(
        data(events.last().expect("event"))["reason"],
        "the task was canceled: the user changed their mind"
    );
    let again = client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: String::new(),
            ..Default::default()
        })
        .await
        .expect_err("a canceled task cannot be canceled again");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_the_runs_and_hands_them_on_to_be_resumed_at_the_next_start() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator_again(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let marker = &format!("chorus-escapee-shutdown-{}", std::process::id());
    let task = stubborn_run(&mut client, root.path(), marker, 0).await;
    let run = chorus_tests::agents::runs_of(&mut client, &task.id, "")
        .await
        .remove(0);
    orchestrator.stop().await;
    assert_eq!(survivors(marker), Vec::<i32>::new(), "alive after shutdown");
    // Start again on the same database: the run was handed on, not ended; the
    // replica takes it back and resumes its session (the fake CLI, resumed,
    // plays no step and ends; reminded, it ends again without a report).
    let orchestrator = orchestrator_again(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let story = summary(&events);
    assert!(!story.contains(&"run_interrupted".to_owned()), "{story:#?}");
    let resumed = events
        .iter()
        .find(|e| e.kind == "run_resumed")
        .unwrap_or_else(|| panic!("the run was resumed: {story:#?}"));
    let resumed = data(resumed);
    assert_eq!(resumed["run_id"], run.id.as_str());
    assert_eq!(resumed["epoch"], 1);
    assert_eq!(resumed["from_replica"], "local");
    assert_eq!(resumed["session_id"], run.session_id.as_str());
    // The resumed CLI was given the session and told what happened.
    let last = chorus_tests::agents::runs_of(&mut client, &task.id, "")
        .await
        .remove(0);
    assert_eq!(
        (last.epoch, last.session_id.as_str()),
        (1, run.session_id.as_str())
    );
    orchestrator.stop().await;
}

/// An orchestrator whose run directories (the CLIs' sessions) are in
/// `data_dir`, so the next one on the same data finds them.
async fn orchestrator_again(data_dir: &Path) -> Orchestrator {
    let runs = data_dir.join("runs");
    Orchestrator::with_fake_cli_on_sqlite(data_dir, move |config| {
        config.runner.keep_run_dirs = true;
        config.runner.runs_dir = runs;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_directory_is_private_to_the_run_and_removed_after_it() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator_keeping(data_dir.path(), false).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::ClaudeCode).await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "fake: shell stat -c '%a %u' \"$HOME/..\" \"$HOME\" \"$TMPDIR\"\nfake: save stat.json\nfake: wait gate",
    )
    .await;
    start(&mut client, &task, &team.agent, 0).await;
    wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "waiting on gate"
    })
    .await;
    let saved = chorus_tests::agents::saved(&orchestrator.run_file("stat.json"));
    let uid = if running_as_root() {
        TEST_UID
    } else {
        nix::unistd::geteuid().as_raw()
    };
    // The run directory, its HOME and its TMPDIR: owner-only, the run's user's.
    assert_eq!(saved["stdout"], format!("700 {uid}\n").repeat(3), "{saved}");
    std::fs::write(orchestrator.run_file("gate"), "go").expect("open the gate");
    wait_for(&mut client, &task.id, ends_run).await;
    let left: Vec<_> = std::fs::read_dir(orchestrator.runs.path().join("runs"))
        .expect("runs dir")
        .collect();
    assert!(
        left.is_empty(),
        "the run directory is removed after the run: {left:?}"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_task_refuses_what_cannot_run_and_changes_nothing() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = cli_team(&mut client, root.path(), pb::ProviderKind::ClaudeCode).await;
    // Not planned yet.
    let pending = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: team.workspace.id.clone(),
            description: "d".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let request = |task: &str, agent: &str| pb::StartTaskRequest {
        task_id: task.into(),
        agent: agent.into(),
        prompt: String::new(),
        timeout_secs: 0,
    };
    let err = client
        .start_task(request(&pending.id, "worker"))
        .await
        .expect_err("pending");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("pending"), "{}", err.message());
    let planned = planned_task(&mut client, &team.workspace, "d").await;
    let err = client
        .start_task(request(&planned.id, ""))
        .await
        .expect_err("no agent");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("assign one in the task's plan"),
        "{}",
        err.message()
    );
    let err = client
        .start_task(request(&planned.id, "ghost"))
        .await
        .expect_err("unknown agent");
    assert_eq!(err.code(), tonic::Code::NotFound);
    client
        .create_agent(pb::CreateAgentRequest {
            budget: None,
            workspace_id: team.workspace.id.clone(),
            name: "loner".into(),
            instructions: "i".into(),
            allowed_tools: vec![],
            provider: String::new(),
            model: String::new(),
            egress: Vec::new(),
            approval_rules: Vec::new(),
        })
        .await
        .expect("agent");
    let err = client
        .start_task(request(&planned.id, "loner"))
        .await
        .expect_err("no provider");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        err.message(),
        "agent 'loner' has no provider and workspace 'team' has no system provider to run it on; give the agent one with UpdateAgent, or set the workspace's system_provider with UpdateWorkspace"
    );
    let after = task_of(&mut client, &planned.id).await;
    assert_eq!(
        (after.status.as_str(), after.last_sequence),
        ("planned", planned.last_sequence + 2)
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_provider_runs_on_the_workspaces_system_provider() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = agents::workspace(&mut client, "fallback", root.path()).await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "house".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    // The default writer has no provider; without a system provider it cannot run.
    let task = planned_task(&mut client, &ws, &agents::report("complete", "written")).await;
    let refused = client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            agent: "writer".into(),
            ..Default::default()
        })
        .await
        .expect_err("no provider at all");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains("system_provider"), "{refused:?}");
    client
        .update_workspace(pb::UpdateWorkspaceRequest {
            limits: None,
            id: ws.id.clone(),
            name: None,
            system_provider: Some("house".into()),
            ..Default::default()
        })
        .await
        .expect("system provider");
    start(&mut client, &task, "writer", 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let started = events
        .iter()
        .find(|e| e.kind == "agent_started")
        .expect("agent_started");
    assert_eq!(
        data(started)["provider"],
        "house",
        "the run says which provider ran it"
    );
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    orchestrator.stop().await;
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
