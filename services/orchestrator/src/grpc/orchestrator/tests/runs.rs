//! Runs: open (with a token), read, finish.

use super::*;

fn open(task: &pb::Task, agent: &str) -> Request<pb::OpenRunRequest> {
    Request::new(pb::OpenRunRequest {
        task_id: task.id.clone(),
        agent: agent.into(),
        ttl_secs: 0,
    })
}

#[tokio::test]
async fn an_opened_run_is_active_with_a_token_for_its_tools_and_root() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "planning").await.expect(b);
        f.set_status(&task, "planned").await.expect(b);
        let writer = f
            .svc
            .get_agent(Request::new(pb::GetAgentRequest {
                workspace_id: ws.id.clone(),
                name: "writer".into(),
            }))
            .await
            .expect(b)
            .into_inner();

        let opened = f
            .svc
            .open_run(open(&task, "writer"))
            .await
            .expect(b)
            .into_inner();
        let run = opened.run.expect("run");
        assert_eq!(
            (run.state.as_str(), run.agent.as_str()),
            ("active", "writer"),
            "{b}"
        );
        assert_eq!(run.tools, writer.granted_tools, "{b}");
        assert_eq!(run.task_id, task.id, "{b}");

        let grant = f.state.signer.verifier().verify(&opened.token).expect(b);
        assert_eq!(grant.run_id, run.id, "{b}");
        assert_eq!(grant.task_id, task.id, "{b}");
        assert_eq!(grant.agent, "writer", "{b}");
        assert_eq!(grant.tools, writer.granted_tools, "{b}");
        assert_eq!(grant.root.to_str(), Some(ws.root.as_str()), "{b}");

        let current = f
            .svc
            .get_task(Request::new(pb::GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(current.current_agent, "writer", "{b}");
        let got = f
            .svc
            .get_run(Request::new(pb::GetRunRequest { id: run.id.clone() }))
            .await
            .expect(b)
            .into_inner();
        // GetRun adds the subtree's usage: a run with no handoff, its own.
        assert_eq!(got.subtree_usage, run.usage, "{b}");
        assert_eq!(
            got,
            pb::Run {
                subtree_usage: got.subtree_usage,
                ..run.clone()
            },
            "{b}"
        );

        // The internal planner is run by PlanTask only.
        let err = f.svc.open_run(open(&task, "task-validator")).await;
        assert_status(err, Code::InvalidArgument, "internal to Chorus", b);
        // A run works on an active task: not a pending or a finished one.
        let pending = f.task(&ws, "not planned").await;
        let err = f.svc.open_run(open(&pending, "writer")).await;
        assert_status(err, Code::FailedPrecondition, "from pending", b);
        let err = f
            .svc
            .open_run(Request::new(pb::OpenRunRequest {
                task_id: task.id.clone(),
                agent: "writer".into(),
                ttl_secs: 200_000,
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "ttl_secs: at most 172800", b);

        let err = f.svc.open_run(open(&task, "ghost")).await;
        assert_status(err, Code::NotFound, "ghost", b);
        let err = f.svc.open_run(open(&task, "Writer")).await;
        assert_status(err, Code::InvalidArgument, "invalid agent", b);
        // An agent of another workspace is not one of this task's.
        let other = f.workspace("code").await;
        f.svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                workspace_id: other.id.clone(),
                name: "coder".into(),
                ..Default::default()
            }))
            .await
            .expect(b);
        let err = f.svc.open_run(open(&task, "coder")).await;
        assert_status(err, Code::NotFound, "coder", b);
        let err = f
            .svc
            .get_run(Request::new(pb::GetRunRequest {
                id: crate::domain::RunId::new().to_string(),
            }))
            .await;
        assert_status(err, Code::NotFound, "run", b);
    }
}

#[tokio::test]
async fn a_finished_run_records_its_end_and_cannot_finish_again() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "planning").await.expect(b);
        f.set_status(&task, "planned").await.expect(b);
        let run = f
            .svc
            .open_run(open(&task, "writer"))
            .await
            .expect(b)
            .into_inner()
            .run
            .expect("run");
        let finish = |reason: &str| {
            Request::new(pb::FinishRunRequest {
                id: run.id.clone(),
                reason: reason.into(),
            })
        };
        let finished = f
            .svc
            .finish_run(finish("done"))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(finished.state, "finished", "{b}");
        assert_eq!(finished.end_reason, "done", "{b}");
        assert!(
            finished.finished_ms >= finished.started_ms && finished.finished_ms > 0,
            "{b}"
        );

        let after = f
            .svc
            .get_task(Request::new(pb::GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert!(after.current_agent.is_empty(), "{b}");
        // Finished without a report, with no other run: the task waits for
        // someone (before, it stayed active with no run).
        assert_eq!(after.status, "waiting", "{b}");
        assert!(
            after.status_reason.contains("without a completion report")
                && after.status_reason.contains(&run.id),
            "{b}: {}",
            after.status_reason
        );
        let events = f
            .svc
            .get_history(Request::new(pb::GetHistoryRequest {
                task_id: task.id.clone(),
                after_sequence: 0,
                limit: 0,
            }))
            .await
            .expect(b)
            .into_inner()
            .events;
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "task_created",
                "status_changed",
                "status_changed",
                "run_opened",
                "status_changed",
                "agent_started",
                "agent_completed",
                "status_changed"
            ],
            "{b}"
        );
        let data = chorus_proto::json::from_struct(events[6].data.clone().expect("data"));
        assert_eq!(data["run_id"], run.id.as_str(), "{b}");
        assert_eq!(data["agent"], "writer", "{b}");
        assert_eq!(data["reason"], "done", "{b}");

        let err = f.svc.finish_run(finish("again")).await;
        assert_status(err, Code::FailedPrecondition, "already finished", b);
        let err = f
            .svc
            .finish_run(Request::new(pb::FinishRunRequest {
                id: "nope".into(),
                reason: String::new(),
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid id", b);
    }
}
