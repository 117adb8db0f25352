//! The all-in-one server with certificates: every listener speaks TLS only;
//! operators call it with the CA and a key, grpcurl too; a client certificate
//! named in --tls-client-role acts with its role and one that is not is a
//! caller without a credential; a CLI agent reaches both services over TLS
//! from its sandbox (an `https://` address and CHORUS_TLS_CA).

use chorus_auth::tls::{ClientTls, PeerRoles, ServerTls};
use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_tests::agents::{
    add_agent, call, data, ends_run, fake_cli, planned_task, report, start, summary, wait_for,
    workspace,
};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::pki::Pki;
use serde_json::json;
use tonic::Code;

async fn client_as(
    orchestrator: &Orchestrator,
    tls: &ClientTls,
    credential: Option<&str>,
) -> Result<chorus_tests::agents::Client, tonic::transport::Error> {
    let channel = tls
        .endpoint(&orchestrator.addr.to_string())
        .expect("endpoint")
        .connect()
        .await?;
    let bearer = credential.map_or_else(Bearer::none, Bearer::new);
    Ok(OrchestratorClient::with_interceptor(channel, bearer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_certificates_everything_speaks_tls_and_client_certificates_act_with_their_role() {
    let pki = Pki::new();
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| {
            config.tls = Some(ServerTls {
                cert: pki.server_cert.clone(),
                key: pki.server_key.clone(),
                client_ca: Some(pki.ca.clone()),
            });
            config.peers = PeerRoles::parse(&["ops-bot=operator".to_owned()]).expect("roles");
            config.runner.tls_ca = Some(pki.ca.clone());
            config.runner.claude_bin = fake_cli();
        },
    )
    .await;

    // Plaintext is not spoken on either port.
    for addr in [orchestrator.addr, orchestrator.tool_exec_addr] {
        let plain = ClientTls::default()
            .endpoint(&addr.to_string())
            .expect("endpoint");
        let refused = async {
            let channel = plain.connect().await?;
            tonic_health::pb::health_client::HealthClient::new(channel)
                .check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)?;
            Ok::<(), Box<dyn std::error::Error>>(())
        }
        .await;
        assert!(refused.is_err(), "{addr} answered plaintext");
    }

    // An operator with the CA and the admin key.
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "secure", root.path()).await;
    admin
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "cli".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(&mut admin, &ws, "scribe", &["file.create"], "cli").await;

    // A client certificate named ops-bot acts as an operator, with no key.
    let (cert, key) = pki.client("ops-bot");
    let ops_tls = ClientTls {
        ca: Some(pki.ca.clone()),
        cert: Some(cert),
        key: Some(key),
    };
    let mut ops = client_as(&orchestrator, &ops_tls, None)
        .await
        .expect("connect");
    let task = ops
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id.clone(),
            description: "made with a certificate".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("an operator's certificate creates a task")
        .into_inner();
    let denied = ops
        .create_workspace(pb::CreateWorkspaceRequest {
            name: "more".into(),
            root: root.path().display().to_string(),
        })
        .await
        .expect_err("an operator makes no workspaces");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("ops-bot"), "{denied:?}");

    // A certificate of the same CA that is not named has no role.
    let (cert, key) = pki.client("stranger");
    let stranger_tls = ClientTls {
        ca: Some(pki.ca.clone()),
        cert: Some(cert),
        key: Some(key),
    };
    let mut stranger = client_as(&orchestrator, &stranger_tls, None)
        .await
        .expect("connect");
    let refused = stranger
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no role");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    // grpcurl as an operator runs it.
    let auth = format!("authorization: Bearer {}", orchestrator.admin_key);
    let out = tokio::process::Command::new(
        std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
    )
    .arg("-cacert")
    .arg(&pki.ca)
    .args([
        "-H",
        &auth,
        "-d",
        "{}",
        &orchestrator.addr.to_string(),
        "chorus.orchestrator.v1.Orchestrator/GetStatus",
    ])
    .output()
    .await
    .expect("grpcurl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A CLI agent reaches tool-exec and the orchestrator over TLS from its sandbox.
    let script = [
        call(&json!({"tool": "file.create", "path": "secure.md", "content": "over tls"})),
        report("complete", "wrote it over TLS"),
    ]
    .join("\n");
    let agent_task = planned_task(&mut admin, &ws, &script).await;
    start(&mut admin, &agent_task, "scribe", 120).await;
    let events = wait_for(&mut admin, &agent_task.id, ends_run).await;
    let kinds = summary(&events);
    assert!(
        kinds.iter().any(|k| k == "tool_executed file.create ok"),
        "{kinds:#?}"
    );
    assert!(
        kinds.iter().any(|k| k == "status_changed completed"),
        "{kinds:#?}"
    );
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    assert_eq!(
        std::fs::read_to_string(root.path().join("secure.md")).expect("written"),
        "over tls"
    );
    orchestrator.stop().await;
}
