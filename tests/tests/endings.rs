//! Every ending is final for the tool calls in flight: a bash call whose run
//! ends — by FinishRun (a run its caller drives) or by CancelTask — stops, its
//! processes (a setsid child and a double-forked one included) die, and the
//! call is recorded as stopped by the run's end. Before, such a call ran on
//! until its own timeout (up to 600 s) and was never recorded.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{ESCAPEES, escapees, eventually, give_to_test_user, survivors};
use chorus_tests::agents::{add_agent, data, history, planned_task, workspace};
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::{ToolsEnv, chorus_tools};
use serde_json::json;

#[derive(Debug, Clone, Copy)]
enum Ending {
    FinishRun,
    CancelTask,
}

async fn a_run_end_stops_its_bash_call(ending: Ending) {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let orchestrator = Orchestrator::start(
        &data_dir.path().join("chorus.db").display().to_string(),
        data_dir.path(),
    )
    .await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "endings", root.path()).await;
    add_agent(&mut client, &ws, "builder", &["bash"], "").await;
    let task = planned_task(&mut client, &ws, "build it").await;
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "builder".into(),
            ttl_secs: 600,
        })
        .await
        .expect("run")
        .into_inner();
    let run_id = opened.run.clone().expect("run").id;

    let marker = format!("chorus-escapee-ending-{ending:?}-{}", std::process::id());
    let command = format!("{} while :; do sleep 1; done", escapees(&marker));
    let call = json!({"tool": "bash", "command": command, "timeout_secs": 600}).to_string();
    let env = ToolsEnv {
        token: Some(opened.token.clone()),
        tools_addr: Some(orchestrator.tool_exec_addr.to_string()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };
    let running = tokio::spawn(async move { chorus_tools(&env, &[call.as_str()]).await });
    eventually("the call's processes run", || {
        survivors(&marker).len() == ESCAPEES
    })
    .await;

    match ending {
        Ending::FinishRun => {
            client
                .finish_run(pb::FinishRunRequest {
                    id: run_id.clone(),
                    reason: "done with it".into(),
                })
                .await
                .expect("finish");
        }
        Ending::CancelTask => {
            client
                .cancel_task(pb::CancelTaskRequest {
                    id: task.id.clone(),
                    reason: "changed my mind".into(),
                })
                .await
                .expect("cancel");
        }
    }
    // The call comes back stopped (not after its 600 s), every process gone.
    let ran = running.await.expect("chorus-tools ran");
    let answer = ran.json();
    assert_eq!(
        answer["error"]["code"], "aborted",
        "{ending:?}: the call was not stopped by the run's end: {answer}"
    );
    assert_eq!(
        survivors(&marker),
        Vec::<i32>::new(),
        "{ending:?}: processes of the call outlived its run"
    );
    // And it is in the history, as stopped by the run's end.
    let events = history(&mut client, &task.id).await;
    let recorded = events
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .find(|d| d["tool"] == "bash")
        .unwrap_or_else(|| panic!("{ending:?}: the stopped call was not recorded"));
    assert_eq!(recorded["status"], "aborted", "{recorded}");
    assert_eq!(recorded["run_id"], run_id.as_str());
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_run_stops_the_runs_bash_call_and_records_it() {
    a_run_end_stops_its_bash_call(Ending::FinishRun).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_stops_the_runs_bash_call_and_records_it() {
    a_run_end_stops_its_bash_call(Ending::CancelTask).await;
}
