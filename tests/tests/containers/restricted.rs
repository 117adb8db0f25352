//! The orchestrator image under the restricted context deploy/k8s ships (Pod
//! Security "restricted"): the landlock tier confines bash, git and the real
//! CLIs there. The probes and checks are shared with the `podman kube play`
//! test.

use std::path::Path;

use chorus_tests::containers::{
    Cleanup, Grpcurl, images, logs, podman, published, unique, wait_serving,
};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use serde_json::{Value, json};

use super::{
    Agent, ONE_AT_A_TIME, START, agent_task, bash_output, run_a_task_with, workspaces_on_host,
};

/// The probes the agent's bash makes of the container it runs in, each printing
/// `name=result`; `port` is a host port (10.0.2.2 from the container) bash is
/// not granted.
pub fn restricted_probes(service: &str, model_port: u16) -> String {
    // /proc/<pid>/comm holds the first 15 bytes of the program's name.
    let comm = &service[..service.len().min(15)];
    format!(
        r#"svc=$(for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = {comm} ] && echo ${{p#/proc/}}; done | head -1)
echo "service=$svc"
cat /var/lib/chorus/admin.key >/dev/null 2>&1 && echo admin_key=read || echo admin_key=refused
cat /var/lib/chorus/run-token-keys.json >/dev/null 2>&1 && echo signing_keys=read || echo signing_keys=refused
ls /var/lib/chorus >/dev/null 2>&1 && echo data_dir=listed || echo data_dir=refused
cat /run/secrets/chorus/* >/dev/null 2>&1 && echo mounted_keys=read || echo mounted_keys=refused
ls /run/secrets/chorus >/dev/null 2>&1 && echo mounted_keys_dir=listed || echo mounted_keys_dir=refused
cat /proc/$svc/environ >/dev/null 2>&1 && echo service_environ=read || echo service_environ=refused
head -c1 /proc/$svc/mem >/dev/null 2>&1 && echo service_memory=read || echo service_memory=refused
kill -0 $svc 2>/dev/null && echo signal_service=sent || echo signal_service=refused
kill -TERM 1 2>/dev/null && echo signal_init=sent || echo signal_init=refused
echo x > /var/lib/chorus/pwned 2>/dev/null && echo write_data=written || echo write_data=refused
echo x > /srv/chorus/workspaces/pwned 2>/dev/null && echo write_outside=written || echo write_outside=refused
echo x > /tmp/pwned 2>/dev/null && echo write_tmp=written || echo write_tmp=refused
(exec 3<>/dev/tcp/10.0.2.2/{model_port}) 2>/dev/null && echo network=reached || echo network=refused
(exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null && echo service_port=reached || echo service_port=refused
setsid bash -c 'exec -a chorus-survivor sleep 1000' </dev/null >/dev/null 2>&1 &
(bash -c 'exec -a chorus-survivor sleep 1000' </dev/null >/dev/null 2>&1 &) &
echo id=$(id -u)
echo done"#
    )
}

/// The agent's script in the restricted tests: the probes (aimed at the
/// process named `service`, and at the host's `port`), a repository made
/// with bash, git.status and git.commit, a fork bomb bounded by its call's
/// timeout, the report. Tool names as the OpenAI tools have them.
pub fn probe_commit_and_bomb(service: &str, port: u16) -> Vec<(&'static str, Value)> {
    vec![
        ("bash", json!({"command": restricted_probes(service, port)})),
        (
            "bash",
            json!({"command": "git init -q -b main && git config user.name Agent && git config user.email agent@example.com && git config commit.gpgsign false && echo repo"}),
        ),
        ("git_status", json!({})),
        (
            "git_commit",
            json!({"message": "Add the notes", "all": true}),
        ),
        (
            "bash",
            json!({"command": "b(){ b | b & }; b; sleep 30", "timeout_secs": 10}),
        ),
        (
            "completion-report",
            json!({"status": "complete", "summary": "Probed and committed.", "output": "done"}),
        ),
    ]
}

/// After [`probe_commit_and_bomb`]: the task completed with its git calls,
/// every probe was refused, the commit is in the workspace (read in
/// `container`), and nothing the run started is left in `ran_in`, whose log
/// a failure shows.
pub fn assert_probed_and_committed(
    history: &[String],
    events: &[Value],
    container: &str,
    ran_in: &str,
) {
    for step in [
        "tool_executed bash ok",
        "tool_executed git.status ok",
        "tool_executed git.commit ok",
        "completion_report_submitted complete",
        "status_changed completed",
    ] {
        assert!(
            history.iter().any(|e| e == step),
            "'{step}' missing from {history:#?}\n{}",
            logs(ran_in)
        );
    }
    assert_probes_refused(&bash_output(events));
    // The commit is in the repository, by the agent.
    let log = podman(&[
        "exec",
        container,
        "git",
        "-C",
        "/srv/chorus/workspaces/demo",
        "log",
        "--format=%s",
    ]);
    assert_eq!(log.trim(), "Add the notes");
    assert_no_survivors(ran_in);
}

/// What [`restricted_probes`] must print: every probe refused, and the
/// service's process found (so the probes aimed at it aimed at something).
pub fn assert_probes_refused(probes: &str) {
    for expected in [
        "admin_key=refused",
        "signing_keys=refused",
        "data_dir=refused",
        "mounted_keys=refused",
        "mounted_keys_dir=refused",
        "service_environ=refused",
        "service_memory=refused",
        "signal_service=refused",
        "signal_init=refused",
        "write_data=refused",
        "write_outside=refused",
        "write_tmp=refused",
        "network=refused",
        "service_port=refused",
        "id=10001",
        "done",
    ] {
        assert!(probes.contains(expected), "{expected} not in {probes}");
    }
    // The probes aimed at the service's own process (found by its name).
    let found = probes
        .match_indices("service=")
        .any(|(at, _)| probes[at + "service=".len()..].starts_with(|c: char| c.is_ascii_digit()));
    assert!(found, "the service's process was not found: {probes}");
}

/// Nothing a run started is left in `container`: only tini and the service
/// (and this check's own processes) run there.
pub fn assert_no_survivors(container: &str) {
    let left = podman(&[
        "exec",
        container,
        "bash",
        "-c",
        "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); echo \"${p#/proc/} $c\"; done",
    ]);
    let survivors: Vec<&str> = left
        .lines()
        .filter(|l| {
            l.contains("chorus-survivor") || l.contains("sleep") || l.contains("bash -c b()")
        })
        .collect();
    assert!(survivors.is_empty(), "survivors: {survivors:?}\n{left}");
}

/// Deploy/k8s's security context, as `podman run` flags: the services' user,
/// every capability dropped, no new privileges, a read-only root, the
/// runtime's default seccomp profile and masked /proc (podman's defaults).
const RESTRICTED: [&str; 8] = [
    "--user",
    "10001:10001",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--read-only",
    "--tmpfs=/tmp",
];

/// Starts the orchestrator image as `name` under [`RESTRICTED`], with `extra`
/// podman flags, its port published on 127.0.0.1 and the host's loopback
/// reachable as 10.0.2.2; waits until it serves: a client with its admin key.
async fn start_restricted(name: &str, extra: &[&str]) -> Grpcurl {
    let images = images();
    let mut args = vec![
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "slirp4netns:allow_host_loopback=true",
        "-p",
        "127.0.0.1::50051",
    ];
    args.extend(extra);
    args.extend(RESTRICTED);
    args.push(&images.orchestrator);
    podman(&args);
    let addr = published(name, 50051);
    wait_serving(&addr, "", START, || logs(name)).await;
    let admin_key = podman(&["exec", name, "cat", "/var/lib/chorus/admin.key"]);
    Grpcurl::new(&addr).with_key(&admin_key)
}

/// The orchestrator image under the restricted context Pod Security
/// "restricted" enforces: the namespace tier cannot start (masked /proc), so
/// the landlock tier confines bash and git, and the bash-probe set is refused
/// in that container; nothing a run started survives it; a fork bomb does not
/// stop the service from answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_restricted_context_the_landlock_tier_confines_bash_and_git() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !chorus_tests::containers::enabled("the restricted-context test") {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let workspaces = workspaces_on_host(dir.path());
    let name = unique("restricted");
    let mut cleanup = Cleanup::new();
    cleanup.container(&name);

    // A fake model whose agent probes with bash, commits with git, and ends
    // with a fork bomb bounded by its call's timeout.
    // A server on the host the bash call must not reach (no network grant).
    let outside = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let model_port = outside.local_addr().expect("addr").port();
    let steps = probe_commit_and_bomb("chorus-orchestrator", model_port)
        .into_iter()
        .map(|(tool, arguments)| Step::tool_call(tool, arguments))
        .collect();
    let model = FakeOpenAi::start(steps).await;
    let model_url = model.base_url().replace("127.0.0.1", "10.0.2.2");

    let mount = format!("{}:/srv/chorus/workspaces", workspaces.display());
    let api = start_restricted(&name, &["-v", &mount]).await;

    let status = api.orchestrator("GetStatus", &json!({})).await;
    let sandbox = &status["sandbox"];
    assert_eq!(sandbox["state"], "enforced", "{status}\n{}", logs(&name));
    assert_eq!(sandbox["tier"], "landlock", "{status}");
    assert!(
        sandbox["tierReason"]
            .as_str()
            .is_some_and(|r| r.contains("proc")),
        "{status}"
    );

    // The service answers all along, fork bomb included.
    let watching = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut answered = 0;
            loop {
                let status = api.orchestrator("GetStatus", &json!({})).await;
                assert_eq!(status["sandbox"]["state"], "enforced");
                answered += 1;
                if answered > 1_000_000 {
                    return answered;
                }
            }
        })
    };
    let tools = ["bash", "git.status", "git.commit"];
    let (history, events) =
        run_a_task_with(&api, "/srv/chorus/workspaces/demo", &model_url, &tools).await;
    watching.abort();
    let watched = watching.await;
    assert!(
        !watched
            .as_ref()
            .is_err_and(tokio::task::JoinError::is_panic),
        "the service stopped answering during the task: {watched:?}"
    );
    assert_probed_and_committed(&history, &events, &name, &name);
    // And the service still answers.
    let status = api.orchestrator("GetStatus", &json!({})).await;
    assert_eq!(status["sandbox"]["tier"], "landlock");
}

/// The real Claude Code and OpenCode CLIs (installed on the host by .ci/run,
/// mounted read-only) run tasks in the orchestrator image under the
/// restricted context, in the landlock tier, against fake model servers on
/// the host: each reads a file and reports through its only tools, those of
/// chorus-tools mcp (no shell, no built-in tool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_clis_run_tasks_in_the_restricted_container() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !chorus_tests::containers::enabled("the real CLIs in the restricted container") {
        return;
    }
    let Some(claude) = chorus_tests::fake_anthropic::claude_cli_or_skip() else {
        return;
    };
    let Some(opencode) = chorus_tests::fake_anthropic::real_cli_or_skip(
        "CHORUS_TEST_OPENCODE_BIN",
        "the OpenCode CLI",
    ) else {
        return;
    };
    // Both are native programs in npm packages: their prefix is mounted whole.
    let prefix = |bin: &Path| {
        bin.parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .expect("<prefix>/node_modules/.bin/<cli>")
            .to_path_buf()
    };
    assert_eq!(prefix(&claude), prefix(&opencode), "one npm prefix");
    let clis = prefix(&claude);
    let dir = tempfile::tempdir().expect("dir");
    let workspaces = workspaces_on_host(dir.path());
    std::fs::write(workspaces.join("demo/notes.txt"), "alpha-from-notes\n").expect("notes");
    // The default transport: each CLI's only tools are chorus-tools mcp's.
    let read = json!({"path": "notes.txt"});
    let report =
        json!({"status": "complete", "summary": "Read the notes.", "output": "alpha-from-notes"});
    let claude_model = chorus_tests::fake_anthropic::FakeAnthropic::start(vec![
        chorus_tests::fake_anthropic::Reply::tool("mcp__chorus__file_read", read.clone()),
        chorus_tests::fake_anthropic::Reply::tool("mcp__chorus__completion-report", report.clone()),
        chorus_tests::fake_anthropic::Reply::text("Reported."),
    ])
    .await;
    let opencode_model = FakeOpenAi::start(vec![
        Step::tool_call("chorus_file_read", read),
        Step::tool_call("chorus_completion-report", report),
        Step::text("Reported."),
    ])
    .await;
    let from_container = |url: String| url.replace("127.0.0.1", "10.0.2.2");

    let name = unique("clis");
    let mut cleanup = Cleanup::new();
    cleanup.container(&name);
    let mounts = [
        format!("{}:/srv/chorus/workspaces", workspaces.display()),
        format!("{}:/opt/agent-clis:ro", clis.display()),
    ];
    let api = start_restricted(
        &name,
        &[
            "-v",
            &mounts[0],
            "-v",
            &mounts[1],
            "-e",
            "CHORUS_CLAUDE_BIN=/opt/agent-clis/node_modules/.bin/claude",
            "-e",
            "CHORUS_OPENCODE_BIN=/opt/agent-clis/node_modules/.bin/opencode",
        ],
    )
    .await;
    let status = api.orchestrator("GetStatus", &json!({})).await;
    assert_eq!(status["sandbox"]["tier"], "landlock", "{status}");
    let ws = api
        .orchestrator(
            "CreateWorkspace",
            &json!({"name": "demo", "root": "/srv/chorus/workspaces/demo"}),
        )
        .await["id"]
        .as_str()
        .expect("workspace id")
        .to_owned();
    for (agent, kind, url) in [
        (
            "claude",
            "PROVIDER_KIND_CLAUDE_CODE",
            from_container(claude_model.base_url()),
        ),
        (
            "opencode",
            "PROVIDER_KIND_OPENCODE",
            from_container(opencode_model.base_url()),
        ),
    ] {
        let (history, _) = agent_task(
            &api,
            &ws,
            &Agent {
                name: agent,
                kind,
                model_url: &url,
                tools: &["file.read"],
            },
        )
        .await;
        for step in [
            "agent_started",
            "tool_executed file.read ok",
            "completion_report_submitted complete",
            "status_changed completed",
        ] {
            assert!(
                history.iter().any(|e| e == step),
                "{agent}: '{step}' missing from {history:#?}\n{}",
                logs(&name)
            );
        }
    }
}
