//! chorus-health-probe, the check the images' health checks and exec probes run:
//! exit 0 for SERVING, 1 for a service name the server does not report (or
//! reports otherwise), 3 when nothing answers.

use std::process::Output;

use chorus_tests::{TOOL_EXEC_SERVICE, ToolExec};

async fn probe(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus-health-probe"))
        .args(args)
        .output()
        .await
        .expect("run chorus-health-probe")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_passes_only_for_a_serving_service() {
    let tool_exec = ToolExec::start().await;
    let addr = tool_exec.addr.to_string();

    for service in ["", TOOL_EXEC_SERVICE] {
        let out = probe(&[&addr, "--service", service]).await;
        assert_eq!(out.status.code(), Some(0), "{service:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("SERVING"));
    }
    let out = probe(&[
        &format!("http://{addr}"),
        "--service",
        "chorus.nope.v1.Nope",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("does not report health for chorus.nope.v1.Nope"),
        "{out:?}"
    );

    tool_exec.stop().await;
    let out = probe(&[&addr, "--timeout-secs", "1"]).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach"),
        "{out:?}"
    );
}
