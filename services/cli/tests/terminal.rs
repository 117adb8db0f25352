//! `chorus` as people and scripts use it: in a real terminal (tmux, answering
//! the planner at the prompt) and without one (`--output json`), against an
//! orchestrator whose model is a fake OpenAI-compatible server.
//!
//! The terminal test needs tmux; it is skipped without it, unless
//! `CHORUS_TEST_REQUIRE_TMUX=1` (CI), where a missing tmux fails it.

use std::process::Stdio;
use std::time::Duration;

use chorus_tests::fake_openai::Step;
use chorus_tests::git::git;
use serde_json::{Value, json};

mod support;

use support::{CHORUS, Stage, Tmux, command_lines, json_lines, plan, questions, report};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_runs_a_task_answers_the_planner_at_the_prompt_and_sees_it_complete() {
    let stage = Stage::new(vec![
        questions(),
        // A second round, after reading the first answers.
        Step::tool_call(
            "planner-output",
            json!({"type": "questions", "questions": ["Loud or quiet?"]}),
        ),
        plan(),
        Step::tool_call(
            "file_create",
            json!({"path": "hello.txt", "content": "hello\n"}),
        ),
        Step::tool_call("file_read", json!({"path": "../../etc/passwd"})),
        report("complete", "Wrote hello.txt"),
    ])
    .await;
    let env = stage.env_words();
    let command = format!(
        "env {env} {CHORUS} task run 'Greet the world in hello.txt' --workspace demo --follow; echo EXIT=$?; exec cat"
    );
    let Some(tmux) = Tmux::start(&command, stage.dir.path()) else {
        return;
    };
    tmux.wait_for("? 1. Which greeting?").await;
    // While chorus waits at the prompt: its key is in no process's command line.
    let key = &stage.orchestrator.admin_key;
    let shown: Vec<String> = command_lines()
        .into_iter()
        .filter(|c| c.contains(key.as_str()))
        .collect();
    assert!(shown.is_empty(), "the key is in a command line: {shown:?}");

    tmux.send("Hello");
    tmux.wait_for("? 2. For whom?").await;
    tmux.send("The world");
    // The second round asks only its own question.
    tmux.wait_for("? 1. Loud or quiet?").await;
    tmux.send("Quiet");
    let screen = tmux.wait_for("EXIT=").await;
    for expected in [
        "? the planner asks:",
        "plan: Write hello.txt (2 steps, agent: writer)",
        "▶ writer started",
        "✓ file.create hello.txt",
        "✗ permission_denied file.read ../../etc/passwd: path '../../etc/passwd' is outside the workspace root",
        "■ report (complete): Wrote hello.txt",
        "● active → completed",
        "completed · 4 run(s)",
        "EXIT=0",
    ] {
        assert!(screen.contains(expected), "no '{expected}' in:\n{screen}");
    }
    assert!(
        !screen.contains("needs you: start it"),
        "the CLI starts the plan itself:\n{screen}"
    );
    assert_eq!(
        std::fs::read_to_string(stage.root.path().join("hello.txt")).expect("the agent's file"),
        "hello\n"
    );
    // The planner's third run read both rounds and their answers.
    let third = stage.model.requests()[2]["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for qa in [
        "Q: Which greeting?\nA: Hello",
        "Q: For whom?\nA: The world",
        "Q: Loud or quiet?\nA: Quiet",
    ] {
        assert!(
            third.contains(qa),
            "no {qa:?} in the planner's message: {third}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_gets_json_lines_and_an_exit_code_that_says_how_the_task_ended() {
    let stage = Stage::new(vec![
        plan(),
        Step::tool_call("file_create", json!({"path": "a.txt", "content": "a\n"})),
        report("complete", "Wrote a.txt"),
        plan(),
        report("failed", "The file system is read-only"),
        questions(),
    ])
    .await;

    let (code, stdout, stderr) = stage
        .run(&[
            "task",
            "run",
            "Write a.txt",
            "-w",
            "demo",
            "--follow",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let lines = json_lines(&stdout);
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
    assert!(kinds.contains(&"tool_executed"), "{kinds:?}");
    assert!(kinds.contains(&"completion_report_submitted"), "{kinds:?}");
    let end = lines.last().expect("a last line");
    assert_eq!(end["end"], "completed", "{end}");
    assert_eq!(end["exitCode"], 0, "{end}");

    let (code, stdout, stderr) = stage
        .run(&[
            "task",
            "run",
            "Write b.txt",
            "-w",
            "demo",
            "--follow",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 3, "a failed task exits 3: {stdout}\n{stderr}");
    let end = json_lines(&stdout).pop().expect("a last line");
    assert_eq!(end["end"], "failed", "{end}");

    // The planner asks, and no one is at a terminal to answer: exit 5, and how to answer.
    let (code, stdout, stderr) = stage
        .run(&[
            "task",
            "run",
            "Write c.txt",
            "-w",
            "demo",
            "--follow",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 5, "{stdout}\n{stderr}");
    let end = json_lines(&stdout).pop().expect("a last line");
    assert_eq!(end["end"], "needs_you", "{end}");
    let task = end["taskId"].as_str().expect("task id");
    assert_eq!(
        end["action"],
        format!("answer the planner's questions: chorus task answer {task}"),
        "{end}"
    );

    // The list shows all three, as JSON.
    let (code, stdout, _) = stage.run(&["task", "list", "-o", "json"]).await;
    assert_eq!(code, 0);
    let tasks: Vec<Value> = serde_json::from_str(&stdout).expect("a JSON list");
    let statuses: Vec<&str> = tasks.iter().filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, ["completed", "failed", "awaiting_input"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_or_address_says_what_to_fix() {
    let stage = Stage::new(Vec::new()).await;
    let (code, stdout, stderr) = stage.run(&["status"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("LIVE RUNS") && stdout.contains("QUEUED RUNS"),
        "status says how many runs go and how many wait for a place: {stdout}"
    );

    let wrong = stage.dir.path().join("wrong.key");
    std::fs::write(&wrong, "chorus_wrong_key\n").expect("write");
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let key = [("CHORUS_API_KEY_FILE", wrong.as_path())];
    let (code, _, stderr) = stage.run_with(&["status"], &key).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("the API key was refused"), "{stderr}");

    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let (code, _, stderr) = stage.run_with(&["status"], &key).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("chmod 600"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_list_watch_prints_each_change_as_it_happens() {
    use tokio::io::AsyncBufReadExt as _;
    let stage = Stage::new(Vec::new()).await;
    let mut watch = tokio::process::Command::new(CHORUS)
        .args(["task", "list", "--watch", "-o", "json"])
        .envs(stage.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("chorus task list --watch");
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().expect("stdout")).lines();
    // The listing is done and following has begun.
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the listing within the bound")
            .expect("read")
            .expect("a line");
        let line: Value = serde_json::from_str(&line).expect("JSON");
        if line["caughtUp"]["cursor"]
            .as_str()
            .is_some_and(|c| c.starts_with("f1."))
        {
            break;
        }
    }
    let (code, stdout, stderr) = stage
        .run(&["task", "create", "watch me", "-w", "demo", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let created: Value = serde_json::from_str(&stdout).expect("the task as JSON");
    let id = created["id"].as_str().expect("id").to_owned();
    let (code, _, stderr) = stage.run(&["task", "cancel", &id]).await;
    assert_eq!(code, 0, "{stderr}");
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("a change within the bound")
            .expect("read")
            .expect("a line");
        let change: Value = serde_json::from_str(&line).expect("JSON");
        if change["event"]["taskId"] == id.as_str() {
            kinds.push(format!(
                "{} {}",
                change["event"]["kind"].as_str().unwrap_or_default(),
                change["event"]["data"]["to"].as_str().unwrap_or_default()
            ));
        }
    }
    assert_eq!(kinds, ["task_created ", "status_changed canceled"]);
}

/// `agent update` changes only what it is given, and a provider that does not
/// exist is refused, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_update_changes_only_what_it_is_given() {
    let stage = Stage::new(Vec::new()).await;
    let show = || async {
        let (code, stdout, stderr) = stage
            .run(&["agent", "show", "editor", "-w", "demo", "-o", "json"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<Value>(&stdout).expect("JSON")
    };
    let before = show().await;
    let (code, stdout, stderr) = stage
        .run(&[
            "agent",
            "update",
            "editor",
            "-w",
            "demo",
            "--provider",
            "model",
            "--tools",
            "file.read,completion-report",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let updated: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(updated["provider"], "model");
    assert_eq!(
        updated["allowedTools"],
        json!(["file.read", "completion-report"])
    );
    assert_eq!(updated["instructions"], before["instructions"], "kept");

    let (code, _, stderr) = stage
        .run(&[
            "agent",
            "update",
            "editor",
            "-w",
            "demo",
            "--provider",
            "nope",
        ])
        .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("provider 'nope'"), "{stderr}");
    assert_eq!(show().await, updated, "a refused update changes nothing");
}

/// `task budget` sets a task's limits (a 0 is refused, naming it) and
/// `usage` sums what model calls cost, as JSON for scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_budget_and_usage_read_and_set_what_tasks_spend() {
    let stage = Stage::new(Vec::new()).await;
    let (code, stdout, stderr) = stage
        .run(&["task", "create", "spend little", "-w", "demo", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let task: Value = serde_json::from_str(&stdout).expect("JSON");
    let id = task["id"].as_str().expect("id").to_owned();
    let (code, stdout, stderr) = stage
        .run(&[
            "task",
            "budget",
            &id,
            "--cost-usd",
            "2.5",
            "--tool-calls",
            "40",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let task: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        task["budget"]["limits"],
        json!({"costUsd": 2.5, "tokens": null, "toolCalls": 40, "wallSecs": null})
    );
    let (code, _, stderr) = stage.run(&["task", "budget", &id, "--tokens", "0"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("tokens must be more than 0"), "{stderr}");
    // One limit given changes that one; the others stay.
    let budget_of = |stdout: &str| -> Value {
        let task: Value = serde_json::from_str(stdout).expect("JSON");
        task["budget"]["own"].clone()
    };
    let (code, stdout, stderr) = stage
        .run(&["task", "budget", &id, "--tokens", "20000", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let both = json!({"costUsd": 2.5, "tokens": 20000, "toolCalls": 40, "wallSecs": null});
    assert_eq!(budget_of(&stdout), both, "the other limits are kept");
    // Nothing given: the budget is shown, unchanged.
    let (code, stdout, stderr) = stage.run(&["task", "budget", &id, "-o", "json"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(budget_of(&stdout), both, "a bare command changes nothing");
    // A cost that cannot be kept is refused, naming the largest, and changes nothing.
    for huge in ["1e15", "1e300", "inf"] {
        let (code, _, stderr) = stage
            .run(&["task", "budget", &id, "--cost-usd", huge])
            .await;
        assert_eq!(code, 1, "{huge}: {stderr}");
        assert!(
            stderr.contains("the largest cost limit is $9223372.036855")
                || stderr.contains("is not an amount of US dollars"),
            "{huge}: {stderr}"
        );
    }
    let (_, stdout, _) = stage.run(&["task", "budget", &id, "-o", "json"]).await;
    assert_eq!(budget_of(&stdout), both, "refused: nothing changed");
    // --clear removes them all.
    let (code, stdout, stderr) = stage
        .run(&["task", "budget", &id, "--clear", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        budget_of(&stdout),
        json!({"costUsd": null, "tokens": null, "toolCalls": null, "wallSecs": null})
    );

    let (code, stdout, stderr) = stage
        .run(&["usage", "-w", "demo", "--by", "agent,day", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let usage: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(usage["total"]["modelCalls"], 0, "{usage}");
    assert!(
        usage["from"].as_str().is_some_and(|d| d.len() == 10),
        "{usage}"
    );
    let (code, _, stderr) = stage.run(&["usage", "--by", "team"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("agent, provider"), "{stderr}");
}

/// A workspace's spending limits and an agent's default task budget, set
/// from the command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_limits_and_an_agents_default_budget_are_set_from_the_command_line() {
    let stage = Stage::new(Vec::new()).await;
    let (code, stdout, stderr) = stage
        .run(&[
            "workspace",
            "limits",
            "demo",
            "--daily-usd",
            "20",
            "--task-tokens",
            "5000",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let w: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(w["limits"]["dailyCostUsd"], 20.0, "{w}");
    assert_eq!(w["limits"]["taskBudget"]["tokens"], 5000, "{w}");
    assert_eq!(w["limits"]["monthlyCostUsd"], Value::Null, "{w}");
    let (code, _, stderr) = stage
        .run(&["workspace", "limits", "demo", "--daily-usd", "0"])
        .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("daily_cost_usd"), "{stderr}");

    let (code, stdout, stderr) = stage
        .run(&[
            "agent",
            "update",
            "editor",
            "-w",
            "demo",
            "--budget-tool-calls",
            "30",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let a: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(a["budget"]["toolCalls"], 30, "{a}");
    let (code, stdout, stderr) = stage
        .run(&[
            "agent",
            "update",
            "editor",
            "-w",
            "demo",
            "--no-budget",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let a: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(a["budget"]["toolCalls"], Value::Null, "{a}");
}

/// `provider show` and `provider update` see and set how a CLI provider's
/// agents reach their tools (MCP by default, or the shell form), and change
/// only what they are given; what the kind cannot do is refused, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_tool_transport_is_shown_and_set_from_the_command_line() {
    let stage = Stage::new(Vec::new()).await;
    let json = |stdout: &str| -> Value { serde_json::from_str(stdout).expect("JSON") };
    let (code, stdout, stderr) = stage
        .run(&[
            "provider",
            "create",
            "cli",
            "-w",
            "demo",
            "--kind",
            "claude-code",
            "--model",
            "m1",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json(&stdout)["toolTransport"], "mcp", "MCP by default");
    let (code, stdout, stderr) = stage
        .run(&[
            "provider",
            "update",
            "cli",
            "-w",
            "demo",
            "--tool-transport",
            "shell",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let updated = json(&stdout);
    assert_eq!(
        (updated["toolTransport"].as_str(), updated["model"].as_str()),
        (Some("shell"), Some("m1")),
        "only the transport changed: {updated}"
    );
    let (code, stdout, stderr) = stage
        .run(&["provider", "show", "cli", "-w", "demo", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json(&stdout), updated);
    let (code, _, stderr) = stage
        .run(&[
            "provider",
            "update",
            "model",
            "-w",
            "demo",
            "--tool-transport",
            "shell",
        ])
        .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("tool_transport"), "{stderr}");
    let (code, stdout, _) = stage.run(&["provider", "list", "-w", "demo"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("TOOLS VIA") && stdout.contains("shell"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_reads_a_tasks_change_and_lands_it_from_the_terminal() {
    let stage = Stage::new(vec![
        Step::tool_call(
            "file_write",
            json!({"path": "greeting.txt", "content": "hello, world\n"}),
        ),
        Step::tool_call(
            "file_create",
            json!({"path": "notes/new.txt", "content": "fresh\n"}),
        ),
        report("complete", "Changed the greeting"),
    ])
    .await;
    let root = stage.root.path();
    chorus_tests::git::repository(root, &[("greeting.txt", "hello\n")]);
    let (code, stdout, stderr) = stage
        .run(&[
            "task",
            "run",
            "Greet the world",
            "-w",
            "demo",
            "--agent",
            "writer",
            "--no-plan",
            "--follow",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let end = json_lines(&stdout).pop().expect("a last line");
    let id = end["taskId"].as_str().expect("task id").to_owned();
    assert_eq!(
        std::fs::read_to_string(root.join("greeting.txt")).expect("top"),
        "hello\n",
        "the task worked on its own branch"
    );

    let env = stage.env_words();
    let command = format!(
        "env {env} {CHORUS} task show {id}; env {env} {CHORUS} task diff {id}; env {env} {CHORUS} task land {id} --mode squash -m 'Greet the world'; echo EXIT=$?; exec cat"
    );
    let Some(tmux) = Tmux::start(&command, stage.dir.path()) else {
        return;
    };
    let screen = tmux.wait_for("EXIT=").await;
    let short = &id[..8];
    for expected in [
        format!("chorus/{short} from main (open)"),
        format!("branch chorus/{short} from main (open), 0 commit(s), 2 file(s)"),
        "modified  greeting.txt  +1 -1 uncommitted".to_owned(),
        "added     notes/new.txt  +1 -0 uncommitted".to_owned(),
        "-hello".to_owned(),
        "+hello, world".to_owned(),
        "+fresh".to_owned(),
        format!("task {id} landed into main as "),
        "EXIT=0".to_owned(),
    ] {
        assert!(screen.contains(&expected), "no '{expected}' in:\n{screen}");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("greeting.txt")).expect("top"),
        "hello, world\n"
    );
    assert_eq!(
        git(root, &["log", "-1", "--format=%s", "main"]),
        "Greet the world"
    );
    assert_eq!(
        git(root, &["rev-list", "--count", "main"]),
        "2",
        "squashed: one commit"
    );

    // Landed once: a second land says so and changes nothing.
    let (code, _, stderr) = stage.run(&["task", "land", &id]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("landed already"), "{stderr}");
}
