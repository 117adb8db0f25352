//! End to end: tool-exec in-process, the real chorus-tools binary as the agent
//! would call it, every tool and every error path.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use chorus_sandbox::testing::{GitDaemon, TEST_UID, give_to_test_user, running_as_root};
use chorus_tests::{ToolExec, ToolsEnv, ToolsRun, chorus_tools};
use serde_json::{Value, json};

struct Fixture {
    service: ToolExec,
    workspace: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Self {
        let service = ToolExec::start().await;
        let workspace = tempfile::tempdir().expect("workspace");
        std::fs::write(workspace.path().join("notes.txt"), "alpha\nbeta\ngamma\n").expect("seed");
        // Agents act as the workspace's owner, never root.
        give_to_test_user(workspace.path());
        Self { service, workspace }
    }

    fn root(&self) -> &Path {
        self.workspace.path()
    }

    fn env(&self, tools: &[&str]) -> ToolsEnv {
        ToolsEnv {
            token: Some(self.service.token(self.root(), tools)),
            tools_addr: Some(self.service.addr.to_string()),
            orchestrator_addr: None,
        }
    }

    async fn call(&self, tools: &[&str], call: Value) -> ToolsRun {
        chorus_tools(&self.env(tools), &[&call.to_string()]).await
    }

    /// A call by a run whose egress list is `egress`.
    async fn call_with_egress(&self, tools: &[&str], egress: &[String], call: Value) -> ToolsRun {
        let env = ToolsEnv {
            token: Some(self.service.token_with_egress(self.root(), tools, egress)),
            ..self.env(tools)
        };
        chorus_tools(&env, &[&call.to_string()]).await
    }

    fn git(&self, args: &[&str]) -> String {
        git_in(self.root(), args)
    }
}

/// The test's own git, as the workspace's owner.
fn git_in(dir: &Path, args: &[&str]) -> String {
    let mut git = Command::new("git");
    if running_as_root() {
        git.uid(TEST_UID).gid(TEST_UID).env("HOME", "/tmp");
    }
    let out = git
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const ALL: &[&str] = &["@developer"];

#[tokio::test]
async fn file_tools_create_read_write_patch_list_search_delete() {
    let fx = Fixture::new().await;

    let created = fx.call(ALL, json!({"tool": "file.create", "path": "src/lib.rs", "content": "fn one() {}\nfn two() {}\n"})).await;
    assert_eq!(
        created.output(),
        json!({"path": "src/lib.rs", "bytes_written": 24})
    );
    assert!(
        fx.root().join("src/lib.rs").is_file(),
        "parent directory created"
    );

    let read = fx
        .call(ALL, json!({"tool": "file.read", "path": "src/lib.rs"}))
        .await
        .output();
    assert_eq!(
        read["content"],
        "     1\tfn one() {}\n     2\tfn two() {}\n"
    );
    assert_eq!(read["total_lines"], 2);
    assert_eq!(read["truncated"], false);

    let page = fx
        .call(
            ALL,
            json!({"tool": "file.read", "path": "notes.txt", "offset": 1, "limit": 1}),
        )
        .await
        .output();
    assert_eq!(page["content"], "     2\tbeta\n");
    assert_eq!(page["truncated"], true);
    assert_eq!(page["next_offset"], 2);

    let written = fx
        .call(
            ALL,
            json!({"tool": "file.write", "path": "notes.txt", "content": "delta\n"}),
        )
        .await
        .output();
    assert_eq!(written["bytes_written"], 6);
    assert_eq!(
        std::fs::read_to_string(fx.root().join("notes.txt")).expect("read"),
        "delta\n"
    );

    let patched = fx
        .call(
            ALL,
            json!({"tool": "file.patch", "path": "src/lib.rs", "patches": [
                {"find": "fn one() {}", "replace": "fn uno() {}"},
                {"find": "fn two", "replace": "fn dos", "start_line": 2}
            ]}),
        )
        .await
        .output();
    assert_eq!(patched["patches_applied"], 2);
    assert_eq!(
        std::fs::read_to_string(fx.root().join("src/lib.rs")).expect("read"),
        "fn uno() {}\nfn dos() {}\n"
    );

    let listed = fx.call(ALL, json!({"tool": "file.list"})).await.output();
    let entries: Vec<(&str, &str)> = listed["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["path"].as_str().expect("path"),
                e["kind"].as_str().expect("kind"),
            )
        })
        .collect();
    assert_eq!(entries, [("notes.txt", "file"), ("src", "directory")]);
    let notes = &listed["entries"][0];
    assert_eq!(notes["size"], 6);
    assert!(
        notes["modified_ms"].as_i64().expect("mtime") > 1_600_000_000_000,
        "real mtime: {notes}"
    );

    let by_glob = fx
        .call(ALL, json!({"tool": "file.list", "pattern": "*.rs"}))
        .await
        .output();
    assert_eq!(by_glob["entries"][0]["path"], "src/lib.rs");

    let found = fx
        .call(
            ALL,
            json!({"tool": "file.search", "pattern": "fn d.s", "context_lines": 1}),
        )
        .await
        .output();
    let first = &found["matches"][0];
    assert_eq!(
        (first["path"].as_str(), first["line"].as_u64()),
        (Some("src/lib.rs"), Some(2))
    );
    assert_eq!(first["content"], "fn dos() {}");
    assert_eq!(first["before"][0]["content"], "fn uno() {}");

    let deleted = fx
        .call(ALL, json!({"tool": "file.delete", "path": "src/lib.rs"}))
        .await
        .output();
    assert_eq!(deleted["path"], "src/lib.rs");
    assert!(!fx.root().join("src/lib.rs").exists());
}

#[tokio::test]
async fn bash_runs_in_the_workspace_and_reports_its_exit_code() {
    let fx = Fixture::new().await;
    let run = fx
        .call(
            ALL,
            json!({"tool": "bash", "command": "pwd; cat notes.txt | wc -l; echo oops >&2; exit 3"}),
        )
        .await;
    let result = run.json();
    assert_eq!(
        run.code, 0,
        "a non-zero exit is a result, not a failure: {run:?}"
    );
    let stdout = result["output"]["stdout"].as_str().expect("stdout");
    let root = fx.root().canonicalize().expect("canonical root");
    assert!(
        stdout.starts_with(&format!("{}\n", root.display())),
        "{stdout}"
    );
    assert!(stdout.contains('3'), "{stdout}");
    assert_eq!(result["output"]["stderr"], "oops\n");
    assert_eq!(result["output"]["exit_code"], 3);
    assert_eq!(result["metadata"]["exit_code"], 3);
}

#[tokio::test]
async fn bash_timeout_prints_partial_output_and_fails() {
    let fx = Fixture::new().await;
    let run = fx
        .call(
            ALL,
            json!({"tool": "bash", "command": "echo started; exec sleep 30", "timeout_secs": 1}),
        )
        .await;
    assert_eq!(run.code, 1, "{run:?}");
    let result = run.json();
    assert_eq!(result["output"]["stdout"], "started\n");
    assert_eq!(result["output"]["timed_out"], true);
    assert_eq!(result["error"]["code"], "deadline_exceeded");
    assert_eq!(run.error()["code"], "deadline_exceeded");
}

#[tokio::test]
async fn git_tools_status_diff_commit_push() {
    let fx = Fixture::new().await;
    let remote = tempfile::tempdir().expect("remote");
    give_to_test_user(remote.path());
    git_in(remote.path(), &["init", "--bare", "-q", "origin.git"]);
    // The push that goes out needs a git daemon in a network namespace of the
    // test's own (root); without one, only the refusals are checked.
    let daemon = if chorus_sandbox::testing::root_for("a git daemon in a test network namespace") {
        Some(GitDaemon::serve(remote.path()).await)
    } else {
        None
    };
    fx.git(&["init", "-q"]);
    fx.git(&["add", "notes.txt"]);
    fx.git(&["commit", "-q", "-m", "seed"]);
    let origin = daemon.as_ref().map_or_else(
        || "git://192.0.2.1/origin.git".to_owned(),
        |daemon| daemon.url("origin.git"),
    );
    fx.git(&["remote", "add", "origin", &origin]);
    std::fs::write(fx.root().join("notes.txt"), "alpha\nBETA\ngamma\n").expect("edit");
    std::fs::write(fx.root().join("new.txt"), "new\n").expect("new file");
    give_to_test_user(fx.root());

    let status = fx.call(ALL, json!({"tool": "git.status"})).await.output();
    assert_eq!(status["branch"], "main");
    assert_eq!(status["clean"], false);
    let mut changed: Vec<(String, String, String)> = status["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["path"].as_str().expect("p").to_owned(),
                e["index"].as_str().expect("x").to_owned(),
                e["worktree"].as_str().expect("y").to_owned(),
            )
        })
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        [
            ("new.txt".into(), "?".into(), "?".into()),
            ("notes.txt".into(), " ".into(), "M".into())
        ]
    );

    let diff = fx
        .call(ALL, json!({"tool": "git.diff", "paths": ["notes.txt"]}))
        .await
        .output();
    let text = diff["diff"].as_str().expect("diff");
    assert!(text.contains("-beta") && text.contains("+BETA"), "{text}");

    let commit = fx
        .call(
            ALL,
            json!({"tool": "git.commit", "message": "agent change", "all": true}),
        )
        .await
        .output();
    let sha = commit["commit"].as_str().expect("sha").to_owned();
    assert_eq!(sha.len(), 40);
    assert_eq!(
        fx.git(&["log", "-1", "--format=%H %s"]).trim(),
        format!("{sha} agent change")
    );

    // Without the network grant a push is refused; with it, it goes out.
    let refused = fx.call(ALL, json!({"tool": "git.push"})).await;
    let message = refused.expect_failure(3, "permission_denied");
    assert!(message.contains("needs the 'network' grant"), "{message}");
    let networked: &[&str] = &["@developer", "network"];
    // With it but no egress rule for the remote, nothing goes out either.
    let nowhere = fx.call(networked, json!({"tool": "git.push"})).await;
    let message = nowhere.expect_failure(1, "failed_precondition");
    assert!(message.contains("is not allowed"), "{message}");
    if let Some(daemon) = &daemon {
        let pushed = fx
            .call_with_egress(networked, &[daemon.rule()], json!({"tool": "git.push"}))
            .await
            .output();
        assert_eq!(
            (pushed["remote"].as_str(), pushed["branch"].as_str()),
            (Some("origin"), Some("main"))
        );
        assert_eq!(
            git_in(&remote.path().join("origin.git"), &["rev-parse", "main"]).trim(),
            sha
        );
    }

    let unknown = fx
        .call(
            networked,
            json!({"tool": "git.push", "remote": "https://example.invalid/x.git"}),
        )
        .await;
    unknown.expect_failure(4, "invalid_argument");
}

#[tokio::test]
async fn help_lists_only_the_runs_tools_with_arguments() {
    let fx = Fixture::new().await;
    let help = fx
        .call(&["file.read"], json!({"tool": "help"}))
        .await
        .output();
    let names: Vec<&str> = help["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert!(
        names.contains(&"file.read") && names.contains(&"completion-report"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"bash") && !names.contains(&"file.write"),
        "{names:?}"
    );
    let read = help["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "file.read")
        .expect("file.read");
    assert_eq!(read["arguments"][0]["name"], "path");
    assert_eq!(read["arguments"][0]["required"], true);
    // Examples name the path the agent ran chorus-tools by: the one a CLI's
    // rules allow (Claude Code's `Bash(<path> *)`).
    let example = read["example"].as_str().expect("example");
    let path = chorus_tests::chorus_tools_bin();
    assert!(
        example.starts_with(&format!("{} '", path.display())),
        "{example}"
    );
}

#[tokio::test]
async fn a_tool_outside_the_allow_list_is_denied_and_changes_nothing() {
    let fx = Fixture::new().await;
    let run = fx
        .call(
            &["@researcher"],
            json!({"tool": "file.write", "path": "notes.txt", "content": "x"}),
        )
        .await;
    let message = run.expect_failure(3, "permission_denied");
    assert!(message.contains("'file.write' is not allowed"), "{message}");
    assert_eq!(
        std::fs::read_to_string(fx.root().join("notes.txt")).expect("read"),
        "alpha\nbeta\ngamma\n"
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_denied() {
    let fx = Fixture::new().await;
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret"), "s3cret").expect("secret");
    std::os::unix::fs::symlink(outside.path(), fx.root().join("escape")).expect("symlink");
    for call in [
        json!({"tool": "file.read", "path": "../secret"}),
        json!({"tool": "file.read", "path": outside.path().join("secret")}),
        json!({"tool": "file.read", "path": "escape/secret"}),
        json!({"tool": "file.write", "path": "escape/secret", "content": "owned"}),
        json!({"tool": "file.create", "path": "escape/new", "content": "owned"}),
        json!({"tool": "file.list", "path": "escape"}),
        json!({"tool": "file.search", "pattern": "s3cret", "path": "escape"}),
    ] {
        let run = fx.call(ALL, call.clone()).await;
        assert_eq!(run.code, 3, "{call}: {run:?}");
        assert_eq!(run.error()["code"], "permission_denied", "{call}");
        assert!(
            !run.stdout.contains("s3cret") && !run.stderr.contains("s3cret"),
            "{call} leaked: {run:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).expect("secret"),
        "s3cret"
    );
    assert!(!outside.path().join("new").exists());
}

#[tokio::test]
async fn tool_failures_have_precise_codes_and_exit_codes() {
    let fx = Fixture::new().await;
    let cases = [
        (
            json!({"tool": "file.read", "path": "missing.txt"}),
            1,
            "not_found",
        ),
        (
            json!({"tool": "file.create", "path": "notes.txt", "content": "x"}),
            1,
            "already_exists",
        ),
        (
            json!({"tool": "file.write", "path": "missing.txt", "content": "x"}),
            1,
            "not_found",
        ),
        (
            json!({"tool": "file.patch", "path": "notes.txt", "patches": [{"find": "zeta", "replace": "x"}]}),
            1,
            "failed_precondition",
        ),
        (json!({"tool": "file.read"}), 4, "invalid_argument"),
        (
            json!({"tool": "file.read", "path": "notes.txt", "offset": "ten"}),
            4,
            "invalid_argument",
        ),
        (
            json!({"tool": "file.read", "path": "notes.txt", "colour": "red"}),
            4,
            "invalid_argument",
        ),
        (
            json!({"tool": "file.search", "pattern": "("}),
            4,
            "invalid_argument",
        ),
        (json!({"tool": "no.such.tool"}), 4, "invalid_argument"),
        (
            json!({"tool": "web.search", "query": "rust"}),
            4,
            "invalid_argument",
        ),
        (json!({"tool": "task.get"}), 5, "unavailable"),
        (
            json!({"tool": "file.delete", "path": "."}),
            4,
            "invalid_argument",
        ),
    ];
    for (call, exit, code) in cases {
        let run = fx.call(ALL, call.clone()).await;
        assert_eq!(
            (run.code, run.error()["code"].as_str().map(str::to_owned)),
            (exit, Some(code.to_owned())),
            "{call}: {run:?}"
        );
        assert!(
            run.stdout.is_empty(),
            "{call}: nothing on stdout on failure: {run:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(fx.root().join("notes.txt")).expect("read"),
        "alpha\nbeta\ngamma\n"
    );
}

#[tokio::test]
async fn bad_tokens_are_unauthenticated() {
    let fx = Fixture::new().await;
    let call = json!({"tool": "file.read", "path": "notes.txt"}).to_string();
    let addr = Some(fx.service.addr.to_string());

    let expired = ToolsEnv {
        token: Some(fx.service.expired_token(fx.root(), ALL)),
        tools_addr: addr.clone(),
        ..Default::default()
    };
    let message = chorus_tools(&expired, &[&call])
        .await
        .expect_failure(3, "unauthenticated");
    assert!(message.contains("expired"), "{message}");

    let foreign = ToolExec::start().await;
    let forged = ToolsEnv {
        token: Some(foreign.token(fx.root(), ALL)),
        tools_addr: addr.clone(),
        ..Default::default()
    };
    let message = chorus_tools(&forged, &[&call])
        .await
        .expect_failure(3, "unauthenticated");
    assert!(
        message.contains("not minted by this deployment"),
        "{message}"
    );

    let garbage = ToolsEnv {
        token: Some("not.a.token".into()),
        tools_addr: addr.clone(),
        ..Default::default()
    };
    chorus_tools(&garbage, &[&call])
        .await
        .expect_failure(3, "unauthenticated");

    let missing = ToolsEnv {
        token: None,
        tools_addr: addr,
        ..Default::default()
    };
    let message = chorus_tools(&missing, &[&call])
        .await
        .expect_failure(2, "usage");
    assert!(message.contains("CHORUS_RUN_TOKEN"), "{message}");
    foreign.stop().await;
}

#[tokio::test]
async fn the_workspace_root_argument_must_be_the_runs_own() {
    let fx = Fixture::new().await;
    let call = json!({"tool": "file.read", "path": "notes.txt"}).to_string();
    let root = fx.root().to_str().expect("utf8").to_owned();
    let ok = chorus_tools(&fx.env(ALL), &[&root, &call]).await;
    assert_eq!(ok.output()["total_lines"], 3);
    let other = tempfile::tempdir().expect("other");
    let wrong = chorus_tools(&fx.env(ALL), &[other.path().to_str().expect("utf8"), &call]).await;
    let message = wrong.expect_failure(4, "invalid_argument");
    assert!(message.contains("does not match"), "{message}");
}

#[tokio::test]
async fn usage_errors_and_unreachable_services() {
    let fx = Fixture::new().await;
    let env = fx.env(ALL);
    chorus_tools(&env, &[]).await.expect_failure(2, "usage");
    chorus_tools(&env, &["a", "b", "c"])
        .await
        .expect_failure(2, "usage");
    chorus_tools(&env, &["{not json"])
        .await
        .expect_failure(4, "invalid_argument");
    chorus_tools(&env, &["[1,2]"])
        .await
        .expect_failure(4, "invalid_argument");
    chorus_tools(&env, &[r#"{"path":"x"}"#])
        .await
        .expect_failure(4, "invalid_argument");

    // A port nothing listens on: bind one, note it, close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let nowhere = ToolsEnv {
        tools_addr: Some(closed.to_string()),
        ..env.clone()
    };
    let message = chorus_tools(&nowhere, &[r#"{"tool":"file.read","path":"notes.txt"}"#])
        .await
        .expect_failure(5, "unavailable");
    assert!(message.contains("cannot reach tool-exec"), "{message}");

    let unconfigured = chorus_tools(&env, &[r#"{"tool":"task.comment","text":"hi"}"#])
        .await
        .expect_failure(5, "unavailable");
    assert!(
        unconfigured.contains("orchestrator not configured"),
        "{unconfigured}"
    );
    let orchestrated = ToolsEnv {
        orchestrator_addr: Some(closed.to_string()),
        ..env
    };
    let message = chorus_tools(&orchestrated, &[r#"{"tool":"task.comment","text":"hi"}"#])
        .await
        .expect_failure(5, "unavailable");
    assert!(message.contains("cannot reach orchestrator"), "{message}");
}

#[tokio::test]
async fn help_flag_lists_every_tool_from_the_catalog() {
    let run = chorus_tools(&ToolsEnv::default(), &["--help"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    for tool in chorus_catalog::TOOLS {
        assert!(run.stdout.contains(tool.name), "--help lacks {}", tool.name);
    }
    assert!(
        run.stdout.contains("path (string, required)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Exit codes"), "{}", run.stdout);
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
