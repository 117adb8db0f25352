//! Chorus as it is deployed: the images of deploy/Dockerfile, the Kubernetes
//! manifests of deploy/k8s under `podman kube play`, and deploy/compose.yaml under
//! podman-compose, driven with grpcurl through ports published on 127.0.0.1.
//!
//! They run with `CHORUS_TEST_CONTAINERS=1` (podman with runc: `.ci/run` sets it
//! up and sets the variable when podman can run containers here) and print why
//! they are skipped otherwise. The images are built from the binaries this
//! `cargo test` built, in place of the Dockerfile's `build` stage; every other
//! stage is the shipped one. The base is Debian 12 made with debootstrap
//! (tests/containers/base-image.sh), so no registry is needed; images that cannot
//! be pulled here (PostgreSQL, the OpenTelemetry Collector) are replaced in the
//! compose test by stand-ins (tests/containers/compose.override.yaml).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use chorus_tests::containers::compose::{Compose, spans, wait_healthy};
use chorus_tests::containers::kube::{Check, for_kube_play, probes};
use chorus_tests::containers::{
    Cleanup, Grpcurl, event_summary, free_port, images, logs, podman, published, repo_root, run,
    stand_in_image, try_run, unique, wait_serving,
};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use serde_json::{Value, json};

#[path = "containers/restricted.rs"]
mod restricted;

use restricted::{assert_probed_and_committed, probe_commit_and_bomb};

/// uid and gid of the services in the images.
const SERVICE_UID: u32 = 10001;
const ORCHESTRATOR: &str = "chorus.orchestrator.v1.Orchestrator";
const AGENT_TOOLS: &str = "chorus.orchestrator.v1.AgentTools";
/// How long a service may take to serve after its container starts.
const START: Duration = Duration::from_secs(90);
/// How long a task's agent may take in a test.
const TASK: Duration = Duration::from_secs(180);

/// One container test at a time. The services run as uid 10001 in every
/// container, and without user namespaces that is one user of the host: a
/// run's process limit (RLIMIT_NPROC, counted per user) reached by one test's
/// fork bomb would starve another test's agents of threads.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What every agent in these tests does: read the notes, run bash in the run
/// sandbox, write a summary, report. Function names as the OpenAI tools have them.
fn script() -> Vec<(String, Value)> {
    vec![
        ("file_read".into(), json!({"path": "notes.txt"})),
        (
            "bash".into(),
            json!({"command": "id -u; wc -l < notes.txt"}),
        ),
        (
            "file_create".into(),
            json!({"path": "summary.txt", "content": "two lines of notes\n"}),
        ),
        (
            "completion-report".into(),
            json!({"status": "complete", "summary": "Summarised the notes.", "output": "two lines"}),
        ),
    ]
}

/// Makes a workspace, an OpenAI-compatible provider at `model_url`, an agent and
/// a planned task, starts it and follows it until its run ends; returns the
/// task's history: summarised ([`event_summary`]), and as it came.
async fn run_a_task(api: &Grpcurl, root: &str, model_url: &str) -> (Vec<String>, Vec<Value>) {
    run_a_task_with(api, root, model_url, &["file.read", "file.create", "bash"]).await
}

/// [`run_a_task`] with an agent allowed `tools`.
async fn run_a_task_with(
    api: &Grpcurl,
    root: &str,
    model_url: &str,
    tools: &[&str],
) -> (Vec<String>, Vec<Value>) {
    let ws = api
        .orchestrator("CreateWorkspace", &json!({"name": "demo", "root": root}))
        .await["id"]
        .as_str()
        .expect("workspace id")
        .to_owned();
    let agent = Agent {
        name: "scribe",
        kind: "PROVIDER_KIND_OPENAI_COMPATIBLE",
        model_url,
        tools,
    };
    agent_task(api, &ws, &agent).await
}

/// An agent of its own provider (named as the agent, model `fake-model`).
struct Agent<'a> {
    name: &'a str,
    kind: &'a str,
    model_url: &'a str,
    tools: &'a [&'a str],
}

/// Makes `agent` and its provider in the workspace `ws`, and a planned task;
/// starts it and follows it until its run ends: the task's history,
/// summarised ([`event_summary`]) and as it came.
async fn agent_task(api: &Grpcurl, ws: &str, agent: &Agent<'_>) -> (Vec<String>, Vec<Value>) {
    api.orchestrator(
        "CreateProvider",
        &json!({"workspaceId": ws, "name": agent.name, "kind": agent.kind,
                "baseUrl": agent.model_url, "model": "fake-model", "apiKey": "sk-test"}),
    )
    .await;
    api.orchestrator(
        "CreateAgent",
        &json!({"workspaceId": ws, "name": agent.name, "instructions": "Read the notes and do as they say.",
                "allowedTools": agent.tools, "provider": agent.name}),
    )
    .await;
    let task = api
        .orchestrator(
            "CreateTask",
            &json!({"workspaceId": ws, "description": "Read notes.txt"}),
        )
        .await["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    // Planned by hand, as a planner would have it.
    for status in ["planning", "planned"] {
        api.orchestrator("UpdateTaskStatus", &json!({"id": task, "status": status}))
            .await;
    }
    api.orchestrator("StartTask", &json!({"taskId": task, "agent": agent.name}))
        .await;
    // Without follow, the stream ends once the task is over and its runs ended.
    let events = api
        .stream(
            &format!("{ORCHESTRATOR}/WatchTask"),
            &json!({"taskId": task}).to_string(),
            TASK,
        )
        .await;
    let mut history = event_summary(&events);
    // A failure's reason, for the assertion that follows.
    for event in events.iter().filter(|e| e["kind"] == "run_failed") {
        history.push(format!("(run_failed: {})", event["data"]["reason"]));
    }
    (history, events)
}

/// The output of the task's bash call, as its history recorded it.
fn bash_output(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["kind"] == "tool_executed" && e["data"]["tool"] == "bash")
        .map(|e| e["data"].to_string())
        .unwrap_or_default()
}

fn assert_ran_the_script(history: &[String]) {
    for step in [
        "agent_started",
        "tool_executed file.read ok",
        "tool_executed bash ok",
        "tool_executed file.create ok",
        "completion_report_submitted complete",
        "status_changed completed",
    ] {
        assert!(
            history.iter().any(|e| e == step),
            "'{step}' missing from {history:#?}"
        );
    }
}

/// A workspace directory `demo` with `notes.txt`, owned by the services' user,
/// under `<dir>/workspaces` (what is mounted at /srv/chorus/workspaces).
fn workspaces_on_host(dir: &Path) -> std::path::PathBuf {
    let workspaces = dir.join("workspaces");
    let demo = workspaces.join("demo");
    std::fs::create_dir_all(&demo).expect("workspace");
    std::fs::write(demo.join("notes.txt"), "alpha\nbeta\n").expect("notes");
    for path in [&workspaces, &demo, &demo.join("notes.txt")] {
        std::os::unix::fs::chown(path, Some(SERVICE_UID), Some(SERVICE_UID)).expect("chown");
    }
    workspaces
}

#[test]
fn the_collector_configuration_is_the_same_for_compose_and_kubernetes() {
    let root = repo_root();
    let compose = std::fs::read_to_string(root.join("deploy/otel-collector.yaml"))
        .expect("deploy/otel-collector.yaml");
    let k8s = std::fs::read_to_string(root.join("deploy/k8s/collector.yaml"))
        .expect("deploy/k8s/collector.yaml");
    let start = k8s.find("  config.yaml: |\n").expect("the config.yaml key") + 16;
    let end = k8s[start..].find("\n---").map_or(k8s.len(), |e| start + e);
    let embedded: String = k8s[start..end]
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(embedded.trim(), compose.trim());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_image_serves_grpcurl_and_runs_a_task_in_its_sandbox() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !chorus_tests::containers::enabled("the orchestrator image test") {
        return;
    }
    let started = Instant::now();
    let images = images();
    let image = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.ExposedPorts}}",
        &images.orchestrator,
    ]);
    assert!(
        image.starts_with(
            "10001:10001 [\"/usr/bin/tini\",\"--\",\"/usr/local/bin/chorus-orchestrator\"]"
        ) && image.contains("50051/tcp"),
        "{image}"
    );
    // What both images are made on is the packages the services and tools use,
    // gathered in one layer — not the base with them on top (with the base
    // and git, Perl, apt and the locales it was 236 MB). The release images
    // add their stripped binaries: deploy/image-sizes.sh measures those.
    let runtime = chorus_tests::containers::image_size(&images.runtime);
    assert!(
        runtime < 70_000_000,
        "the runtime image is {runtime} bytes; deploy/README.md says what it holds"
    );

    // The model is on the host, on 127.0.0.1; the container reaches the host's
    // loopback as 10.0.2.2 (slirp4netns with allow_host_loopback).
    let steps = script()
        .into_iter()
        .map(|(name, args)| Step::tool_call(name, args))
        .collect();
    let model = FakeOpenAi::start(steps).await;
    let model_url = model.base_url().replace("127.0.0.1", "10.0.2.2");

    let dir = tempfile::tempdir().expect("dir");
    let workspaces = workspaces_on_host(dir.path());
    let name = unique("allinone");
    let mut cleanup = Cleanup::new();
    cleanup.container(&name);
    let mount = format!("{}:/srv/chorus/workspaces", workspaces.display());
    podman(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "slirp4netns:allow_host_loopback=true",
        "-p",
        "127.0.0.1::50051",
        "-p",
        "127.0.0.1::50053",
        "-v",
        &mount,
        // The run sandbox mounts a /proc of its own: deploy/README.md.
        "--security-opt",
        "unmask=/proc/*",
        "--cap-drop",
        "ALL",
        "--read-only",
        "--tmpfs",
        "/tmp",
        &images.orchestrator,
    ]);
    let addr = published(&name, 50051);
    wait_serving(&addr, "", START, || logs(&name)).await;
    // The web console is served beside the API.
    let console = published(&name, 50053);
    let page = reqwest::get(format!("http://{console}/"))
        .await
        .expect("the console answers");
    assert_eq!(page.status(), 200, "{}", logs(&name));

    let anonymous = Grpcurl::new(&addr);
    let services = anonymous.list().await;
    for service in [ORCHESTRATOR, AGENT_TOOLS, "grpc.health.v1.Health"] {
        assert!(services.contains(service), "{service} not in {services}");
    }
    assert_eq!(anonymous.health("").await, "SERVING");
    // The image's own health check, as compose and `podman run --health-cmd` use it.
    let probe = podman(&["exec", &name, "chorus-health-probe"]);
    assert!(probe.contains("SERVING"), "{probe}");

    let admin_key = podman(&["exec", &name, "cat", "/var/lib/chorus/admin.key"]);
    let api = anonymous.with_key(&admin_key);
    let status = api.orchestrator("GetStatus", &json!({})).await;
    assert_eq!(
        status["sandbox"]["state"],
        "enforced",
        "{status}\n{}",
        logs(&name)
    );
    assert_eq!(status["embeddedToolExec"], true, "{status}");

    let (history, events) = run_a_task(&api, "/srv/chorus/workspaces/demo", &model_url).await;
    assert_ran_the_script(&history);
    // bash ran in the run sandbox as the services' user, in the workspace.
    let bash = bash_output(&events);
    assert!(bash.contains("10001") && bash.contains('2'), "{bash}");
    let summary = workspaces.join("demo/summary.txt");
    assert_eq!(
        std::fs::read_to_string(&summary).expect("summary.txt"),
        "two lines of notes\n"
    );
    assert_eq!(
        std::fs::metadata(&summary).expect("summary").uid(),
        SERVICE_UID,
        "files are the services' user's"
    );
    assert!(
        model
            .authorization()
            .iter()
            .all(|a| a.as_deref() == Some("Bearer sk-test"))
    );

    // SIGTERM reaches the orchestrator through tini; it stops cleanly.
    podman(&["stop", "-t", "30", &name]);
    let code = podman(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    assert_eq!(code, "0", "{}", logs(&name));
    eprintln!(
        "the orchestrator image test took {:.1?} (images: {:.1?})",
        started.elapsed(),
        images.took
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_play_under_podman_and_their_probes_pass() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !chorus_tests::containers::enabled("the podman kube play test") {
        return;
    }
    let started = Instant::now();
    let images = images();
    let k8s = repo_root().join("deploy/k8s");
    let read = |file: &str| std::fs::read_to_string(k8s.join(file)).expect("manifest");
    let prefix = unique("k8s");

    let keys = tempfile::tempdir().expect("keys");
    run(
        &repo_root()
            .join("deploy/make-secrets.sh")
            .display()
            .to_string(),
        &[&keys.path().display().to_string()],
        &[],
    );
    let pods = [
        ("orchestrator.yaml", 50051, "orchestrator"),
        ("tool-exec.yaml", 50052, "tool-exec"),
    ];
    // Each pod's gRPC port, then the orchestrator's web console.
    let ports: Vec<(u16, u16)> = pods
        .iter()
        .map(|(_, port, _)| (*port, free_port()))
        .chain([(50053, free_port())])
        .collect();
    let local = [
        ("chorus-orchestrator", images.orchestrator.as_str()),
        ("chorus-tool-exec", images.tool_exec.as_str()),
    ];
    let mut play = String::new();
    for file in [
        "configmap.yaml",
        "storage.yaml",
        "orchestrator.yaml",
        "tool-exec.yaml",
    ] {
        // The Deployments without their Services: podman has no Services.
        let text = read(file);
        let text = text
            .split("\n---\n")
            .filter(|doc| !doc.contains("kind: Service"))
            .collect::<Vec<_>>()
            .join("\n---\n");
        play.push_str(&for_kube_play(&text, &local, &ports, keys.path(), &prefix));
        play.push_str("---\n");
    }
    let file = keys.path().join("play.yaml");
    std::fs::write(&file, &play).expect("play.yaml");
    let file = file.display().to_string();

    // Undone in reverse: the pods go, then their volumes.
    let mut cleanup = Cleanup::new();
    for volume in ["data", "workspaces", "tmp"] {
        cleanup.push(
            "podman",
            &["volume", "rm", "-f", &format!("{prefix}-{volume}")],
            &[],
        );
    }
    cleanup.push("podman", &["kube", "down", &file], &[]);
    let played = try_run("podman", &["kube", "play", &file], &[]);
    assert!(
        played.status.success(),
        "podman kube play failed: {}\n{play}",
        String::from_utf8_lossy(&played.stderr)
    );

    let admin_key =
        |container: &str| podman(&["exec", container, "cat", "/var/lib/chorus/admin.key"]);
    for ((manifest, port, name), (_, host)) in pods.iter().zip(&ports) {
        let container = format!("{prefix}-{name}-pod-0-{name}");
        let addr = format!("127.0.0.1:{host}");
        // The restricted security context as the runtime applied it.
        let applied = podman(&[
            "inspect",
            "--format",
            "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{json .HostConfig.SecurityOpt}} {{json .EffectiveCaps}}",
            &container,
        ]);
        assert!(
            applied.starts_with("10001:10001 true")
                && applied.contains("no-new-privileges")
                && (applied.ends_with("null") || applied.ends_with("[]")),
            "{container}: {applied}"
        );
        // podman 4.3 runs no gRPC or TCP probes: each probe's check is made here,
        // through the host port, as the kubelet would make it. tool-exec is ready
        // once it reached the orchestrator (by its pod's name: see for_kube_play).
        let probes = probes(&read(manifest));
        assert!(
            probes.len() >= 3,
            "{manifest}: startup, readiness and liveness: {probes:?}"
        );
        for (kind, check) in &probes {
            match check {
                Check::Grpc {
                    port: probe_port,
                    service,
                } => {
                    assert_eq!(probe_port, port, "{manifest} {kind}");
                    wait_serving(&addr, service, START, || logs(&container)).await;
                }
                Check::Tcp { port: probe_port } => {
                    assert_eq!(probe_port, port, "{manifest} {kind}");
                    tokio::net::TcpStream::connect(&addr)
                        .await
                        .unwrap_or_else(|e| panic!("{manifest} {kind}: {addr}: {e}"));
                }
            }
        }
        // Under the restricted context the namespace tier cannot mount its /proc:
        // the landlock tier confines bash, git and CLI agents instead, and says
        // why (docs/sandbox-tiers.md).
        let api = Grpcurl::new(&addr).with_key(&admin_key(&format!(
            "{prefix}-orchestrator-pod-0-orchestrator"
        )));
        let status = if *name == "orchestrator" {
            api.orchestrator("GetStatus", &json!({})).await
        } else {
            // The admin key, checked by tool-exec with its orchestrator.
            api.call("chorus.tools.v1.ToolExec/GetStatus", "{}").await
        };
        assert_eq!(status["sandbox"]["state"], "enforced", "{status}");
        assert_eq!(status["sandbox"]["tier"], "landlock", "{status}");
        assert!(
            status["sandbox"]["tierReason"]
                .as_str()
                .is_some_and(|r| r.contains("proc")),
            "{status}"
        );
    }

    // The web console the manifest publishes.
    let page = reqwest::get(format!("http://127.0.0.1:{}/", ports[2].1))
        .await
        .expect("the console answers");
    assert_eq!(page.status(), 200);

    // A task whose agent probes with bash and commits with git: the API agent
    // runs in the orchestrator pod (its fake model beside it, in the same
    // pod), its bash and git calls in the tool-exec pod, both in the landlock
    // tier, on the workspaces volume the two pods share.
    let orchestrator = format!("{prefix}-orchestrator-pod-0-orchestrator");
    podman(&[
        "exec",
        &orchestrator,
        "bash",
        "-c",
        "mkdir -p /srv/chorus/workspaces/demo && echo notes > /srv/chorus/workspaces/demo/notes.txt",
    ]);
    let outside = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let outside_port = outside.local_addr().expect("addr").port();
    let script: Vec<Value> = probe_commit_and_bomb("chorus-tool-exec", outside_port)
        .into_iter()
        .map(|(tool, arguments)| json!({"tool": tool, "arguments": arguments}))
        .collect();
    let bin_dir = format!(
        "{}:/opt/chorus-test-bin:ro",
        chorus_tests::containers::bin_dir().display()
    );
    let model = format!("{prefix}-model");
    cleanup.container(&model);
    podman(&[
        "run",
        "-d",
        "--name",
        &model,
        "--pod",
        &format!("{prefix}-orchestrator-pod-0"),
        "-v",
        &bin_dir,
        &images.base,
        "/opt/chorus-test-bin/fake-model",
        "127.0.0.1:18080",
        &Value::from(script).to_string(),
    ]);
    let orchestrator_addr = format!("127.0.0.1:{}", ports[0].1);
    let api = Grpcurl::new(&orchestrator_addr).with_key(&admin_key(&orchestrator));
    let tools = ["bash", "git.status", "git.commit"];
    let (history, events) = run_a_task_with(
        &api,
        "/srv/chorus/workspaces/demo",
        "http://127.0.0.1:18080/v1",
        &tools,
    )
    .await;
    let tool_exec = format!("{prefix}-tool-exec-pod-0-tool-exec");
    assert_probed_and_committed(&history, &events, &orchestrator, &tool_exec);
    // Both services still answer after the fork bomb.
    let tool_exec_api =
        Grpcurl::new(&format!("127.0.0.1:{}", ports[1].1)).with_key(&admin_key(&orchestrator));
    let status = tool_exec_api
        .call("chorus.tools.v1.ToolExec/GetStatus", "{}")
        .await;
    assert_eq!(status["sandbox"]["tier"], "landlock", "{status}");
    let status = api.orchestrator("GetStatus", &json!({})).await;
    assert_eq!(status["sandbox"]["tier"], "landlock", "{status}");
    eprintln!("the podman kube play test took {:.1?}", started.elapsed());
}

/// The stack of deploy/compose.yaml — orchestrator, separate tool-exec,
/// PostgreSQL, a collector — with a fake model beside it, runs a task; returns
/// the stack (taken down when `cleanup` drops) and the task's history.
async fn compose_runs_a_task(cleanup: &mut Cleanup) -> (Compose, Vec<String>) {
    let images = images();
    let postgres = stand_in_image("postgres", "postgres.Containerfile", &images.base);
    let secrets = tempfile::tempdir().expect("secrets").keep();
    cleanup.push("rm", &["-rf", &secrets.display().to_string()], &[]);
    run(
        &repo_root()
            .join("deploy/make-secrets.sh")
            .display()
            .to_string(),
        &[&secrets.display().to_string()],
        &[],
    );
    let model_script: Vec<Value> = script()
        .into_iter()
        .map(|(tool, arguments)| json!({"tool": tool, "arguments": arguments}))
        .collect();
    let port = free_port();
    let root = repo_root();
    let compose = Compose {
        project: unique("compose"),
        files: [
            root.join("deploy/compose.yaml").display().to_string(),
            root.join("tests/containers/compose.override.yaml")
                .display()
                .to_string(),
        ],
        env: [
            ("CHORUS_ORCHESTRATOR_IMAGE", images.orchestrator.clone()),
            ("CHORUS_TOOL_EXEC_IMAGE", images.tool_exec.clone()),
            ("CHORUS_PORT", port.to_string()),
            ("CHORUS_CONSOLE_PORT", free_port().to_string()),
            ("CHORUS_SECRETS_DIR", secrets.display().to_string()),
            ("CHORUS_TEST_POSTGRES_IMAGE", postgres),
            ("CHORUS_TEST_BASE_IMAGE", images.base.clone()),
            (
                "CHORUS_TEST_BIN_DIR",
                chorus_tests::containers::bin_dir().display().to_string(),
            ),
            (
                "CHORUS_TEST_MODEL_SCRIPT",
                Value::from(model_script).to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    };
    compose.down_on_drop(cleanup);
    // The command deploy/README.md gives, as it is written there.
    compose.run(&["up", "-d"]);
    let orchestrator = compose.container("orchestrator");
    let addr = format!("127.0.0.1:{port}");
    wait_serving(&addr, "", START, || logs(&orchestrator)).await;
    wait_healthy(&orchestrator, START).await;
    let tool_exec = compose.container("tool-exec");
    wait_healthy(&tool_exec, START).await;

    let admin_key = podman(&["exec", &orchestrator, "cat", "/var/lib/chorus/admin.key"]);
    let api = Grpcurl::new(&addr).with_key(&admin_key);
    let status = api.orchestrator("GetStatus", &json!({})).await;
    // (grpcurl leaves out fields that are false.)
    assert_ne!(status["embeddedToolExec"], true, "{status}");
    assert_eq!(
        status["sandbox"]["state"],
        "enforced",
        "{status}\n{}",
        logs(&orchestrator)
    );
    let log = logs(&orchestrator);
    assert!(log.contains("Postgres"), "the store is PostgreSQL: {log}");

    // The workspace, on the volume both services mount.
    podman(&[
        "exec",
        &orchestrator,
        "bash",
        "-c",
        "mkdir /srv/chorus/workspaces/demo && printf 'alpha\\nbeta\\n' > /srv/chorus/workspaces/demo/notes.txt",
    ]);
    let (history, events) =
        run_a_task(&api, "/srv/chorus/workspaces/demo", "http://model:8080/v1").await;
    assert_ran_the_script(&history);
    // bash ran in tool-exec's container, in its run sandbox.
    let bash = bash_output(&events);
    assert!(bash.contains("10001") && bash.contains('2'), "{bash}");
    assert_eq!(
        podman(&[
            "exec",
            &tool_exec,
            "cat",
            "/srv/chorus/workspaces/demo/summary.txt"
        ]),
        "two lines of notes"
    );
    (compose, history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_runs_a_task_through_tool_exec_and_postgresql_and_its_trace_reaches_the_collector()
{
    let _one = ONE_AT_A_TIME.lock().await;
    if !chorus_tests::containers::enabled("the compose test") {
        return;
    }
    let started = Instant::now();
    let mut cleanup = Cleanup::new();
    let (compose, _) = compose_runs_a_task(&mut cleanup).await;

    // The task's trace: its spans from both services, under one trace id, at the
    // collector (spans leave in batches: wait for them).
    let collector = compose.container("otel-collector");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut poll = tokio::time::interval(Duration::from_millis(500));
    loop {
        poll.tick().await;
        let spans = spans(&collector);
        let traces_of = |service: &str, name: &str| -> Vec<String> {
            spans
                .iter()
                .filter(|s| {
                    s["service"] == service
                        && s["name"].as_str().is_some_and(|n| n.starts_with(name))
                })
                .filter_map(|s| s["trace_id"].as_str().map(str::to_owned))
                .collect()
        };
        let tasks = traces_of("chorus-orchestrator", "task");
        let tool_calls = traces_of("chorus-tool-exec", "execute");
        if tasks.iter().any(|t| tool_calls.contains(t)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no task trace with tool-exec's spans in it; the collector got {} spans:\n{}",
            spans.len(),
            logs(&collector)
        );
    }
    eprintln!("the compose test took {:.1?}", started.elapsed());
}
