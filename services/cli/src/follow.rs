//! Following a task live: a line per event that matters to a person (tool
//! calls, denials standing out, handoffs indented under their parent run,
//! reports, what it cost), a spinner per running run at a terminal, and, at
//! the end, how it ended and what to do when it needs you.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};

use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::output::say;
use crate::output::{self, Colour, Format, Out};

/// How a followed task stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed,
    Failed(String),
    Canceled(String),
    /// It waits for a person: the status, why, and what to do.
    NeedsYou(pb::NeedsYou),
}

impl Outcome {
    pub fn exit(&self) -> Exit {
        match self {
            Self::Completed => Exit::Ok,
            Self::Failed(_) => Exit::TaskFailed,
            Self::Canceled(_) => Exit::TaskCanceled,
            Self::NeedsYou(_) => Exit::NeedsYou,
        }
    }
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// What following a task saw.
#[derive(Debug)]
pub struct Followed {
    pub outcome: Outcome,
    /// The last sequence seen.
    pub last: u64,
}

/// Follows `task` after `after` until it ends or waits for a person.
/// `acting`: statuses the caller acts on by itself (no "needs you" line).
pub async fn follow(
    client: &mut Client,
    task: &str,
    after: u64,
    out: &Out,
    acting: &[&str],
) -> Result<Followed, Fail> {
    let mut view = View::new(out, task, acting);
    let mut cursor = after;
    let mut backoff = crate::reconnect::Backoff::default();
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    loop {
        let request = pb::WatchTaskRequest {
            task_id: task.to_owned(),
            after_sequence: cursor,
            follow: false,
            until_needed: true,
        };
        let mut stream = match client.watch_task(request).await {
            Ok(stream) => {
                backoff.reset();
                stream.into_inner()
            }
            Err(status) => {
                view.clear_spinner();
                let from = format!("event {cursor}");
                backoff
                    .after(status, out, "watching the task", &from)
                    .await
                    .map_err(|s| Fail::call("watch the task", &s))?;
                continue;
            }
        };
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                _ = tick.tick(), if view.spinning() => {
                    view.spin();
                    continue;
                }
            };
            match message {
                Ok(Some(event)) => {
                    // A replay after a break may start before what was shown.
                    if event.sequence <= cursor {
                        continue;
                    }
                    cursor = event.sequence;
                    backoff.reset();
                    view.event(&event);
                    // A call that asks, when the caller answers it itself:
                    // the follow stops here, to go on once it is answered.
                    if let Some(needs) = event
                        .needs_you
                        .as_ref()
                        .filter(|n| n.status == "approval" && acting.contains(&"approval"))
                    {
                        view.clear_spinner();
                        return Ok(Followed {
                            outcome: Outcome::NeedsYou(needs.clone()),
                            last: cursor,
                        });
                    }
                }
                Ok(None) => {
                    view.clear_spinner();
                    return Ok(Followed {
                        outcome: view.outcome(),
                        last: cursor,
                    });
                }
                Err(status) => {
                    view.clear_spinner();
                    let from = format!("event {cursor}");
                    backoff
                        .after(status, out, "the task's stream", &from)
                        .await
                        .map_err(|s| Fail::call("follow the task", &s))?;
                    break;
                }
            }
        }
    }
}

/// A run seen in the history.
#[derive(Debug, Clone)]
struct RunView {
    agent: String,
    parent: Option<String>,
    started: Instant,
    running: bool,
}

/// What has been shown, and what it says of the task.
struct View<'a> {
    out: &'a Out,
    task: &'a str,
    acting: &'a [&'a str],
    runs: HashMap<String, RunView>,
    order: Vec<String>,
    status: String,
    reason: String,
    needs_you: Option<pb::NeedsYou>,
    frame: usize,
    spinner_shown: bool,
}

impl<'a> View<'a> {
    fn new(out: &'a Out, task: &'a str, acting: &'a [&'a str]) -> Self {
        Self {
            out,
            task,
            acting,
            runs: HashMap::new(),
            order: Vec::new(),
            status: String::new(),
            reason: String::new(),
            needs_you: None,
            frame: 0,
            spinner_shown: false,
        }
    }

    fn outcome(&self) -> Outcome {
        match self.status.as_str() {
            "completed" => Outcome::Completed,
            "failed" => Outcome::Failed(self.reason.clone()),
            "canceled" => Outcome::Canceled(self.reason.clone()),
            status => Outcome::NeedsYou(self.needs_you.clone().unwrap_or(pb::NeedsYou {
                status: status.to_owned(),
                reason: self.reason.clone(),
                action: String::new(),
                approval_id: String::new(),
            })),
        }
    }

    fn spinning(&self) -> bool {
        self.out.terminal
            && self.out.format == Format::Table
            && self.runs.values().any(|r| r.running)
    }

    fn spin(&mut self) {
        self.frame = (self.frame + 1) % SPINNER.len();
        let running: Vec<String> = self
            .order
            .iter()
            .filter_map(|id| self.runs.get(id))
            .filter(|r| r.running)
            .map(|r| format!("{} {}", r.agent, output::duration(elapsed_ms(r.started))))
            .collect();
        let mut stdout = std::io::stdout().lock();
        let _ = write!(
            stdout,
            "\r\x1b[2K{} {}",
            self.out
                .paint(Colour::Cyan, &SPINNER[self.frame].to_string()),
            self.out.paint(Colour::Dim, &running.join(" · "))
        );
        let _ = stdout.flush();
        self.spinner_shown = true;
    }

    fn clear_spinner(&mut self) {
        if self.spinner_shown {
            let mut stdout = std::io::stdout().lock();
            let _ = write!(stdout, "\r\x1b[2K");
            let _ = stdout.flush();
            self.spinner_shown = false;
        }
    }

    fn print(&mut self, run: Option<&str>, line: String) {
        self.clear_spinner();
        let depth = run.map_or(0, |r| self.depth(r));
        say!("{}{line}", "  ".repeat(depth));
    }

    /// How deep a run is in the handoff tree (a root run is 1).
    fn depth(&self, run: &str) -> usize {
        let mut depth = 1;
        let mut at = self.runs.get(run).and_then(|r| r.parent.clone());
        while let Some(parent) = at {
            depth += 1;
            at = self.runs.get(&parent).and_then(|r| r.parent.clone());
            if depth > 32 {
                break;
            }
        }
        depth
    }

    fn agent_of(&self, data: &Value) -> String {
        str_of(data, "agent")
            .or_else(|| {
                str_of(data, "run_id").and_then(|r| self.runs.get(&r).map(|r| r.agent.clone()))
            })
            .unwrap_or_default()
    }

    fn event(&mut self, event: &pb::TaskEvent) {
        let data = Value::Object(chorus_proto::json::from_struct(
            event.data.clone().unwrap_or_default(),
        ));
        self.track(event, &data);
        if self.out.format == Format::Json {
            self.out.json_line(&output::event(event));
            return;
        }
        let run = str_of(&data, "run_id");
        if let Some(line) = self.line(event, &data) {
            self.print(run.as_deref(), line);
        }
        if let Some(needs) = &event.needs_you
            && !self.acting.contains(&needs.status.as_str())
        {
            let step = if needs.status == "approval" {
                format!(
                    "approve: chorus approve {} {} [--for-task], or deny: chorus approve {} {} --deny REASON",
                    self.task, needs.approval_id, self.task, needs.approval_id
                )
            } else {
                next_step(&needs.status, self.task)
            };
            let line = format!("⚑ needs you: {step}");
            self.print(None, self.out.paint(Colour::Yellow, &line));
        }
    }

    /// Keeps the status, the runs and what they cost.
    fn track(&mut self, event: &pb::TaskEvent, data: &Value) {
        let run = str_of(data, "run_id");
        match event.kind.as_str() {
            "status_changed" => {
                self.status = str_of(data, "to").unwrap_or_default();
                self.reason = str_of(data, "reason").unwrap_or_default();
                self.needs_you.clone_from(&event.needs_you);
            }
            "agent_started" | "agent_handoff_started" | "run_opened" => {
                if let Some(run) = run {
                    let entry = self.runs.entry(run.clone()).or_insert_with(|| RunView {
                        agent: String::new(),
                        parent: None,
                        started: Instant::now(),
                        running: true,
                    });
                    if let Some(agent) = str_of(data, "agent") {
                        entry.agent = agent;
                    }
                    if let Some(parent) = str_of(data, "parent_run_id") {
                        entry.parent = Some(parent);
                    }
                    if !self.order.contains(&run) {
                        self.order.push(run);
                    }
                }
            }
            "agent_completed" | "run_failed" | "run_canceled" | "run_interrupted" => {
                if let Some(r) = run.and_then(|r| self.runs.get_mut(&r)) {
                    r.running = false;
                }
            }
            _ => {}
        }
    }

    /// The line an event shows as, if any.
    fn line(&self, event: &pb::TaskEvent, data: &Value) -> Option<String> {
        let kind = event.kind.as_str();
        if kind.starts_with("planning") || kind == "answers_submitted" {
            return self.planning_line(kind, data);
        }
        if kind.starts_with("tool_") || kind == "agent_progress" {
            return self.tool_line(kind, data);
        }
        if kind.starts_with("approval_") {
            return Some(self.approval_line(kind, data));
        }
        let agent = self.agent_of(data);
        let paint = |c, t: &str| self.out.paint(c, t);
        Some(match kind {
            "task_created" => format!(
                "+ task {}: {}",
                event.task_id,
                cut(&text(data, "description"), 120)
            ),
            "status_changed" => {
                let reason = text(data, "reason");
                let line = format!("● {} → {}", text(data, "from"), text(data, "to"));
                let line = if reason.is_empty() {
                    line
                } else {
                    format!("{line}: {}", cut(&reason, 200))
                };
                paint(Colour::Bold, &line)
            }
            "comment_added" => format!("💬 {}", cut(&text(data, "text"), 200)),
            "budget_warning" => paint(
                Colour::Yellow,
                &format!(
                    "⚠ budget: {}% of its {} limit ({} of {})",
                    data["percent"],
                    text(data, "limit"),
                    text(data, "spent"),
                    text(data, "limit_value")
                ),
            ),
            "budget_exceeded" => paint(
                Colour::Red,
                &format!(
                    "⛔ budget: its {} limit of {} was reached ({} spent): its runs stop",
                    text(data, "limit"),
                    text(data, "limit_value"),
                    text(data, "spent")
                ),
            ),
            "budget_changed" => "$ budget set".to_owned(),
            "branch_opened" => {
                let note = text(data, "note");
                format!(
                    "» worktree on {} from {}{}",
                    text(data, "branch"),
                    text(data, "base"),
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!(": {note}")
                    }
                )
            }
            "branch_kept" => format!(
                "« worktree removed, branch {} kept: {}",
                text(data, "branch"),
                text(data, "why")
            ),
            "task_landed" => paint(
                Colour::Green,
                &format!(
                    "✔ landed into {} as {} by {} ({})",
                    text(data, "base"),
                    text(data, "commit").get(..12).unwrap_or_default(),
                    text(data, "by"),
                    text(data, "mode")
                ),
            ),
            "task_discarded" => format!("✗ change discarded by {}", text(data, "by")),
            "completion_report_submitted" => {
                let report = if data.get("report").is_some() {
                    &data["report"]
                } else {
                    data
                };
                format!(
                    "■ report ({}): {}",
                    text(report, "status"),
                    cut(&text(report, "summary"), 300)
                )
            }
            "agent_completed" => format!(
                "{} {agent} finished: {} · {}",
                paint(Colour::Green, "✔"),
                text(data, "reason"),
                usage_words(&data["usage"])
            ),
            "run_failed" | "run_canceled" | "run_interrupted" => paint(
                Colour::Red,
                &format!(
                    "✗ {agent}: {} ({})",
                    event.kind.trim_start_matches("run_"),
                    cut(&text(data, "reason"), 200)
                ),
            ),
            "run_resumed" => paint(
                Colour::Yellow,
                &format!("↻ {agent} resumed on {}", text(data, "replica")),
            ),
            "run_queued" => paint(
                Colour::Yellow,
                &format!(
                    "⏸ {agent} waits for a place: {}",
                    cut(&text(data, "reason"), 200)
                ),
            ),
            "agent_started" => paint(Colour::Cyan, &format!("▶ {agent} started")),
            "agent_handoff_started" => paint(
                Colour::Cyan,
                &format!(
                    "↳ {} hands off to {agent}: {}",
                    text(data, "from_agent"),
                    cut(&text(data, "prompt"), 120)
                ),
            ),
            "agent_handoff_completed" => {
                format!("↲ {agent} handed back: {}", text(data, "outcome"))
            }
            "run_opened" | "planner_output_submitted" | "stage_changed" => return None,
            other => paint(Colour::Dim, other),
        })
    }

    /// A line of the planner's work.
    fn planning_line(&self, kind: &str, data: &Value) -> Option<String> {
        let paint = |c, t: &str| self.out.paint(c, t);
        Some(match kind {
            "planning_started" => paint(Colour::Dim, "… the planner is planning"),
            "planning_completed" => format!(
                "plan: {} ({} steps, agent: {})",
                cut(&text(data, "summary"), 200),
                text(data, "steps"),
                text(data, "assigned_agent")
            ),
            "planning_questions_returned" => {
                let questions = data["questions"].as_array().cloned().unwrap_or_default();
                let list: String = questions
                    .iter()
                    .enumerate()
                    .map(|(i, q)| {
                        let q = q
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| text(q, "question"));
                        format!("\n    {}. {q}", i + 1)
                    })
                    .collect();
                paint(Colour::Yellow, &format!("? the planner asks:{list}"))
            }
            "planning_failed" => paint(
                Colour::Red,
                &format!("✗ planning failed: {}", text(data, "reason")),
            ),
            "answers_submitted" => "answers submitted".to_owned(),
            _ => return None,
        })
    }

    /// A line of a tool call, a denial or an agent's progress.
    /// A call that asks for approval, or its answer.
    fn approval_line(&self, kind: &str, data: &Value) -> String {
        let agent = self.agent_of(data);
        let paint = |c, t: &str| self.out.paint(c, t);
        let tool = text(data, "tool");
        let input = summary(&data["input"]);
        if kind == "approval_requested" {
            return paint(
                Colour::Yellow,
                &format!(
                    "? {agent} asks to run {tool} {input} (rule '{}', approval {})",
                    text(data, "rule"),
                    text(data, "approval_id")
                ),
            );
        }
        let outcome = text(data, "outcome");
        let reason = text(data, "reason");
        let line = format!(
            "{outcome} by {}: {tool} {input}{}",
            text(data, "by"),
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {}", cut(&reason, 160))
            }
        );
        if outcome.starts_with("approved") {
            paint(Colour::Green, &format!("✓ {line}"))
        } else {
            paint(Colour::Red, &format!("⛔ {line}"))
        }
    }

    fn tool_line(&self, kind: &str, data: &Value) -> Option<String> {
        let agent = self.agent_of(data);
        let paint = |c, t: &str| self.out.paint(c, t);
        Some(match kind {
            "tool_executed" => {
                let tool = text(data, "tool");
                let input = summary(&data["input"]);
                let took = data["duration_ms"]
                    .as_i64()
                    .map(output::duration)
                    .unwrap_or_default();
                if text(data, "status") == "ok" {
                    format!(
                        "{} {tool} {input} {}",
                        paint(Colour::Green, "✓"),
                        paint(Colour::Dim, &took)
                    )
                } else {
                    let why = cut(&text(data, "output_excerpt"), 160);
                    format!(
                        "{} {tool} {input}: {why}",
                        paint(Colour::Red, &format!("✗ {}", text(data, "status")))
                    )
                }
            }
            "tool_denied" => paint(
                Colour::Red,
                &format!(
                    "⛔ DENIED {} for {agent}: {}",
                    text(data, "tool"),
                    cut(&text(data, "reason"), 200)
                ),
            ),
            "agent_progress" => match text(data, "kind").as_str() {
                "text" => paint(Colour::Dim, &format!("│ {}", cut(&text(data, "text"), 160))),
                "model_retry" => paint(
                    Colour::Yellow,
                    &format!(
                        "↻ model call retried (#{}) in {}: {}",
                        data["retry"].as_u64().unwrap_or(0),
                        output::duration(data["wait_ms"].as_i64().unwrap_or(0)),
                        cut(&text(data, "reason"), 160)
                    ),
                ),
                "tool_use" => return None,
                other => paint(
                    Colour::Dim,
                    &format!("│ {other}: {}", cut(&text(data, "text"), 160)),
                ),
            },
            _ => return None,
        })
    }
}

/// What a person needs of a followed task's end, printed after it, with
/// `totals` (see [`totals`]).
pub fn report_end(out: &Out, task: &str, followed: &Followed, totals: &str) {
    let outcome = &followed.outcome;
    let summary = match outcome {
        Outcome::Completed => json!({ "end": "completed" }),
        Outcome::Failed(reason) => json!({ "end": "failed", "reason": reason }),
        Outcome::Canceled(reason) => json!({ "end": "canceled", "reason": reason }),
        Outcome::NeedsYou(n) => json!({
            "end": "needs_you", "status": n.status, "reason": n.reason,
            "action": next_step(&n.status, task),
        }),
    };
    if out.format == Format::Json {
        let mut line = summary;
        line["taskId"] = json!(task);
        line["exitCode"] = json!(outcome.exit() as u8);
        out.json_line(&line);
        return;
    }
    let text = match outcome {
        Outcome::Completed => out.paint(Colour::Green, &format!("task {task} completed")),
        Outcome::Failed(reason) => out.paint(Colour::Red, &format!("task {task} failed: {reason}")),
        Outcome::Canceled(reason) => out.paint(
            Colour::Yellow,
            &format!("task {task} was canceled: {reason}"),
        ),
        Outcome::NeedsYou(n) => {
            let why = if n.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", n.reason)
            };
            out.paint(
                Colour::Yellow,
                &format!(
                    "task {task} needs you: it is {}{why}; {}",
                    n.status, n.action
                ),
            )
        }
    };
    say!("{text} · {totals}");
}

/// What a person does next for a task that waits in `status`.
pub fn next_step(status: &str, task: &str) -> String {
    match status {
        "awaiting_input" => format!("answer the planner's questions: chorus task answer {task}"),
        "planned" => format!("start it: chorus task start {task} [--agent NAME] --follow"),
        "waiting" => format!(
            "start it again: chorus task start {task} --follow, or cancel it: chorus task cancel {task}"
        ),
        other => format!("it is {other}: see chorus task show {task}"),
    }
}

/// The task's runs and what they cost, in words (from ListRuns).
pub async fn totals(client: &mut Client, task: &str) -> String {
    let Ok(runs) = client
        .list_runs(pb::ListRunsRequest {
            task_id: task.to_owned(),
        })
        .await
    else {
        return String::new();
    };
    let runs = runs.into_inner().runs;
    let (mut input, mut output, mut cost) = (0u64, 0u64, 0f64);
    for usage in runs.iter().filter_map(|r| r.usage) {
        input += usage.input_tokens;
        output += usage.output_tokens;
        cost += usage.cost_usd;
    }
    let mut line = format!("{} run(s) · {input} in / {output} out tokens", runs.len());
    if cost > 0.0 {
        line.push_str(&format!(" · ${cost:.4}"));
    }
    line
}

/// A run's usage as `12 in / 3 out tokens · $0.0100`.
fn usage_words(usage: &Value) -> String {
    let cost = usage["cost_usd"]
        .as_f64()
        .filter(|c| *c > 0.0)
        .map(|c| format!(" · ${c:.4}"))
        .unwrap_or_default();
    format!(
        "{} in / {} out tokens{cost}",
        usage["input_tokens"].as_u64().unwrap_or(0),
        usage["output_tokens"].as_u64().unwrap_or(0)
    )
}

fn elapsed_ms(since: Instant) -> i64 {
    i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX)
}

fn str_of(data: &Value, key: &str) -> Option<String> {
    data.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn text(data: &Value, key: &str) -> String {
    match data.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A tool's input in a few words: its path, command or pattern, else compact JSON.
fn summary(input: &Value) -> String {
    for key in ["command", "path", "pattern", "agent", "text"] {
        if let Some(s) = input.get(key).and_then(Value::as_str) {
            return cut(s, 100);
        }
    }
    match input {
        Value::Object(map) if map.is_empty() => String::new(),
        Value::Null => String::new(),
        other => cut(&other.to_string(), 100),
    }
}

/// The first line of `s`, at most `max` characters, `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    let more = line.len() < s.trim_end().len();
    let mut cut: String = line.chars().take(max).collect();
    if more || line.chars().count() > max {
        cut.push('…');
    }
    cut
}
