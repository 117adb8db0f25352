//! Tasks: create, list, status transitions, planning, history.

use super::*;
use crate::domain::TaskStatus;

#[tokio::test]
async fn tasks_are_created_read_and_listed_by_status_page_by_page() {
    for f in fixtures().await {
        let b = f.backend();
        let docs = f.workspace("docs").await;
        let code = f.workspace("code").await;
        let err = f
            .svc
            .create_task(Request::new(pb::CreateTaskRequest {
                budget: None,
                workspace_id: docs.id.clone(),
                description: "  ".into(),
                source: None,
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "description", b);

        let mut created = Vec::new();
        for n in 0..5 {
            created.push(f.task(&docs, &format!("task {n}")).await);
        }
        f.task(&code, "elsewhere").await;
        // Lists are ordered by creation time, then id (tasks created in the same
        // millisecond are ordered by id).
        created.sort_by(|x, y| (x.created_ms, &x.id).cmp(&(y.created_ms, &y.id)));
        let first = &created[0];
        assert_eq!(
            (
                first.status.as_str(),
                first.stage.as_str(),
                first.last_sequence
            ),
            ("pending", "backlog", 1),
            "{b}"
        );
        assert_eq!(
            first.source.as_ref().map(|s| s.kind.as_str()),
            Some("grpc"),
            "{b}"
        );
        let got = f
            .svc
            .get_task(Request::new(pb::GetTaskRequest {
                id: first.id.clone(),
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(&got, first, "{b}");
        for task in &created[1..3] {
            f.set_status(task, "planning").await.expect(b);
        }

        let list = |status: &str, page_size: u32, page_token: String| {
            Request::new(pb::ListTasksRequest {
                workspace_id: docs.id.clone(),
                status: status.into(),
                page_size,
                page_token,
            })
        };
        let planning = f
            .svc
            .list_tasks(list("planning", 0, String::new()))
            .await
            .expect(b)
            .into_inner();
        let ids: Vec<&str> = planning.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, [&created[1].id, &created[2].id], "{b}");
        assert!(planning.next_page_token.is_empty(), "{b}");

        let mut seen = Vec::new();
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let page = f
                .svc
                .list_tasks(list("", 2, token))
                .await
                .expect(b)
                .into_inner();
            pages += 1;
            assert!(page.tasks.len() <= 2, "{b}");
            seen.extend(page.tasks.into_iter().map(|t| t.id));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(pages, 3, "{b}");
        let expected: Vec<String> = created.iter().map(|t| t.id.clone()).collect();
        assert_eq!(seen, expected, "{b}");

        let everywhere = f
            .svc
            .list_tasks(Request::new(pb::ListTasksRequest::default()))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(everywhere.tasks.len(), 6, "{b}");

        let err = f.svc.list_tasks(list("done", 0, String::new())).await;
        assert_status(err, Code::InvalidArgument, "unknown status 'done'", b);
        let err = f.svc.list_tasks(list("", 0, "garbage".into())).await;
        assert_status(err, Code::InvalidArgument, "page_token", b);
        let err = f
            .svc
            .get_task(Request::new(pb::GetTaskRequest {
                id: crate::domain::TaskId::new().to_string(),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::NotFound, "task", b);
    }
}

/// The statuses that lead from pending to `status` (each step allowed).
fn path_to(status: TaskStatus) -> &'static [&'static str] {
    match status {
        TaskStatus::Pending => &[],
        TaskStatus::Planning => &["planning"],
        TaskStatus::AwaitingInput => &["planning", "awaiting_input"],
        TaskStatus::Planned => &["planning", "planned"],
        TaskStatus::Active => &["planning", "planned", "active"],
        TaskStatus::Waiting => &["planning", "planned", "active", "waiting"],
        TaskStatus::Completed => &["planning", "planned", "active", "completed"],
        TaskStatus::Failed => &["failed"],
        TaskStatus::Canceled => &["canceled"],
    }
}

#[tokio::test]
async fn every_status_change_is_allowed_or_refused_by_the_table() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        for from in TaskStatus::ALL {
            for to in TaskStatus::ALL {
                let mut task = f.task(&ws, &format!("{from} to {to}")).await;
                for step in path_to(from) {
                    task = f.set_status(&task, step).await.expect(step);
                }
                assert_eq!(task.status, from.as_str(), "{b}");
                let result = f
                    .svc
                    .update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                        id: task.id.clone(),
                        status: to.as_str().into(),
                        reason: "because".into(),
                        ..Default::default()
                    }))
                    .await
                    .map(tonic::Response::into_inner);
                match from.check_transition(to) {
                    Ok(()) => {
                        let moved = result.unwrap_or_else(|e| panic!("{b}: {from} -> {to}: {e}"));
                        assert_eq!(moved.status, to.as_str(), "{b}");
                        assert_eq!(moved.status_reason, "because", "{b}");
                        assert_eq!(moved.last_sequence, task.last_sequence + 1, "{b}");
                    }
                    Err(_) => {
                        assert_status(result, Code::FailedPrecondition, "cannot move", b);
                        let after = f
                            .svc
                            .get_task(Request::new(pb::GetTaskRequest {
                                id: task.id.clone(),
                                ..Default::default()
                            }))
                            .await
                            .expect(b)
                            .into_inner();
                        assert_eq!(after, task, "{b}: {from} -> {to} changed the task");
                    }
                }
            }
        }
        let task = f.task(&ws, "bad input").await;
        assert_status(
            f.set_status(&task, "").await,
            Code::InvalidArgument,
            "invalid status",
            b,
        );
        assert_status(
            f.set_status(&task, "PLANNING").await,
            Code::InvalidArgument,
            "unknown status",
            b,
        );
        let err = f
            .svc
            .update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                id: "x".into(),
                status: "planning".into(),
                reason: String::new(),
                ..Default::default()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid id", b);
    }
}

#[tokio::test]
async fn planning_is_edited_and_recorded() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write a guide").await;
        let planning = pb::Planning {
            summary: "a guide".into(),
            requirements: vec!["short".into()],
            acceptance_criteria: vec!["reads well".into()],
            plan: vec!["draft".into(), "edit".into()],
            questions: vec![pb::Question {
                question: "for whom?".into(),
                answer: Some("beginners".into()),
                round: 1,
            }],
            assigned_agent: "writer".into(),
        };
        let update = |planning: Option<pb::Planning>| {
            Request::new(pb::UpdatePlanningRequest {
                id: task.id.clone(),
                planning,
                ..Default::default()
            })
        };
        let updated = f
            .svc
            .update_planning(update(Some(planning.clone())))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(updated.planning.as_ref(), Some(&planning), "{b}");
        assert_eq!(updated.last_sequence, 2, "{b}");
        let events = f
            .svc
            .get_history(Request::new(pb::GetHistoryRequest {
                task_id: task.id.clone(),
                after_sequence: 1,
                limit: 0,
            }))
            .await
            .expect(b)
            .into_inner()
            .events;
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].kind, "planning_updated", "{b}");
        let data = chorus_proto::json::from_struct(events[0].data.clone().expect("data"));
        assert_eq!(data["summary"], "a guide", "{b}");
        assert_eq!(data["assigned_agent"], "writer", "{b}");
        assert_eq!(data["plan"], serde_json::json!(["draft", "edit"]), "{b}");

        let err = f.svc.update_planning(update(None)).await;
        assert_status(err, Code::InvalidArgument, "invalid planning", b);
        let err = f
            .svc
            .update_planning(update(Some(pb::Planning {
                assigned_agent: "Writer".into(),
                ..planning.clone()
            })))
            .await;
        assert_status(err, Code::InvalidArgument, "assigned_agent", b);
        let err = f
            .svc
            .update_planning(update(Some(pb::Planning {
                assigned_agent: "ghost".into(),
                ..planning
            })))
            .await;
        assert_status(err, Code::NotFound, "ghost", b);
    }
}

#[tokio::test]
async fn history_is_read_page_by_page() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        for status in ["planning", "planned", "active", "waiting", "active"] {
            f.set_status(&task, status).await.expect(status);
        }
        let page = |after_sequence: u64, limit: u32| {
            Request::new(pb::GetHistoryRequest {
                task_id: task.id.clone(),
                after_sequence,
                limit,
            })
        };
        let mut sequences = Vec::new();
        let mut after = 0;
        loop {
            let events = f
                .svc
                .get_history(page(after, 4))
                .await
                .expect(b)
                .into_inner()
                .events;
            let Some(last) = events.last() else { break };
            after = last.sequence;
            assert!(events.iter().all(|e| e.task_id == task.id), "{b}");
            sequences.extend(events.iter().map(|e| e.sequence));
        }
        assert_eq!(sequences, [1, 2, 3, 4, 5, 6], "{b}");
        let all = f
            .svc
            .get_history(page(0, 0))
            .await
            .expect(b)
            .into_inner()
            .events;
        assert_eq!(all[0].kind, "task_created", "{b}");
        assert_eq!(all[5].kind, "status_changed", "{b}");
        let data = chorus_proto::json::from_struct(all[5].data.clone().expect("data"));
        assert_eq!(
            (data["from"].as_str(), data["to"].as_str()),
            (Some("waiting"), Some("active")),
            "{b}"
        );

        let err = f
            .svc
            .get_history(Request::new(pb::GetHistoryRequest {
                task_id: crate::domain::TaskId::new().to_string(),
                after_sequence: 0,
                limit: 0,
            }))
            .await;
        assert_status(err, Code::NotFound, "task", b);
        let err = f
            .svc
            .get_history(Request::new(pb::GetHistoryRequest::default()))
            .await;
        assert_status(err, Code::InvalidArgument, "task_id", b);
    }
}

/// Every task request names its task as `task_id` (`taskId`); the older `id`
/// of GetTask, PlanTask, CancelTask and the others is still accepted. Both
/// at once must agree.
#[tokio::test]
async fn a_task_is_named_by_task_id_or_by_the_older_id() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        let get = |id: &str, task_id: &str| {
            Request::new(pb::GetTaskRequest {
                id: id.into(),
                task_id: task_id.into(),
            })
        };
        for (id, task_id) in [
            ("", task.id.as_str()),
            (task.id.as_str(), ""),
            (task.id.as_str(), task.id.as_str()),
        ] {
            let got = f
                .svc
                .get_task(get(id, task_id))
                .await
                .expect(b)
                .into_inner();
            assert_eq!(got.id, task.id, "{b}");
        }
        let other = f.task(&ws, "another").await;
        let err = f.svc.get_task(get(&task.id, &other.id)).await;
        assert_status(err, Code::InvalidArgument, "names two tasks", b);
        let err = f.svc.get_task(get("", "")).await;
        assert_status(err, Code::InvalidArgument, "task_id", b);

        let canceled = f
            .svc
            .cancel_task(Request::new(pb::CancelTaskRequest {
                task_id: other.id.clone(),
                reason: "not needed".into(),
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(canceled.status, "canceled", "{b}");
    }
}
