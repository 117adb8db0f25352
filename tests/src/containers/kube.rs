//! The manifests of deploy/k8s made ready for `podman kube play`, and their
//! probes read back, for the container tests.

use std::path::Path;

/// The manifests of deploy/k8s as `podman kube play` takes them: the images
/// built here, a host port for each container port (on 127.0.0.1), names of this
/// test's own, one replica, and the Secret's files from a host directory —
/// podman 4.3 cannot mount a Secret volume (it crashes), so the keys volume
/// becomes a hostPath of the same files. podman has no Services: an address
/// `chorus-<x>:<port>` in the configuration becomes the pod's DNS name
/// `<prefix>-<x>-pod-0:<port>` on podman's kube network.
pub fn for_kube_play(
    manifest: &str,
    images: &[(&str, &str)],
    ports: &[(u16, u16)],
    keys: &Path,
    prefix: &str,
) -> String {
    let mut out = Vec::new();
    let mut lines = manifest.lines().peekable();
    while let Some(line) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let pad = " ".repeat(indent);
        let trimmed = line.trim();
        if let Some(image) = trimmed.strip_prefix("image: ")
            && let Some((_, local)) = images.iter().find(|(name, _)| *name == image)
        {
            out.push(format!("{pad}image: {local}"));
        } else if let Some(port) = trimmed.strip_prefix("containerPort: ") {
            out.push(line.to_owned());
            let port: u16 = port.parse().expect("port");
            let host = ports
                .iter()
                .find(|(p, _)| *p == port)
                .map(|(_, h)| *h)
                .expect("a host port for each container port");
            out.push(format!("{pad}hostPort: {host}"));
            out.push(format!("{pad}hostIP: 127.0.0.1"));
        } else if trimmed == "secret:" {
            // Skip the Secret volume's own lines.
            while lines
                .peek()
                .is_some_and(|next| next.len() - next.trim_start().len() > indent)
            {
                lines.next();
            }
            out.push(format!("{pad}hostPath:"));
            out.push(format!("{pad}  path: {}", keys.display()));
            out.push(format!("{pad}  type: Directory"));
        } else if let Some((key, value)) = trimmed.split_once(": ")
            && key.starts_with("CHORUS_")
            && key.ends_with("_ADDR")
            && let Some(service) = value.strip_prefix("chorus-")
            && let Some((name, port)) = service.split_once(':')
        {
            out.push(format!("{pad}{key}: {prefix}-{name}-pod-0:{port}"));
        } else if trimmed.starts_with("replicas: ") {
            out.push(format!("{pad}replicas: 1"));
        } else {
            // Names of this test's own: claims, config, deployments (the pods).
            // (podman makes a named volume of each emptyDir, by its name.)
            out.push(
                line.replace("name: chorus-", &format!("name: {prefix}-"))
                    .replace("claimName: chorus-", &format!("claimName: {prefix}-"))
                    .replace("name: tmp", &format!("name: {prefix}-tmp")),
            );
        }
    }
    out.join("\n") + "\n"
}

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// gRPC health of `service` on `port`.
    Grpc { port: u16, service: String },
    /// A TCP connection to `port`.
    Tcp { port: u16 },
}

/// The `grpc:` and `tcpSocket:` probes of a manifest: (probe kind, what it checks).
pub fn probes(manifest: &str) -> Vec<(String, Check)> {
    let lines: Vec<&str> = manifest.lines().map(str::trim).collect();
    let field = |line: &str, name: &str| -> String {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or_else(|| panic!("{name}: expected, found {line:?}"))
            .trim_matches('"')
            .to_owned()
    };
    let mut probes = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(1) {
        let kind = lines[i - 1].trim_end_matches(':').to_owned();
        let port = || field(lines[i + 1], "port").parse().expect("a port number");
        match *line {
            "grpc:" => probes.push((
                kind,
                Check::Grpc {
                    port: port(),
                    service: field(lines[i + 2], "service"),
                },
            )),
            "tcpSocket:" => probes.push((kind, Check::Tcp { port: port() })),
            _ => {}
        }
    }
    probes
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT: &str = "\
kind: Deployment
metadata:
  name: chorus-tool-exec
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: tool-exec
          image: chorus-tool-exec
          ports:
            - name: grpc
              containerPort: 50052
          envFrom:
            - configMapRef:
                name: chorus-config
          readinessProbe:
            grpc:
              port: 50052
              service: chorus.tools.v1.ToolExec
          livenessProbe:
            tcpSocket:
              port: 50052
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: workspaces
          persistentVolumeClaim:
            claimName: chorus-workspaces
        - name: keys
          secret:
            secretName: chorus-keys
            items:
              - key: tool-exec.key
                path: tool-exec.key
        - name: tmp
          emptyDir: {}
";

    #[test]
    fn a_deployment_gets_local_images_host_ports_own_names_and_keys_from_the_host() {
        let played = for_kube_play(
            DEPLOYMENT,
            &[("chorus-tool-exec", "localhost/te:1")],
            &[(50052, 41000)],
            Path::new("/keys"),
            "t-1",
        );
        for line in [
            "  name: t-1-tool-exec",
            "  replicas: 1",
            "          image: localhost/te:1",
            "              containerPort: 50052\n              hostPort: 41000\n              hostIP: 127.0.0.1",
            "            claimName: t-1-workspaces",
            "        - name: keys\n          hostPath:\n            path: /keys\n            type: Directory\n        - name: t-1-tmp",
            "            - name: t-1-tmp\n",
            "                name: t-1-config",
        ] {
            assert!(played.contains(line), "{line:?} not in:\n{played}");
        }
        assert!(!played.contains("secretName"), "{played}");
    }

    #[test]
    fn probes_are_read_with_their_port_and_service() {
        assert_eq!(
            probes(DEPLOYMENT),
            [
                (
                    "readinessProbe".to_owned(),
                    Check::Grpc {
                        port: 50052,
                        service: "chorus.tools.v1.ToolExec".to_owned()
                    }
                ),
                ("livenessProbe".to_owned(), Check::Tcp { port: 50052 }),
            ]
        );
    }

    #[test]
    fn service_addresses_become_pod_names() {
        let played = for_kube_play(
            "data:\n  CHORUS_ORCHESTRATOR_ADDR: chorus-orchestrator:50051\n  CHORUS_LOG_FORMAT: json\n",
            &[],
            &[],
            Path::new("/keys"),
            "t-1",
        );
        assert_eq!(
            played,
            "data:\n  CHORUS_ORCHESTRATOR_ADDR: t-1-orchestrator-pod-0:50051\n  CHORUS_LOG_FORMAT: json\n"
        );
    }
}
