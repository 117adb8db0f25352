//! The A2A face's cost, against the release orchestrator binary (SQLite):
//!
//! - A task from message to completion: an A2A SendStreamingMessage read to
//!   its `completed` update, beside the same task through the Chorus API as
//!   a client drives it (CreateTask, PlanTask, WatchTask to planned,
//!   StartTask, WatchTask to completed). Both run the planner and the agent
//!   on a fake model that answers at once; alternated, p50/p99.
//! - A unary read through each face: A2A GetTask (the task and its last 100
//!   events as messages) beside the Chorus API's GetTask and GetHistory.
//! - 200 A2A streams at once, each a task to completion: the time until
//!   all completed, p50/p99 of each stream, and the orchestrator's peak
//!   memory.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench a2a`
//! (`CHORUS_BENCH_TASKS` changes the 100 sequential tasks per face,
//! `CHORUS_BENCH_STREAMS` the 200).

use std::time::{Duration, Instant};

use chorus_proto::a2a::v1 as a2a;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{api_team, data, wait_for};
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::{PeakSampler, Samples, env_number, ms};
use tonic::metadata::MetadataValue;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

type A2aClient = a2a::a2a_service_client::A2aServiceClient<tonic::transport::Channel>;

fn authorized<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let bearer = MetadataValue::try_from(format!("Bearer {key}")).expect("ascii key");
    request.metadata_mut().insert("authorization", bearer);
    request
}

/// An A2A message to completion: the time until its `completed` update.
async fn a2a_task(client: &mut A2aClient, key: &str, tenant: &str, n: usize) -> (Duration, String) {
    let started = Instant::now();
    let message = a2a::Message {
        message_id: format!("bench-{n}-{}", uuid_like(n)),
        role: a2a::Role::User as i32,
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Text(format!("Task {n}: report done"))),
            ..Default::default()
        }],
        ..Default::default()
    };
    let request = a2a::SendMessageRequest {
        tenant: tenant.to_owned(),
        message: Some(message),
        ..Default::default()
    };
    let mut stream = client
        .send_streaming_message(authorized(request, key))
        .await
        .expect("send")
        .into_inner();
    let mut task = String::new();
    while let Some(response) = stream.message().await.expect("stream") {
        match response.payload {
            Some(a2a::stream_response::Payload::Task(t)) => task = t.id,
            Some(a2a::stream_response::Payload::StatusUpdate(u)) => {
                let state = u.status.map(|s| s.state).unwrap_or_default();
                if state == a2a::TaskState::Completed as i32 {
                    return (started.elapsed(), task);
                }
                assert!(
                    state == a2a::TaskState::Working as i32
                        || state == a2a::TaskState::Submitted as i32,
                    "task {task} ended {state}"
                );
            }
            _ => {}
        }
    }
    panic!("the stream of task {task} ended before it completed");
}

fn uuid_like(n: usize) -> String {
    format!("{:x}{:x}", std::process::id(), n)
}

/// The same task through the Chorus API, as a client drives it.
async fn api_task(
    client: &mut chorus_tests::agents::Client,
    workspace: &str,
    n: usize,
) -> Duration {
    let started = Instant::now();
    let task = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: workspace.to_owned(),
            description: format!("Task {n}: report done"),
            ..Default::default()
        })
        .await
        .expect("create")
        .into_inner();
    client
        .plan_task(pb::PlanTaskRequest {
            task_id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("plan");
    let to = |status: &'static str| {
        move |e: &pb::TaskEvent| e.kind == "status_changed" && data(e)["to"] == status
    };
    wait_for(client, &task.id, to("planned")).await;
    client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("start");
    wait_for(client, &task.id, to("completed")).await;
    started.elapsed()
}

fn row(what: &str, samples: &Samples) {
    println!(
        "| {what} | {} | {} | {} |",
        ms(samples.median()),
        ms(samples.percentile(99.0)),
        samples.len()
    );
}

async fn run() {
    let tasks = env_number("CHORUS_BENCH_TASKS", 100);
    let streams = env_number("CHORUS_BENCH_STREAMS", 200);
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("root");
    let model = chorus_tests::a2a::answering_at_once().await;
    let db = dir.path().join("chorus.db").display().to_string();
    let orchestrator = OrchestratorProcess::spawn(&dir.path().join("data"), &db, &[]).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, &root, &model, &[], "You report.").await;
    client
        .update_workspace(pb::UpdateWorkspaceRequest {
            id: team.workspace.id.clone(),
            system_provider: Some("model".into()),
            ..Default::default()
        })
        .await
        .expect("system provider");
    let key = orchestrator.admin_key.clone();
    let tenant = team.workspace.name.clone();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", orchestrator.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut a2a_client = A2aClient::new(channel.clone());

    // Warm both paths up.
    for n in 0..5 {
        a2a_task(&mut a2a_client, &key, &tenant, n).await;
        api_task(&mut client, &team.workspace.id, n).await;
    }
    let (mut via_a2a, mut via_api, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..tasks {
        let (took, id) = a2a_task(&mut a2a_client, &key, &tenant, 100 + n).await;
        via_a2a.push(took);
        ids.push(id);
        via_api.push(api_task(&mut client, &team.workspace.id, 100 + n).await);
    }
    println!("| what | p50 | p99 | n |");
    println!("|---|---|---|---|");
    row(
        "A2A SendStreamingMessage, message → completed",
        &Samples::new(via_a2a),
    );
    row(
        "Chorus API: CreateTask, PlanTask, WatchTask, StartTask, WatchTask → completed",
        &Samples::new(via_api),
    );

    // Unary reads of the same tasks through each face.
    let (mut get_a2a, mut get_api, mut history_api) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        for id in &ids {
            let started = Instant::now();
            a2a_client
                .get_task(authorized(
                    a2a::GetTaskRequest {
                        tenant: tenant.clone(),
                        id: id.clone(),
                        history_length: None,
                    },
                    &key,
                ))
                .await
                .expect("a2a get");
            get_a2a.push(started.elapsed());
            let started = Instant::now();
            client
                .get_task(pb::GetTaskRequest {
                    id: id.clone(),
                    ..Default::default()
                })
                .await
                .expect("get");
            get_api.push(started.elapsed());
            let started = Instant::now();
            client
                .get_history(pb::GetHistoryRequest {
                    task_id: id.clone(),
                    ..Default::default()
                })
                .await
                .expect("history");
            history_api.push(started.elapsed());
        }
    }
    row(
        "A2A GetTask (task + its events as messages + artifacts)",
        &Samples::new(get_a2a),
    );
    row("Chorus API GetTask", &Samples::new(get_api));
    row("Chorus API GetHistory", &Samples::new(history_api));

    // Many streams at once.
    let sampler = PeakSampler::start(
        std::fs::canonicalize(chorus_tests::built_bin(
            "chorus-orchestrator",
            "chorus-orchestrator",
        ))
        .expect("the binary"),
    );
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for n in 0..streams {
        let (mut c, key, tenant) = (A2aClient::new(channel.clone()), key.clone(), tenant.clone());
        set.spawn(async move { a2a_task(&mut c, &key, &tenant, 10_000 + n).await.0 });
    }
    let each: Vec<Duration> = set.join_all().await;
    let all = started.elapsed();
    let (_, peak) = sampler.finish().await;
    row(
        &format!("{streams} A2A streams at once: each stream"),
        &Samples::new(each),
    );
    println!(
        "\n{streams} streams at once: all completed in {} ms; the orchestrator's peak memory {peak:.1} MiB",
        all.as_millis()
    );
}
