//! A2A push notifications with clients no one here wrote: the official
//! Python SDK sets a webhook for a task, and every status change reaches it
//! once, signed with the secret given once, retried when the receiver fails;
//! never this machine, and never a token shown to a viewer.

use chorus_sandbox::testing::eventually;
use chorus_tests::a2a::{
    A2aSetup, TOOLS, create, error, events, plan, python_or_skip, report, run_client, state,
};
use chorus_tests::fake_openai::FakeOpenAi;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_change_is_pushed_to_the_webhook_once_signed_and_retried() {
    use chorus_orchestrator::a2a::push::signature;
    use chorus_sandbox::testing::{TestNet, give_to_test_user, root_for};
    let Some(python) = python_or_skip() else {
        return;
    };
    if !root_for("a webhook off this machine's loopback (a network namespace)") {
        return;
    }
    // The webhook is on a private network the operator allows; loopback,
    // the metadata address and every address of this machine (the host's
    // end of that network too) are refused whatever is allowed.
    let mut net = TestNet::create();
    let logs = tempfile::tempdir().expect("logs");
    give_to_test_user(logs.path());
    let log = logs.path().join("hook.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/a2a/webhook.py");
    let port = "38080";
    let ip = net.ip.to_string();
    net.serve(
        "/usr/bin/python3",
        &[script, &ip, port, &log.display().to_string()],
        "ready",
    )
    .await;
    let model = FakeOpenAi::start(vec![plan(), create("pushed.txt"), report("pushed")]).await;
    let setup = A2aSetup::start_with(
        &model,
        TOOLS,
        None,
        &["--a2a-push-allow-network", "10.200.0.0/16,0.0.0.0/0"],
    )
    .await;
    // The worker asks before it writes: the wait is pushed too.
    let mut admin = setup.orchestrator.client().await;
    let ask = chorus_tests::approvals::rule("file.create", "ask", "", 0);
    chorus_tests::approvals::set_rules(&mut admin, &setup.workspace.id, "worker", vec![ask]).await;
    let hook = format!("http://{ip}:{port}/hook");
    let own: Vec<String> = nix::ifaddrs::getifaddrs()
        .expect("getifaddrs")
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
        .filter(|a| !a.is_loopback())
        .map(|a| format!("http://{a}:{port}/hook"))
        .collect();
    assert!(
        own.contains(&format!("http://{}:{port}/hook", net.host_ip)),
        "{own:?}"
    );
    let mut ops = vec![
        json!({ "op": "send", "text": "Write pushed.txt",
          "push": { "url": hook, "token": "tok-123", "scheme": "Bearer", "credentials": "hook-secret" } }),
        json!({ "op": "push_list", "task_id": "$task", "key": "viewer" }),
        json!({ "op": "push_list", "task_id": "$task" }),
        json!({ "op": "push_create", "task_id": "$task", "url": "http://127.0.0.1:9/hook" }),
        json!({ "op": "push_create", "task_id": "$task", "url": "http://169.254.169.254/latest/meta-data" }),
        json!({ "op": "push_create", "task_id": "$task", "url": "http://localhost:9/hook" }),
        json!({ "op": "push_create", "task_id": "$task", "url": "http:///nohost" }),
        json!({ "op": "push_create", "task_id": "$task", "url": "http://0.0.0.1:9/hook" }),
    ];
    ops.extend(
        own.iter()
            .map(|url| json!({ "op": "push_create", "task_id": "$task", "url": url })),
    );
    ops.push(json!({ "op": "send", "task_id": "$task", "data": { "approve": true } }));
    let mut results = run_client(&python, &setup.plan(Value::Array(ops))).await;
    assert_eq!(
        state(events(&results[0]).last().expect("events")),
        "TASK_STATE_INPUT_REQUIRED",
        "the write waits for approval"
    );
    let approved = results.pop().expect("the approval's answer");
    assert_eq!(
        state(events(&approved).last().expect("events")),
        "TASK_STATE_COMPLETED"
    );
    let secret = results[0]["push_secret"].as_str().unwrap_or_default();
    assert_eq!(
        secret.len(),
        64,
        "the signing secret comes once, with the answer: {}",
        results[0]
    );
    let viewed = &results[1]["list"]["configs"];
    assert_eq!(viewed.as_array().map(Vec::len), Some(1), "{viewed}");
    assert_eq!(viewed[0]["url"], hook.as_str());
    assert_eq!(viewed[0]["authentication"]["scheme"], "Bearer");
    assert!(
        viewed[0]["authentication"].get("credentials").is_none()
            && viewed[0].get("token").is_none(),
        "a viewer never reads credentials or the token: {viewed}"
    );
    assert_eq!(results[2]["list"]["configs"][0]["token"], "tok-123");
    assert!(
        !results[1..3].iter().any(|r| r.to_string().contains(secret)),
        "the signing secret is never read back"
    );
    for (i, refused) in results[3..].iter().enumerate() {
        assert_eq!(
            error(refused),
            ("InvalidParamsError", "INVALID_ARGUMENT"),
            "create {i}: {refused}"
        );
    }
    for refused in &results[8..] {
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("never this machine"), "{message}");
    }

    // pending → planning → planned → active, the call that waits, its
    // approval, completed: each delivered once (the first after a 503 and a
    // retry), signed with the secret (not with the token every notification
    // carries).
    let delivered = |log: &std::path::Path| -> Vec<Value> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    };
    eventually("the completed status reaches the webhook", || {
        delivered(&log)
            .iter()
            .any(|r| r["body"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
    })
    .await;
    let requests = delivered(&log);
    assert_eq!(requests[0]["answered"], 503, "{requests:?}");
    let ok: Vec<&Value> = requests.iter().filter(|r| r["answered"] == 204).collect();
    let states: Vec<&str> = ok
        .iter()
        .map(|r| {
            r["body"]["statusUpdate"]["status"]["state"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        states,
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{requests:?}"
    );
    assert_eq!(
        requests[1]["body"], requests[0]["body"],
        "the retry sends the same notification"
    );
    for r in &requests {
        assert_eq!(r["headers"]["x-a2a-notification-token"], "tok-123", "{r}");
        assert_eq!(r["headers"]["authorization"], "Bearer hook-secret", "{r}");
        let header = r["headers"]["x-chorus-signature"]
            .as_str()
            .unwrap_or_default();
        let at: i64 = header
            .strip_prefix("t=")
            .and_then(|rest| rest.split(',').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_default();
        let raw = r["raw"].as_str().unwrap_or_default();
        assert_eq!(header, signature(secret, at, raw), "{r}");
        assert_ne!(
            header,
            signature("tok-123", at, raw),
            "keyed with the token: {r}"
        );
        assert_eq!(
            r["body"]["statusUpdate"]["taskId"], results[0]["task"],
            "{r}"
        );
    }
}
