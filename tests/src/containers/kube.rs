//! The manifests of deploy/k8s made ready for `podman kube play`, and their
//! gRPC probes read back, for the container tests.

use std::path::Path;

/// The manifests of deploy/k8s as `podman kube play` takes them: the images
/// built here, a host port for each container port (on 127.0.0.1), names of this
/// test's own, one replica, and the Secret's files from a host directory —
/// podman 4.3 cannot mount a Secret volume (it crashes), so the keys volume
/// becomes a hostPath of the same files.
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

/// The `grpc:` probes of a manifest: (probe kind, port, service).
pub fn grpc_probes(manifest: &str) -> Vec<(String, u16, String)> {
    let lines: Vec<&str> = manifest.lines().map(str::trim).collect();
    let mut probes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if *line == "grpc:" && i > 0 {
            let kind = lines[i - 1].trim_end_matches(':').to_owned();
            let port = lines[i + 1]
                .strip_prefix("port: ")
                .and_then(|p| p.parse().ok())
                .expect("port after grpc:");
            let service = lines[i + 2]
                .strip_prefix("service: ")
                .expect("service after port")
                .trim_matches('"')
                .to_owned();
            probes.push((kind, port, service));
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
          readinessProbe:
            grpc:
              port: 50052
              service: chorus.tools.v1.ToolExec
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
        ] {
            assert!(played.contains(line), "{line:?} not in:\n{played}");
        }
        assert!(!played.contains("secretName"), "{played}");
    }

    #[test]
    fn probes_are_read_with_their_port_and_service() {
        assert_eq!(
            grpc_probes(DEPLOYMENT),
            [(
                "readinessProbe".to_owned(),
                50052,
                "chorus.tools.v1.ToolExec".to_owned()
            )]
        );
    }
}
