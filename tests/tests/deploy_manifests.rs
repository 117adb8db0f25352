//! Every kustomization under deploy/ renders with `kubectl kustomize`, as an
//! operator's `kubectl apply -k` would, and says what its README promises: the
//! base one orchestrator, the replicas overlay three on PostgreSQL.
//!
//! Needs kubectl (with its built-in kustomize). Without it the test says so and
//! passes, unless `CHORUS_TEST_REQUIRE_KUBECTL=1` (CI, where `.ci/run` installs
//! it): then it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

const REQUIRE_VAR: &str = "CHORUS_TEST_REQUIRE_KUBECTL";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// kubectl's path, or None (and why) when it is missing and not required.
fn kubectl() -> Option<String> {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("kubectl".to_owned());
    }
    assert!(
        std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
        "{REQUIRE_VAR}=1 but kubectl is not on PATH: install it (https://dl.k8s.io/release/v1.32.4/bin/linux/amd64/kubectl; .ci/run does)"
    );
    eprintln!(
        "kubectl is not on PATH: the kustomizations are not rendered (set {REQUIRE_VAR}=1 to fail instead)"
    );
    None
}

/// Copies `from` into `to`, directories included.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a directory");
    for entry in std::fs::read_dir(from).expect("read a directory") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The directories under `dir` that hold a kustomization.yaml.
fn kustomizations(dir: &Path, found: &mut Vec<PathBuf>) {
    if dir.join("kustomization.yaml").is_file() {
        found.push(dir.to_path_buf());
    }
    for entry in std::fs::read_dir(dir).expect("read a directory") {
        let entry = entry.expect("an entry");
        if entry.file_type().expect("its type").is_dir() {
            kustomizations(&entry.path(), found);
        }
    }
}

/// `replicas:` of the Deployment named `name` in a rendered stream.
fn replicas_of(rendered: &str, name: &str) -> Option<u32> {
    rendered
        .split("\n---\n")
        .find(|doc| {
            doc.lines().any(|l| l == "kind: Deployment")
                && doc.lines().any(|l| l == format!("  name: {name}"))
        })?
        .lines()
        .find_map(|l| l.strip_prefix("  replicas: "))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn every_kustomization_renders_and_the_overlay_runs_three_orchestrators() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    // A copy, with the key files an operator makes first (never committed).
    let work = tempfile::tempdir().expect("a directory");
    let deploy = work.path().join("deploy");
    copy_tree(&repo_root().join("deploy"), &deploy);
    let make_secrets = |dir: &str, url: Option<&str>| {
        let out = Command::new("sh")
            .arg(deploy.join("make-secrets.sh"))
            .arg(deploy.join(dir))
            .args(url)
            .output()
            .expect("run make-secrets.sh");
        assert!(
            out.status.success(),
            "make-secrets.sh {dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    make_secrets("k8s/secrets", None);
    // The replicas' overlay without its database's URL is refused when it
    // is rendered, naming the file to make (not a pod stuck in
    // CreateContainerConfigError later).
    let refused = Command::new(&kubectl)
        .arg("kustomize")
        .arg(deploy.join("k8s-replicas"))
        .output()
        .expect("run kubectl kustomize");
    assert!(!refused.status.success(), "rendered with no database URL");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("secrets/database-url"), "{said}");
    make_secrets(
        "k8s-replicas/secrets",
        Some("postgres://chorus:pw@postgres:5432/chorus"),
    );

    let mut found = Vec::new();
    kustomizations(&deploy, &mut found);
    found.sort();
    let names: Vec<String> = found
        .iter()
        .map(|d| {
            d.strip_prefix(work.path())
                .expect("under the copy")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        ["deploy/k8s", "deploy/k8s-replicas"],
        "the kustomizations"
    );

    let mut rendered = Vec::new();
    for dir in &found {
        let out = Command::new(&kubectl)
            .arg("kustomize")
            .arg(dir)
            .output()
            .expect("run kubectl kustomize");
        assert!(
            out.status.success(),
            "`kubectl kustomize {}` failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        rendered.push(String::from_utf8(out.stdout).expect("YAML is UTF-8"));
    }
    assert_eq!(
        replicas_of(&rendered[0], "chorus-orchestrator"),
        Some(1),
        "{}",
        rendered[0]
    );
    assert_eq!(
        replicas_of(&rendered[1], "chorus-orchestrator"),
        Some(3),
        "{}",
        rendered[1]
    );
    // People reach the web console through the orchestrator's Service.
    for (i, manifests) in rendered.iter().enumerate() {
        let service = manifests
            .split("\n---\n")
            .find(|doc| {
                doc.lines().any(|l| l == "kind: Service")
                    && doc.lines().any(|l| l == "  name: chorus-orchestrator")
            })
            .unwrap_or_else(|| panic!("{}: no chorus-orchestrator Service", names[i]));
        assert!(
            service.contains("name: console") && service.contains("port: 50053"),
            "{}: the Service does not publish the console: {service}",
            names[i]
        );
    }
    // The overlay keeps everything of its base and adds the shared volume.
    for kind in [
        "kind: Deployment",
        "kind: NetworkPolicy",
        "kind: Secret",
        "kind: ConfigMap",
    ] {
        assert!(
            rendered[1].contains(kind),
            "the overlay lost its base's {kind}"
        );
    }
    assert!(
        rendered[1].contains("ReadWriteMany"),
        "the overlay's shared volume for run directories is missing"
    );
    // The database's URL is in the Secret the replicas read it from.
    let secret = rendered[1]
        .split("\n---\n")
        .find(|doc| doc.lines().any(|l| l == "kind: Secret"))
        .expect("the keys' Secret");
    assert!(secret.contains("  database-url: "), "{secret}");
    // Drains and upgrades take one orchestrator (of three) and one tool-exec
    // (of two) at a time.
    let budget = |manifests: &str, name: &str| {
        manifests
            .split("\n---\n")
            .find(|doc| {
                doc.lines().any(|l| l == "kind: PodDisruptionBudget")
                    && doc.lines().any(|l| l == format!("  name: {name}"))
            })
            .map(str::to_owned)
    };
    let orchestrators =
        budget(&rendered[1], "chorus-orchestrator").expect("the orchestrators' budget");
    assert!(orchestrators.contains("minAvailable: 2"), "{orchestrators}");
    for manifests in &rendered {
        let tool_execs = budget(manifests, "chorus-tool-exec").expect("tool-exec's budget");
        assert!(tool_execs.contains("maxUnavailable: 1"), "{tool_execs}");
    }
    assert!(
        budget(&rendered[0], "chorus-orchestrator").is_none(),
        "one orchestrator alone has no budget that would block every drain"
    );
}
