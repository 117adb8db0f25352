use super::*;
use crate::domain::{HandoffOutcome, Name, Planning, RunId, TaskId, TaskSource, WorkspaceId};

fn run(state: RunState, tools: &[&str], parent: Option<RunId>) -> Run {
    Run {
        id: RunId::new(),
        task_id: TaskId::new(),
        agent: Name::parse("agent", "writer").expect("name"),
        parent,
        state,
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        rules: Default::default(),
        started_ms: 0,
        finished_ms: None,
        end_reason: None,
        completion_report: None,
        planner_output: None,
        session_id: None,
        usage: crate::domain::Usage::default(),
        handoff_index: None,
        prompt: None,
        output: None,
        token: None,
        replica: None,
        epoch: 0,
        timeout_ms: None,
        lease_expires_ms: None,
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
        usage: crate::domain::Usage::default(),
        budget: crate::domain::TaskBudget::default(),
        auto_start: None,
        branch: None,
        branch_note: None,
        approvals: Default::default(),
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
    for tool in ["completion-report", "help"] {
        assert!(check_tool_call(&active, tool).is_ok(), "{tool}");
    }
    // The planner's own tool is granted to the planner's runs only.
    assert!(check_tool_call(&active, "planner-output").is_err());
    let planner = run(RunState::Active, &["planner-output"], None);
    assert!(check_tool_call(&planner, "planner-output").is_ok());
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
        let events =
            apply_completion_report(&mut r, &mut t, report(status), None).expect("applies");
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
    apply_completion_report(&mut r, &mut t, blocked, None).expect("applies");
    assert_eq!(t.status_reason.as_deref(), Some("needs the API key"));
}

#[test]
fn a_second_report_is_refused_and_changes_nothing() {
    let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Active));
    apply_completion_report(&mut r, &mut t, report(ReportStatus::Blocked), None).expect("first");
    let before = (r.clone(), t.clone());
    let err = apply_completion_report(&mut r, &mut t, report(ReportStatus::Complete), None)
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
    let events = apply_completion_report(&mut child, &mut t, report(ReportStatus::Complete), None)
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
    let err = apply_completion_report(&mut r, &mut t, report(ReportStatus::Complete), None)
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

    let events = finish_run(&mut r, &mut t, "done".into(), 42).expect("finish");
    let [(kind, data)] = events.as_slice() else {
        panic!("one event: {events:?}")
    };
    let (kind, data) = (*kind, data.clone());
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

fn child_of(parent: &Run, agent: &str, index: u32) -> Run {
    let mut child = run(RunState::Spawning, &["file.read"], Some(parent.id));
    child.task_id = parent.task_id;
    child.agent = Name::parse("agent", agent).expect("name");
    child.handoff_index = Some(index);
    child.prompt = Some(format!("{agent}, do your part"));
    child
}

fn kinds(events: &Events) -> Vec<&'static str> {
    events
        .iter()
        .map(
            |(kind, _)| match serde_json::to_value(kind).expect("kind") {
                Value::String(s) => Box::leak(s.into_boxed_str()) as &'static str,
                _ => "?",
            },
        )
        .collect()
}

#[test]
fn a_handoff_parks_the_parent_and_its_end_wakes_it() {
    let mut task = task(TaskStatus::Active);
    let mut parent = run(RunState::Active, &["handoff"], None);
    let mut child = child_of(&parent, "editor", 1);
    let events = handoff::begin_handoff(&mut task, &child, Some(&mut parent)).expect("begin");
    assert_eq!(kinds(&events), ["agent_handoff_started"]);
    assert_eq!(events[0].1["from_agent"], "writer");
    assert_eq!(events[0].1["handoff_index"], 1);
    assert_eq!(parent.state, RunState::AwaitingHandoff);
    assert_eq!(
        task.current_agent.as_ref().map(Name::as_str),
        Some("editor")
    );
    assert!(
        check_tool_call(&parent, "handoff").is_err(),
        "a waiting parent cannot call tools"
    );

    // The child reports complete: recorded for the parent, the task stays active.
    child.state = RunState::Active;
    apply_completion_report(&mut child, &mut task, report(ReportStatus::Complete), None)
        .expect("report");
    assert_eq!(
        task.status,
        TaskStatus::Active,
        "a child's report does not settle the task"
    );
    child.output = Some("edited".into());
    let events = handoff::end_handoff(
        &child,
        Some(&mut parent),
        &mut task,
        &HandoffOutcome::Completed,
        50,
    )
    .expect("end");
    assert_eq!(kinds(&events), ["agent_handoff_completed", "tool_executed"]);
    assert_eq!(events[0].1["outcome"], "completed");
    assert_eq!(events[0].1["completion_report"]["status"], "complete");
    assert_eq!(events[1].1["tool"], "handoff");
    assert_eq!(events[1].1["status"], "ok");
    assert_eq!(events[1].1["run_id"], parent.id.to_string());
    assert_eq!(parent.state, RunState::Active);
    assert_eq!(
        task.current_agent.as_ref().map(Name::as_str),
        Some("writer")
    );
    assert!(
        check_tool_call(&parent, "handoff").is_ok(),
        "the parent works again"
    );
}

#[test]
fn only_an_active_run_hands_off_and_a_root_handoff_starts_the_task() {
    let mut task_state = task(TaskStatus::Active);
    let mut waiting = run(RunState::AwaitingHandoff, &["handoff"], None);
    let child = child_of(&waiting, "editor", 2);
    let err =
        handoff::begin_handoff(&mut task_state, &child, Some(&mut waiting)).expect_err("refused");
    assert!(
        err.to_string().contains("only an active run can hand off"),
        "{err}"
    );

    let mut planned = task(TaskStatus::Planned);
    let mut root = run(RunState::Spawning, &[], None);
    root.handoff_index = Some(1);
    let events = handoff::begin_handoff(&mut planned, &root, None).expect("root handoff");
    assert_eq!(kinds(&events), ["status_changed", "agent_handoff_started"]);
    assert_eq!(planned.status, TaskStatus::Active);
    let mut pending = task(TaskStatus::Pending);
    assert!(handoff::begin_handoff(&mut pending, &root, None).is_err());
}

#[test]
fn canceling_a_task_ends_a_handoff_chain_children_first() {
    let mut task = task(TaskStatus::Active);
    let mut a = run(RunState::AwaitingHandoff, &["handoff"], None);
    a.agent = Name::parse("agent", "lead").expect("name");
    let mut b = child_of(&a, "writer", 1);
    b.state = RunState::AwaitingHandoff;
    let mut c = child_of(&b, "editor", 2);
    c.state = RunState::Active;
    let mut runs = vec![a.clone(), b.clone(), c.clone()];
    let events = cancel_task(&mut task, &mut runs, "enough", 9).expect("cancel");
    assert_eq!(
        kinds(&events),
        [
            "status_changed",
            "run_canceled",
            "agent_handoff_completed",
            "run_canceled",
            "agent_handoff_completed",
            "run_canceled",
        ]
    );
    assert_eq!(
        events[1].1["run_id"],
        c.id.to_string(),
        "the deepest run ends first"
    );
    assert_eq!(events[2].1["failure"], "canceled");
    assert_eq!(events[5].1["run_id"], a.id.to_string());
    assert!(runs.iter().all(|r| r.state == RunState::Finished));
    assert_eq!(task.status, TaskStatus::Canceled);
}

#[test]
fn interrupted_runs_leave_an_active_task_waiting_and_a_planning_task_failed() {
    let mut active = task(TaskStatus::Active);
    let root = run(RunState::AwaitingHandoff, &["handoff"], None);
    let mut child = child_of(&root, "writer", 1);
    child.state = RunState::Active;
    let mut runs = vec![root, child];
    let events = interrupt_task(&mut active, &mut runs, "interrupted", 5).expect("interrupt");
    assert_eq!(
        kinds(&events),
        [
            "run_interrupted",
            "agent_handoff_completed",
            "run_interrupted",
            "status_changed"
        ]
    );
    assert_eq!(events[1].1["failure"], "interrupted");
    assert_eq!(active.status, TaskStatus::Waiting);

    let mut planning_task = task(TaskStatus::Planning);
    let mut planner = vec![run(RunState::Active, &[], None)];
    let events =
        interrupt_task(&mut planning_task, &mut planner, "interrupted", 5).expect("interrupt");
    assert_eq!(
        kinds(&events),
        ["run_interrupted", "planning_failed", "status_changed"]
    );
    assert_eq!(planning_task.status, TaskStatus::Failed);
    assert!(
        planning_task
            .status_reason
            .as_deref()
            .unwrap_or_default()
            .contains("plan it again"),
        "{:?}",
        planning_task.status_reason
    );
}

#[test]
fn the_planner_output_decides_where_the_task_goes() {
    let mut planner = run(RunState::Active, &[], None);
    let mut planning_task = task(TaskStatus::Planning);
    let asked = vec![
        crate::domain::Question {
            question: "Length?".into(),
            answer: Some("short".into()),
            round: 1,
        },
        crate::domain::Question {
            question: "Rhyme scheme?".into(),
            answer: None,
            round: 1,
        },
    ];
    planning_task.planning.questions = asked.clone();
    planner.planner_output = Some(PlannerOutput::Plan {
        summary: "Write it".into(),
        requirements: vec!["rhymes".into()],
        acceptance_criteria: vec!["17 syllables".into()],
        plan: vec!["draft".into(), "edit".into()],
        assigned_agent: Some("writer".into()),
    });
    let events =
        planning::settle_planning(&planner, &mut planning_task, "no output").expect("plan");
    assert_eq!(kinds(&events), ["planning_completed", "status_changed"]);
    assert_eq!(planning_task.status, TaskStatus::Planned);
    assert_eq!(planning_task.planning.plan, ["draft", "edit"]);
    assert_eq!(
        planning_task
            .planning
            .assigned_agent
            .as_ref()
            .map(Name::as_str),
        Some("writer")
    );
    assert_eq!(
        planning_task.planning.questions, asked,
        "the questions asked are kept, the unanswered one too"
    );

    let mut asking = task(TaskStatus::Planning);
    planner.planner_output = Some(PlannerOutput::Questions {
        questions: vec!["Who for?".into()],
    });
    let events = planning::settle_planning(&planner, &mut asking, "no output").expect("questions");
    assert_eq!(
        kinds(&events),
        ["planning_questions_returned", "status_changed"]
    );
    assert_eq!(asking.status, TaskStatus::AwaitingInput);
    assert_eq!(asking.planning.questions[0].answer, None);

    let mut impossible = task(TaskStatus::Planning);
    planner.planner_output = Some(PlannerOutput::Error {
        error: "no such repo".into(),
    });
    planning::settle_planning(&planner, &mut impossible, "no output").expect("error");
    assert_eq!(impossible.status, TaskStatus::Failed);
    assert_eq!(impossible.status_reason.as_deref(), Some("no such repo"));

    let mut silent = task(TaskStatus::Planning);
    planner.planner_output = None;
    let events =
        planning::settle_planning(&planner, &mut silent, "ended without output").expect("none");
    assert_eq!(kinds(&events), ["planning_failed", "status_changed"]);
    assert_eq!(
        silent.status_reason.as_deref(),
        Some("ended without output")
    );

    let mut canceled = task(TaskStatus::Canceled);
    assert!(
        planning::settle_planning(&planner, &mut canceled, "x")
            .expect("no-op")
            .is_empty()
    );
}

#[test]
fn answers_are_taken_only_while_awaiting_input_and_one_per_question() {
    let mut pending = task(TaskStatus::Pending);
    let err = planning::submit_answers(&mut pending, vec!["a".into()]).expect_err("status");
    assert!(
        err.to_string().contains("awaiting_input; it is pending"),
        "{err}"
    );

    let mut asking = task(TaskStatus::AwaitingInput);
    asking.planning.questions = ["One?", "Two?"]
        .map(|q| crate::domain::Question {
            question: q.into(),
            answer: None,
            round: 1,
        })
        .to_vec();
    let err = planning::submit_answers(
        &mut asking.clone(),
        vec!["a".into(), "b".into(), "c".into()],
    )
    .expect_err("too many");
    assert!(
        err.to_string().contains("3 answers for 2 questions"),
        "{err}"
    );
    let events =
        planning::submit_answers(&mut asking, vec!["yes".into(), " ".into()]).expect("answers");
    assert_eq!(kinds(&events), ["answers_submitted"]);
    assert_eq!(asking.planning.questions[0].answer.as_deref(), Some("yes"));
    assert_eq!(
        asking.planning.questions[1].answer, None,
        "a blank answer leaves it unanswered"
    );
}

#[test]
fn a_second_round_of_questions_keeps_the_first_and_answers_go_to_the_latest() {
    let mut planner = run(RunState::Active, &[], None);
    let mut t = task(TaskStatus::Planning);
    planner.planner_output = Some(PlannerOutput::Questions {
        questions: vec!["Who for?".into(), "How long?".into()],
    });
    planning::settle_planning(&planner, &mut t, "no output").expect("round 1");
    planning::submit_answers(&mut t, vec!["children".into()]).expect("answers 1");
    t.status = TaskStatus::Planning;
    planner.planner_output = Some(PlannerOutput::Questions {
        questions: vec!["Rhymes?".into()],
    });
    let events = planning::settle_planning(&planner, &mut t, "no output").expect("round 2");
    assert_eq!(events[0].1["round"], 2);
    let asked: Vec<_> = t
        .planning
        .questions
        .iter()
        .map(|q| (q.question.as_str(), q.answer.as_deref(), q.round))
        .collect();
    assert_eq!(
        asked,
        [
            ("Who for?", Some("children"), 1),
            ("How long?", None, 1),
            ("Rhymes?", None, 2)
        ],
        "round 1 stays, its unanswered question too"
    );

    let err = planning::submit_answers(&mut t.clone(), vec!["a".into(), "b".into()])
        .expect_err("round 2 has one question");
    assert!(
        err.to_string().contains("2 answers for 1 questions"),
        "{err}"
    );
    let events = planning::submit_answers(&mut t, vec!["yes".into()]).expect("answers 2");
    assert_eq!(events[0].1["round"], 2);
    assert_eq!(events[0].1["answers"][0]["question"], "Rhymes?");
    assert_eq!(t.planning.questions[0].answer.as_deref(), Some("children"));
    assert_eq!(t.planning.questions[2].answer.as_deref(), Some("yes"));
}

#[test]
fn a_planner_output_with_no_question_is_refused() {
    let mut planner = run(RunState::Active, &[], None);
    let err = apply_planner_output(
        &mut planner,
        PlannerOutput::Questions {
            questions: vec![" ".into()],
        },
    )
    .expect_err("no question");
    assert!(err.to_string().contains("no question to ask"), "{err}");
    assert!(planner.planner_output.is_none());
}

#[test]
fn long_comments_and_reports_are_cut_in_history_and_the_run_keeps_the_report() {
    let big = "x".repeat(1 << 20);
    let r = run(RunState::Active, &[], None);
    let (_, data) = comment(&r, &big).expect("a long comment");
    let text = data["text"].as_str().expect("text");
    assert!(text.len() <= 2048, "{} bytes kept", text.len());
    assert!(
        text.ends_with("…[1048576 bytes]"),
        "{}",
        &text[text.len() - 40..]
    );

    let (mut r, mut t) = (run(RunState::Active, &[], None), task(TaskStatus::Active));
    let failed = CompletionReport {
        summary: big.clone(),
        ..report(ReportStatus::Failed)
    };
    let events = apply_completion_report(&mut r, &mut t, failed, None).expect("applies");
    let summary = events[0].1["summary"].as_str().expect("summary");
    assert!(
        summary.len() <= 2048 && summary.ends_with("bytes]"),
        "{}",
        summary.len()
    );
    let reason = t.status_reason.as_deref().expect("the failure's reason");
    assert!(reason.len() <= 2048, "{} bytes of reason", reason.len());
    assert_eq!(events[1].1["reason"], reason);
    assert_eq!(
        r.completion_report.expect("kept").summary,
        big,
        "the run keeps the whole report"
    );
}

#[test]
fn a_completed_task_is_done_and_its_status_change_says_so() {
    let mut active = task(TaskStatus::Active);
    active.stage = Stage::InProgress;
    let (_, data) = change_status(&mut active, TaskStatus::Completed, None).expect("completed");
    assert_eq!(active.stage, Stage::Done);
    assert_eq!(data["stage"], json!({"from": "in_progress", "to": "done"}));

    // Any other status leaves the stage where the agents put it.
    let mut waiting = task(TaskStatus::Active);
    let (_, data) =
        change_status(&mut waiting, TaskStatus::Waiting, Some("blocked".into())).expect("waiting");
    assert_eq!(waiting.stage, Stage::Backlog);
    assert!(data.get("stage").is_none(), "{data}");
}

#[test]
fn a_refusal_fails_only_a_task_nobody_moved_on_meanwhile() {
    for status in [TaskStatus::Pending, TaskStatus::Planned] {
        let mut t = task(status);
        let events = refuse(&mut t, "no agent to run").expect("refused");
        assert_eq!(t.status, TaskStatus::Failed, "{status}");
        assert_eq!(t.status_reason.as_deref(), Some("refused: no agent to run"));
        assert_eq!(events.len(), 1);
        assert!(t.never_started());
    }
    // Started by a person (or a reply) before the refusal was recorded.
    for status in [
        TaskStatus::Active,
        TaskStatus::Planning,
        TaskStatus::Canceled,
    ] {
        let mut t = task(status);
        assert!(
            refuse(&mut t, "late").expect("no-op").is_empty(),
            "{status}"
        );
        assert_eq!(t.status, status);
    }
}
