//! The real OpenCode CLI (1.18.33, installed by `.ci/run`), run by the
//! orchestrator against the scripted fake OpenAI-compatible server: with the
//! generated inline config (only bash, bash allowed only for a plain
//! chorus-tools call) it reads a file through chorus-tools; is refused a plain
//! shell command, every redirection of a chorus-tools call (to a file outside
//! the workspace, of stderr, appending to a workspace file, and the quote
//! trick), and commands on paths outside the workspace — each refusal an answer
//! the model reads, recorded as `tool_denied` by "cli" — and still submits its
//! completion report; the task completes. Nothing is written anywhere.
//!
//! Skipped (with a notice) when `CHORUS_TEST_OPENCODE_BIN` is not set, unless
//! `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI), which makes it fail instead.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{data, ends, planned_task, start, summary, team, wait_for};
use chorus_tests::fake_anthropic::real_cli_or_skip;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

fn bash(command: String) -> Step {
    Step::tool_call(
        "bash",
        json!({"command": command, "description": "Run a Chorus tool"}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_opencode_cli_reads_and_reports_through_chorus_tools() {
    let Some(opencode) = real_cli_or_skip("CHORUS_TEST_OPENCODE_BIN", "the OpenCode CLI") else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let chorus_tools = chorus_tests::chorus_tools_bin().display().to_string();
    let outside = tempfile::tempdir().expect("outside");
    let out = |name: &str| outside.path().join(name).display().to_string();
    let notes = root.path().join("notes.txt").display().to_string();
    let read = format!(r#"{chorus_tools} '{{"tool":"file.read","path":"notes.txt"}}'"#);
    let refused = [
        "touch escaped.txt".to_owned(),
        format!("{read} > {}", out("created.txt")),
        format!("{read} 2> {}", out("stderr.txt")),
        format!("{read} >> {notes}"),
        format!("{read} > {} ''", out("quoted.txt")),
        format!("{read}; touch {}", out("second.txt")),
        "cat /etc/passwd".to_owned(),
        format!("ls {}", outside.path().display()),
    ];
    let mut steps = vec![bash(read.clone())];
    steps.extend(refused.iter().cloned().map(bash));
    steps.extend([
        bash(format!(
            r#"{chorus_tools} '{{"tool":"completion-report","status":"complete","summary":"Read the notes.","output":"alpha-from-notes"}}'"#
        )),
        Step::text("Reported."),
    ]);
    let model = FakeOpenAi::start(steps).await;
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key pair");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| {
            config.runner.opencode_bin = opencode;
            // OpenCode has no price of the fake model (it says 0): the table's.
            config.prices = chorus_orchestrator::domain::Prices::parse(
                "[models.\"fake-model\"]\ninput = 2.0\noutput = 8.0\ncache-read = 0.5\n",
            )
            .expect("a price table");
        },
    )
    .await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::Opencode,
        &model.base_url(),
        "dummy-key",
        "fake-model",
        &["file.read"],
        "You read notes and report what they say.",
    )
    .await;
    // The shell form: agents_real_mcp.rs has MCP's.
    chorus_tests::agents::use_transport(&mut client, &team, pb::ToolTransport::Shell).await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "Read notes.txt and report it.",
    )
    .await;
    let run = start(&mut client, &task, &team.agent, 180)
        .await
        .run
        .expect("run")
        .id;
    let events = wait_for(&mut client, &task.id, |e| ends(e, &run)).await;
    let kinds = summary(&events);
    for step in [
        "tool_executed file.read ok",
        "completion_report_submitted complete",
        "status_changed completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == step),
            "'{step}' missing from {kinds:#?}"
        );
    }
    let end = data(events.last().expect("end"));
    assert_eq!(end["reason"], "completed", "{end}");
    let task_usage = chorus_tests::agents::task_of(&mut client, &task.id)
        .await
        .usage
        .unwrap_or_default();
    // Each step OpenCode finished is a model call, priced by the table:
    // 7 × 2.0 + 4 × 0.5 + 7 × 8.0 = 72 micro-dollars.
    let calls = model
        .requests()
        .iter()
        .filter(|r| r["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .count() as u64;
    use chorus_tests::fake_openai::{CACHED_TOKENS, COMPLETION_TOKENS, PROMPT_TOKENS};
    assert_eq!(
        (
            task_usage.model_calls,
            task_usage.input_tokens,
            task_usage.cache_read_tokens,
            task_usage.output_tokens,
            task_usage.unpriced_calls
        ),
        (
            calls,
            calls * PROMPT_TOKENS,
            calls * CACHED_TOKENS,
            calls * COMPLETION_TOKENS,
            0
        ),
        "{task_usage:?}"
    );
    assert!(
        (task_usage.cost_usd - calls as f64 * 72e-6).abs() < 1e-9,
        "{task_usage:?}"
    );
    assert!(
        end["session_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{end}"
    );
    assert!(
        !root.path().join("escaped.txt").exists(),
        "a plain shell command is refused by the generated permissions"
    );
    let written: Vec<_> = std::fs::read_dir(outside.path())
        .expect("outside")
        .collect();
    assert!(written.is_empty(), "written outside: {written:?}");
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes"),
        "alpha-from-notes\n",
        "a workspace file appended without file.write"
    );
    // Each refusal is recorded as the CLI's.
    let denied: Vec<String> = events
        .iter()
        .filter(|e| e.kind == "tool_denied")
        .map(data)
        .filter(|d| d["by"] == "cli")
        .map(|d| {
            d["input"]["command"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(denied, refused, "{kinds:#?}");

    // What the model saw: only bash, and the results of its calls.
    let main: Vec<Value> = model
        .requests()
        .into_iter()
        .filter(|r| r["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    let tools: Vec<&str> = main[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect();
    assert_eq!(tools, ["bash"], "{tools:?}");
    let results: Vec<String> = main
        .last()
        .and_then(|r| r["messages"].as_array())
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(results[0].contains("alpha-from-notes"), "{results:?}");
    for (i, command) in refused.iter().enumerate() {
        assert!(
            results[i + 1].contains("prevents you from using this specific tool call"),
            "{command}: {}",
            results[i + 1]
        );
    }
    orchestrator.stop().await;
}
