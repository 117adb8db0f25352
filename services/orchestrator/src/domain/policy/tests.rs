use super::*;
use crate::domain::{Name, Planning, RunId, TaskId, TaskSource, WorkspaceId};

fn run(state: RunState, tools: &[&str], parent: Option<RunId>) -> Run {
    Run {
        id: RunId::new(),
        task_id: TaskId::new(),
        agent: Name::parse("agent", "writer").expect("name"),
        parent,
        state,
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        started_ms: 0,
        finished_ms: None,
        end_reason: None,
        completion_report: None,
        planner_output: None,
        session_id: None,
        usage: crate::domain::Usage::default(),
    }
}

fn task(status: TaskStatus) -> Task {
    Task {
        id: TaskId::new(),
        workspace_id: WorkspaceId::new(),
        description: "write a haiku".into(),
        source: TaskSource::default(),
        status,
        status_reason: None,
        stage: Stage::Backlog,
        planning: Planning::default(),
        current_agent: None,
        created_ms: 0,
        updated_ms: 0,
        last_sequence: 1,
    }
}

fn report(status: ReportStatus) -> CompletionReport {
    CompletionReport {
        status,
        summary: "did it".into(),
        output: "the haiku".into(),
        blocked_reason: None,
    }
}

#[test]
fn only_active_runs_may_call_tools() {
    for (state, says) in [
        (RunState::Spawning, "still starting"),
        (RunState::AwaitingHandoff, "waiting for a handoff"),
        (RunState::Finished, "has ended"),
    ] {
        let err = check_tool_call(&run(state, &["file.read"], None), "file.read")
            .expect_err("not active");
        assert!(
            matches!(err, DomainError::RunNotActive(ref m) if m.contains(says)),
            "{err}"
        );
    }
    assert!(check_tool_call(&run(RunState::Active, &["file.read"], None), "file.read").is_ok());
}

#[test]
fn tools_outside_the_allow_list_are_denied_but_reporting_is_always_granted() {
    let active = run(RunState::Active, &["file.read"], None);
    let err = check_tool_call(&active, "bash").expect_err("denied");
    assert!(
        matches!(err, DomainError::NotAllowed(ref m) if m.contains("'bash' is not allowed for agent 'writer'")),
        "{err}"
    );
    for tool in ["completion-report", "planner-output", "help"] {
        assert!(check_tool_call(&active, tool).is_ok(), "{tool}");
    }
    assert!(matches!(
        check_tool_call(&active, "nope"),
        Err(DomainError::Invalid { .. })
    ));
}

#[test]
fn a_root_report_settles_the_task() {
    for (status, expected) in [
        (ReportStatus::Complete, TaskStatus::Completed),
        (ReportStatus::Blocked, TaskStatus::Waiting),
        (ReportStatus::Failed, TaskStatus::Failed),
    ] {
        let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Active));
        let events = apply_completion_report(&mut r, &mut t, report(status)).expect("applies");
        assert_eq!(t.status, expected);
        let kinds: Vec<EventKind> = events.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                EventKind::CompletionReportSubmitted,
                EventKind::StatusChanged
            ]
        );
        assert_eq!(events[1].1["to"], expected.as_str());
    }
}

#[test]
fn blocked_keeps_the_reason_on_the_task() {
    let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Active));
    let blocked = CompletionReport {
        blocked_reason: Some("needs the API key".into()),
        ..report(ReportStatus::Blocked)
    };
    apply_completion_report(&mut r, &mut t, blocked).expect("applies");
    assert_eq!(t.status_reason.as_deref(), Some("needs the API key"));
}

#[test]
fn a_second_report_is_refused_and_changes_nothing() {
    let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Active));
    apply_completion_report(&mut r, &mut t, report(ReportStatus::Blocked)).expect("first");
    let before = (r.clone(), t.clone());
    let err = apply_completion_report(&mut r, &mut t, report(ReportStatus::Complete))
        .expect_err("second");
    assert!(matches!(err, DomainError::AlreadyDone(_)), "{err}");
    assert_eq!((r, t), before);
}

#[test]
fn a_child_report_is_kept_for_the_parent_and_leaves_the_task_alone() {
    let (mut child, mut t) = (
        run(RunState::Active, &[], Some(RunId::new())),
        task(TaskStatus::Active),
    );
    let events = apply_completion_report(&mut child, &mut t, report(ReportStatus::Complete))
        .expect("applies");
    assert_eq!(t.status, TaskStatus::Active);
    assert_eq!(events.len(), 1);
    assert_eq!(
        child.completion_report.as_ref().map(|r| r.status),
        Some(ReportStatus::Complete)
    );
}

#[test]
fn a_report_the_status_table_refuses_changes_nothing() {
    let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Planned));
    let err = apply_completion_report(&mut r, &mut t, report(ReportStatus::Complete))
        .expect_err("planned -> completed");
    assert!(matches!(err, DomainError::Transition(_)), "{err}");
    assert!(r.completion_report.is_none());
    assert_eq!(t.status, TaskStatus::Planned);
}

#[test]
fn planner_output_is_accepted_once() {
    let mut r = run(RunState::Active, &[], None);
    let questions = PlannerOutput::Questions {
        questions: vec!["which audience?".into()],
    };
    let events = apply_planner_output(&mut r, questions.clone()).expect("first");
    assert_eq!(events[0].1["type"], "questions");
    assert!(matches!(
        apply_planner_output(&mut r, questions),
        Err(DomainError::AlreadyDone(_))
    ));
}

#[test]
fn stages_and_comments_follow_their_rules() {
    let r = run(RunState::Active, &[], None);
    let mut t = task(TaskStatus::Active);
    let (kind, data) = change_stage(&mut t, Stage::Research, Some(&r)).expect("forward");
    assert_eq!(
        (kind, data["from"].as_str(), data["to"].as_str()),
        (EventKind::StageChanged, Some("backlog"), Some("research"))
    );
    assert!(change_stage(&mut t, Stage::Done, Some(&r)).is_err());
    assert_eq!(t.stage, Stage::Research);
    assert!(comment(&r, "  ").is_err());
    assert_eq!(
        comment(&r, "looks good").expect("comment").1["text"],
        "looks good"
    );
}

#[test]
fn a_run_starts_as_the_current_agent_and_finishes_once() {
    let mut r = run(RunState::Spawning, &[], None);
    let mut t = task(TaskStatus::Active);
    let (kind, _) = activate_run(&mut r, &mut t).expect("spawning -> active");
    assert_eq!(kind, EventKind::AgentStarted);
    assert_eq!(r.state, RunState::Active);
    assert_eq!(t.current_agent.as_ref(), Some(&r.agent));
    assert!(activate_run(&mut r, &mut t).is_err(), "already active");

    let (kind, data) = finish_run(&mut r, &mut t, "done".into(), 42).expect("finish");
    assert_eq!(kind, EventKind::AgentCompleted);
    assert_eq!(data["reason"], "done");
    assert_eq!((r.state, r.finished_ms), (RunState::Finished, Some(42)));
    assert_eq!(t.current_agent, None);
    let err = finish_run(&mut r, &mut t, "again".into(), 43).expect_err("twice");
    assert!(matches!(err, DomainError::RunNotActive(_)), "{err}");
    assert_eq!(r.end_reason.as_deref(), Some("done"));
}

#[test]
fn finishing_a_run_leaves_another_agent_current() {
    let mut r = run(RunState::Active, &[], None);
    let mut t = task(TaskStatus::Active);
    let other = Name::parse("agent", "editor").expect("name");
    t.current_agent = Some(other.clone());
    finish_run(&mut r, &mut t, "done".into(), 1).expect("finish");
    assert_eq!(t.current_agent, Some(other));
}
