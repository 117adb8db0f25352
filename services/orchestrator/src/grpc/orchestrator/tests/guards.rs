//! What the API refuses so that nothing is left half-done: moving a task with a
//! live run by hand, rewriting a completed task's plan, starting the internal
//! planner, deleting a task that is not over, watching past the last event,
//! unbounded values; and what it fixes up or gives back: trimmed allow-lists,
//! a default agent's original instructions, a deleted task's history.

use super::*;

fn open_writer(task: &pb::Task) -> Request<pb::OpenRunRequest> {
    Request::new(pb::OpenRunRequest {
        task_id: task.id.clone(),
        agent: "writer".into(),
        ttl_secs: 0,
    })
}

async fn planned(f: &Fixture, ws: &pb::Workspace, description: &str) -> pb::Task {
    let b = f.backend();
    let task = f.task(ws, description).await;
    f.set_status(&task, "planning").await.expect(b);
    f.set_status(&task, "planned").await.expect(b)
}

#[tokio::test]
async fn a_task_with_a_live_run_is_not_moved_by_hand_and_only_a_task_that_is_over_is_deleted() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = planned(&f, &ws, "write").await;
        f.svc.open_run(open_writer(&task)).await.expect(b);
        for status in ["waiting", "completed", "failed", "pending", "canceled"] {
            assert_status(
                f.set_status(&task, status).await,
                Code::FailedPrecondition,
                "CancelTask",
                b,
            );
        }
        let delete = || {
            Request::new(pb::DeleteTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            })
        };
        assert_status(
            f.svc.delete_task(delete()).await,
            Code::FailedPrecondition,
            "cancel it with CancelTask first",
            b,
        );
        // Its workspace cannot go either, and says how to make it possible.
        assert_status(
            f.svc
                .delete_workspace(Request::new(pb::DeleteWorkspaceRequest {
                    id: ws.id.clone(),
                }))
                .await,
            Code::FailedPrecondition,
            "DeleteTask",
            b,
        );
        f.svc
            .cancel_task(Request::new(pb::CancelTaskRequest {
                id: task.id.clone(),
                reason: "stop".into(),
                ..Default::default()
            }))
            .await
            .expect(b);
        f.svc.delete_task(delete()).await.expect(b);
        assert_status(
            f.svc
                .get_task(Request::new(pb::GetTaskRequest {
                    id: task.id.clone(),
                    ..Default::default()
                }))
                .await,
            Code::NotFound,
            "task",
            b,
        );
        let history = f
            .state
            .store
            .events(
                crate::domain::TaskId::parse(&task.id).expect("id"),
                0,
                100,
                1 << 20,
            )
            .await;
        assert!(
            history.is_err_and(|e| matches!(e, crate::store::StoreError::NotFound { .. })),
            "{b}"
        );
        f.svc
            .delete_workspace(Request::new(pb::DeleteWorkspaceRequest {
                id: ws.id.clone(),
            }))
            .await
            .expect(b);
    }
}

#[tokio::test]
async fn a_completed_tasks_plan_is_kept() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = planned(&f, &ws, "write").await;
        f.set_status(&task, "active").await.expect(b);
        f.set_status(&task, "completed").await.expect(b);
        let err = f
            .svc
            .update_planning(Request::new(pb::UpdatePlanningRequest {
                id: task.id.clone(),
                planning: Some(pb::Planning {
                    summary: "rewritten".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::FailedPrecondition, "create a new task", b);
    }
}

#[tokio::test]
async fn the_internal_planner_is_not_started_by_hand_and_its_instructions_can_be_reset() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = planned(&f, &ws, "write").await;
        let err = f
            .svc
            .start_task(Request::new(pb::StartTaskRequest {
                task_id: task.id.clone(),
                agent: "task-validator".into(),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "internal to Chorus", b);
        let update = |instructions: Option<&str>, reset: bool| {
            Request::new(pb::UpdateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "task-validator".into(),
                instructions: instructions.map(str::to_owned),
                reset_instructions: reset,
                ..Default::default()
            })
        };
        let original = f
            .svc
            .get_agent(Request::new(pb::GetAgentRequest {
                workspace_id: ws.id.clone(),
                name: "task-validator".into(),
            }))
            .await
            .expect(b)
            .into_inner()
            .instructions;
        let changed = f
            .svc
            .update_agent(update(Some("say yes"), false))
            .await
            .expect(b);
        assert_eq!(changed.into_inner().instructions, "say yes", "{b}");
        let reset = f.svc.update_agent(update(None, true)).await.expect(b);
        assert_eq!(reset.into_inner().instructions, original, "{b}");
        assert_status(
            f.svc.update_agent(update(Some("x"), true)).await,
            Code::InvalidArgument,
            "not both",
            b,
        );
    }
}

#[tokio::test]
async fn watching_past_the_last_event_is_out_of_range_and_says_where_the_end_is() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        let err = f
            .svc
            .watch_task(Request::new(pb::WatchTaskRequest {
                task_id: task.id.clone(),
                after_sequence: 50,
                follow: true,
                until_needed: false,
            }))
            .await;
        assert_status(err, Code::OutOfRange, "last event (1)", b);
    }
}

#[tokio::test]
async fn unbounded_values_are_refused_with_their_bound() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = planned(&f, &ws, "write").await;
        let err = f
            .svc
            .start_task(Request::new(pb::StartTaskRequest {
                task_id: task.id.clone(),
                agent: "writer".into(),
                timeout_secs: u32::MAX,
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "at most 86400 s", b);
        let err = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "verbose".into(),
                instructions: "x".repeat(1 << 20),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "32768-byte limit", b);
        let err = f
            .svc
            .update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                id: task.id.clone(),
                status: "waiting".into(),
                reason: "r".repeat(70_000),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "2048-byte limit", b);
        let err = f
            .svc
            .create_provider(Request::new(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "local".into(),
                kind: pb::ProviderKind::OpenaiCompatible.into(),
                base_url: "http://".into(),
                model: "m".into(),
                api_key: String::new(),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "base_url", b);
    }
}

#[tokio::test]
async fn allow_lists_are_trimmed_and_keep_to_what_the_provider_can_do() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let created = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "reader".into(),
                allowed_tools: vec![" file.read".into(), "file.read ".into(), " ".into()],
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(created.allowed_tools, ["file.read"], "{b}");
        let err = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "judge".into(),
                allowed_tools: vec!["planner-output".into()],
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "planner's own tool", b);
        f.svc
            .create_provider(Request::new(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "oc".into(),
                kind: pb::ProviderKind::Opencode.into(),
                ..Default::default()
            }))
            .await
            .expect(b);
        let err = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "searcher".into(),
                allowed_tools: vec!["web.search".into()],
                provider: "oc".into(),
                ..Default::default()
            }))
            .await;
        assert_status(
            err,
            Code::InvalidArgument,
            "only Claude Code providers offer",
            b,
        );
        // The default researcher has web.search: it cannot be moved to OpenCode.
        let err = f
            .svc
            .update_agent(Request::new(pb::UpdateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "researcher".into(),
                provider: Some("oc".into()),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "web.search", b);
    }
}
