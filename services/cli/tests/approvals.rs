//! Calls that ask for approval, met at the terminal as people meet them: a
//! run followed with no one at its input says how to answer and is approved
//! from another terminal; at a terminal the run asks at the prompt, and an
//! answer given elsewhere meanwhile ends the question.

mod support;

use chorus_tests::fake_openai::Step;
use serde_json::json;
use support::{CHORUS, Stage, Tmux, report};

/// Gives the stage's agent `writer` the one approval `rule`, with the CLI,
/// which shows it back.
async fn set_rule(stage: &Stage, rule: &str) {
    let (code, stdout, stderr) = stage
        .run(&["agent", "update", "writer", "-w", "demo", "--rule", rule])
        .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains(rule), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Followed with no one at its input (a script, a log), a run that asks
/// says how to answer, and the answer comes from another terminal.
async fn a_call_that_asks_shows_in_the_followed_run_and_is_approved_from_another_terminal() {
    let stage = Stage::new(vec![
        Step::tool_call(
            "file_create",
            json!({"path": "release.txt", "content": "v1\n"}),
        ),
        report("complete", "Wrote the release note"),
    ])
    .await;
    // The rule is set as an operator would, from the command line.
    set_rule(&stage, "ask file.create deadline=600").await;
    let env = stage.env_words();
    let command = format!(
        "env {env} {CHORUS} task run 'Write the release note' -w demo --agent writer --no-plan --follow < /dev/null; echo EXIT=$?; exec cat"
    );
    let Some(tmux) = Tmux::start(&command, stage.dir.path()) else {
        return;
    };
    let screen = tmux.wait_for("⚑ needs you: approve: chorus approve").await;
    assert!(
        screen.contains("? writer asks to run file.create") && screen.contains("release.txt"),
        "{screen}"
    );
    assert!(
        !stage.root.path().join("release.txt").exists(),
        "the call waits"
    );
    // The command to answer, as the screen gives it.
    let line = screen
        .lines()
        .find(|l| l.contains("⚑ needs you: approve: chorus approve"))
        .expect("the line");
    let words: Vec<&str> = line
        .split("chorus approve ")
        .nth(1)
        .expect("the command")
        .split_whitespace()
        .collect();
    let (task, approval) = (words[0], words[1]);
    let (code, stdout, stderr) = stage.run(&["approve", task, approval]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("approved") || stdout.contains("approved"),
        "{stdout}\n{stderr}"
    );
    let screen = tmux.wait_for("EXIT=").await;
    for expected in ["✓ approved by", "✓ file.create", "EXIT=0"] {
        assert!(screen.contains(expected), "no '{expected}' in:\n{screen}");
    }
    assert_eq!(
        std::fs::read_to_string(stage.root.path().join("release.txt")).expect("written"),
        "v1\n"
    );
    // Answered once: a second answer says so.
    let (code, _, stderr) = stage
        .run(&["approve", task, approval, "--deny", "too late"])
        .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("already answered"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_following_a_run_answers_its_calls_at_the_prompt() {
    let stage = Stage::new(vec![
        Step::tool_call("file_create", json!({"path": "one.txt", "content": "1\n"})),
        Step::tool_call("file_create", json!({"path": "two.txt", "content": "2\n"})),
        report("complete", "Wrote one of two"),
    ])
    .await;
    set_rule(&stage, "ask file.create").await;
    let env = stage.env_words();
    let command = format!(
        "env {env} {CHORUS} task run 'Write two files' -w demo --agent writer --no-plan --follow; echo EXIT=$?; exec cat"
    );
    let Some(tmux) = Tmux::start(&command, stage.dir.path()) else {
        return;
    };
    let screen = tmux.wait_for("approve it? [y]es").await;
    assert!(
        !stage.root.path().join("one.txt").exists(),
        "the call waits"
    );
    tmux.send("maybe");
    tmux.wait_for("say y, t, or n").await;
    // Answered from another terminal while the prompt waits: the prompt
    // gives way and the run goes on.
    let task = screen
        .lines()
        .find_map(|l| l.strip_prefix("task ")?.strip_suffix(" created"))
        .expect("the task's id")
        .to_owned();
    let approval = screen
        .split("approval ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the approval's id")
        .to_owned();
    let (code, stdout, stderr) = stage.run(&["approve", &task, &approval]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let screen = tmux.wait_for("was answered elsewhere: approved by").await;
    // The second call asks again; it is denied at the prompt with a reason.
    assert!(screen.contains("✓ approved by"), "{screen}");
    // Asked, asked again after "maybe", then the second call.
    let screen = tmux.wait_for_count("approve it? [y]es", 3).await;
    assert!(screen.contains("two.txt (rule"), "{screen}");
    tmux.send("n not that one");
    let screen = tmux.wait_for("EXIT=").await;
    for expected in ["⛔ denied by", "not that one", "EXIT=0"] {
        assert!(screen.contains(expected), "no '{expected}' in:\n{screen}");
    }
    assert!(stage.root.path().join("one.txt").exists());
    assert!(!stage.root.path().join("two.txt").exists());
}
