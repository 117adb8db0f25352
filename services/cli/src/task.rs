//! `chorus task …`: a task's whole life from the command line.

use chorus_proto::orchestrator::v1 as pb;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::admin::workspace_id;
use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::follow::{self, Followed, Outcome};
use crate::output::say;
use crate::output::{self, Colour, Format, Out};
use crate::prompt;

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Runs a task: creates it, has the planner plan it (answering its
    /// questions at the prompt), starts it, and with --follow follows it to
    /// the end; the exit code says how it ended.
    Run {
        /// What to do.
        description: String,
        /// The workspace (name or id).
        #[arg(long, short)]
        workspace: String,
        /// The agent to start (else the one the plan assigns).
        #[arg(long, short)]
        agent: Option<String>,
        /// Follow the task until it ends or needs you.
        #[arg(long, short)]
        follow: bool,
        /// Skip the planner and start the agent on the description as it is.
        #[arg(long, requires = "agent")]
        no_plan: bool,
    },
    /// Creates a task (pending).
    Create {
        description: String,
        /// The workspace (name or id).
        #[arg(long, short)]
        workspace: String,
        /// Its branch (default chorus/<first 8 characters of its id>).
        #[arg(long)]
        branch: Option<String>,
        /// What its branch starts from and lands into (default: the
        /// branch checked out in the workspace).
        #[arg(long)]
        base: Option<String>,
        /// Continue that task's work on its branch (review comments, or
        /// bringing a moved base in).
        #[arg(long = "continue", value_name = "TASK", conflicts_with_all = ["branch", "base"])]
        continues: Option<String>,
    },
    /// Shows a task's change: its commits and files, and the patches (a
    /// page of files at a time; --path for some).
    Diff {
        id: String,
        /// Only these files' patches.
        #[arg(long = "path")]
        paths: Vec<String>,
        /// Only the list of files and commits, no patches.
        #[arg(long)]
        stat: bool,
    },
    /// Lands a task's change into its base (operator).
    Land {
        id: String,
        /// fast-forward, merge or squash (default: the workspace's).
        #[arg(long)]
        mode: Option<crate::task_change::Mode>,
        /// The merge or squash commit's message (default: the task's
        /// description).
        #[arg(long, short)]
        message: Option<String>,
    },
    /// Discards a task's change: its worktree and branch are removed
    /// (operator).
    Discard { id: String },
    /// Has the planner plan a task (it may ask questions first).
    Plan {
        id: String,
        #[arg(long, short)]
        follow: bool,
    },
    /// Answers the planner's questions: at the prompt, or one --answer per
    /// question in order.
    Answer {
        id: String,
        #[arg(long = "answer")]
        answers: Vec<String>,
        #[arg(long, short)]
        follow: bool,
    },
    /// Starts an agent on a planned (or waiting) task.
    Start {
        id: String,
        /// The agent (else the one the plan assigns).
        #[arg(long, short)]
        agent: Option<String>,
        /// Added to the prompt built from the task and its plan.
        #[arg(long)]
        prompt: Option<String>,
        #[arg(long, short)]
        follow: bool,
    },
    /// Follows a task's history until it ends or needs you.
    Watch {
        id: String,
        /// Start after this event (0: the whole history).
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Cancels a task: its runs end and their processes are killed.
    Cancel {
        id: String,
        #[arg(long, default_value = "canceled from the command line")]
        reason: String,
    },
    /// Deletes a task that is over, with its history (admin).
    Delete { id: String },
    /// Lists tasks; with --watch, then prints each change as it happens.
    List {
        /// Only this workspace's tasks (name or id).
        #[arg(long, short)]
        workspace: Option<String>,
        /// Only tasks in this status.
        #[arg(long, short)]
        status: Option<String>,
        #[arg(long)]
        watch: bool,
    },
    /// Shows a task: its plan, its questions, its runs (the handoff tree).
    Show { id: String },
    /// Changes a task's budget: each limit given is set, the task's other
    /// limits are kept (a limit it does not set comes from the defaults of
    /// its agent and workspace). With no limit given, shows the budget.
    /// A task its budget stopped can be started again once the limit it
    /// reached is raised.
    Budget {
        id: String,
        /// US dollars the task may spend.
        #[arg(long)]
        cost_usd: Option<f64>,
        /// Input and output tokens.
        #[arg(long)]
        tokens: Option<u64>,
        #[arg(long)]
        tool_calls: Option<u64>,
        /// Seconds the task may be active, over all its starts.
        #[arg(long)]
        wall_secs: Option<u64>,
        /// Removes every limit the task sets itself (the defaults stay).
        #[arg(long, conflicts_with_all = ["cost_usd", "tokens", "tool_calls", "wall_secs"])]
        clear: bool,
    },
}

pub async fn run(command: TaskCommand, mut client: Client, out: &Out) -> Result<Exit, Fail> {
    let c = &mut client;
    match command {
        TaskCommand::Run {
            description,
            workspace,
            agent,
            follow,
            no_plan,
        } => {
            let workspace = workspace_id(c, &workspace).await?;
            let task = create(c, &workspace, description).await?;
            out.note(&format!("task {} created", task.id));
            let run = Flow {
                client: c,
                out,
                task: &task.id,
            };
            run.whole(agent, follow, no_plan).await
        }
        TaskCommand::Create {
            description,
            workspace,
            branch,
            base,
            continues,
        } => {
            let workspace = workspace_id(c, &workspace).await?;
            let task = c
                .create_task(pb::CreateTaskRequest {
                    branch: branch.unwrap_or_default(),
                    base_ref: base.unwrap_or_default(),
                    continue_task_id: continues.unwrap_or_default(),
                    ..creation(&workspace, description)
                })
                .await
                .map_err(|s| Fail::call("create the task", &s))?
                .into_inner();
            show_task(out, &task);
            Ok(Exit::Ok)
        }
        TaskCommand::Diff { id, paths, stat } => {
            crate::task_change::diff(c, out, &id, paths, stat).await
        }
        TaskCommand::Land { id, mode, message } => {
            crate::task_change::land(c, out, &id, mode, message).await
        }
        TaskCommand::Discard { id } => crate::task_change::discard(c, out, &id).await,
        TaskCommand::Plan { id, follow } => Flow::new(c, out, &id).take(Step::Plan, follow).await,
        TaskCommand::Answer {
            id,
            answers,
            follow,
        } => {
            let step = Step::Answer(answers);
            Flow::new(c, out, &id).take(step, follow).await
        }
        TaskCommand::Start {
            id,
            agent,
            prompt,
            follow,
        } => {
            let step = Step::Start { agent, prompt };
            Flow::new(c, out, &id).take(step, follow).await
        }
        TaskCommand::Watch { id, after } => {
            let followed = follow::follow(c, &id, after, out, &[]).await?;
            let totals = follow::totals(c, &id).await;
            follow::report_end(out, &id, &followed, &totals);
            Ok(followed.outcome.exit())
        }
        TaskCommand::Cancel { id, reason } => cancel(c, out, id, reason).await,
        TaskCommand::Delete { id } => delete(c, out, id).await,
        TaskCommand::List {
            workspace,
            status,
            watch,
        } => crate::task_list::list(c, out, workspace, status, watch).await,
        TaskCommand::Show { id } => show(c, out, &id).await,
        TaskCommand::Budget {
            id,
            cost_usd,
            tokens,
            tool_calls,
            wall_secs,
            clear,
        } => {
            let given = pb::Budget {
                cost_usd,
                tokens,
                tool_calls,
                wall_secs,
            };
            budget(c, out, id, given, clear).await
        }
    }
}

/// `task budget`: the limits given set over the task's own (the others
/// kept), every own limit removed with `clear`, or — nothing given — the
/// budget shown.
async fn budget(
    c: &mut Client,
    out: &Out,
    id: String,
    given: pb::Budget,
    clear: bool,
) -> Result<Exit, Fail> {
    let task = c
        .get_task(pb::GetTaskRequest {
            task_id: id.clone(),
            ..Default::default()
        })
        .await
        .map_err(|s| Fail::call("read the task", &s))?
        .into_inner();
    if given == pb::Budget::default() && !clear {
        show_task(out, &task);
        return Ok(Exit::Ok);
    }
    let own = task.budget.and_then(|b| b.own).unwrap_or_default();
    let budget = if clear {
        pb::Budget::default()
    } else {
        pb::Budget {
            cost_usd: given.cost_usd.or(own.cost_usd),
            tokens: given.tokens.or(own.tokens),
            tool_calls: given.tool_calls.or(own.tool_calls),
            wall_secs: given.wall_secs.or(own.wall_secs),
        }
    };
    let task = c
        .update_task_budget(pb::UpdateTaskBudgetRequest {
            task_id: id,
            budget: Some(budget),
        })
        .await
        .map_err(|s| Fail::call("set the budget", &s))?
        .into_inner();
    show_task(out, &task);
    Ok(Exit::Ok)
}

async fn cancel(client: &mut Client, out: &Out, id: String, reason: String) -> Result<Exit, Fail> {
    let task = client
        .cancel_task(pb::CancelTaskRequest {
            task_id: id,
            reason,
            ..Default::default()
        })
        .await
        .map_err(|s| Fail::call("cancel the task", &s))?
        .into_inner();
    show_task(out, &task);
    Ok(Exit::Ok)
}

async fn delete(client: &mut Client, out: &Out, id: String) -> Result<Exit, Fail> {
    client
        .delete_task(pb::DeleteTaskRequest {
            task_id: id.clone(),
            ..Default::default()
        })
        .await
        .map_err(|s| Fail::call("delete the task", &s))?;
    out.note(&format!("task {id} deleted"));
    Ok(Exit::Ok)
}

/// One step of a task's life, taken from the command line.
enum Step {
    Plan,
    Answer(Vec<String>),
    Start {
        agent: Option<String>,
        prompt: Option<String>,
    },
}

async fn create(
    client: &mut Client,
    workspace: &str,
    description: String,
) -> Result<pb::Task, Fail> {
    Ok(client
        .create_task(creation(workspace, description))
        .await
        .map_err(|s| Fail::call("create the task", &s))?
        .into_inner())
}

/// A task made from the terminal.
fn creation(workspace: &str, description: String) -> pb::CreateTaskRequest {
    pb::CreateTaskRequest {
        workspace_id: workspace.to_owned(),
        description,
        source: Some(pb::TaskSource {
            kind: "terminal".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One task's steps, each as its own call.
struct Flow<'a> {
    client: &'a mut Client,
    out: &'a Out,
    task: &'a str,
}

impl<'a> Flow<'a> {
    fn new(client: &'a mut Client, out: &'a Out, task: &'a str) -> Self {
        Self { client, out, task }
    }

    /// Takes `step`, then follows the task or says how to.
    async fn take(mut self, step: Step, follow: bool) -> Result<Exit, Fail> {
        let after = self.last_sequence().await?;
        let what = match step {
            Step::Plan => {
                self.plan().await?;
                "planning"
            }
            Step::Answer(answers) => {
                self.answer(answers).await?;
                "planning"
            }
            Step::Start { agent, prompt } => {
                self.start(agent, prompt).await?;
                "started"
            }
        };
        self.after_step(after, follow, what).await
    }

    async fn plan(&mut self) -> Result<(), Fail> {
        self.client
            .plan_task(pb::PlanTaskRequest {
                task_id: self.task.to_owned(),
                ..Default::default()
            })
            .await
            .map_err(|s| Fail::call("plan the task", &s))?;
        Ok(())
    }

    async fn get(&mut self) -> Result<pb::Task, Fail> {
        Ok(self
            .client
            .get_task(pb::GetTaskRequest {
                task_id: self.task.to_owned(),
                ..Default::default()
            })
            .await
            .map_err(|s| Fail::call("read the task", &s))?
            .into_inner())
    }

    async fn last_sequence(&mut self) -> Result<u64, Fail> {
        Ok(self.get().await?.last_sequence)
    }

    /// Create, plan, answer, start, follow.
    async fn whole(
        mut self,
        agent: Option<String>,
        follow: bool,
        no_plan: bool,
    ) -> Result<Exit, Fail> {
        let mut after = 1;
        if no_plan {
            for status in ["planning", "planned"] {
                self.client
                    .update_task_status(pb::UpdateTaskStatusRequest {
                        task_id: self.task.to_owned(),
                        status: status.into(),
                        reason: "started without planning from the command line".into(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| Fail::call("skip planning", &s))?;
            }
            after = self.last_sequence().await?;
        } else {
            self.plan().await?;
            loop {
                let acting: &[&str] = if prompt::interactive() {
                    &["planned", "awaiting_input"]
                } else {
                    &["planned"]
                };
                let followed =
                    follow::follow(self.client, self.task, after, self.out, acting).await?;
                after = followed.last;
                match &followed.outcome {
                    Outcome::NeedsYou(n) if n.status == "planned" => break,
                    Outcome::NeedsYou(n)
                        if n.status == "awaiting_input" && prompt::interactive() =>
                    {
                        self.answer(Vec::new()).await?;
                    }
                    _ => {
                        let totals = follow::totals(self.client, self.task).await;
                        follow::report_end(self.out, self.task, &followed, &totals);
                        return Ok(followed.outcome.exit());
                    }
                }
            }
        }
        self.start(agent, None).await?;
        self.after_step(after, follow, "started").await
    }

    /// After a step: follow, or say how to.
    async fn after_step(self, after: u64, follow: bool, what: &str) -> Result<Exit, Fail> {
        if !follow {
            if self.out.format == Format::Json {
                self.out
                    .json_line(&json!({ "taskId": self.task, "step": what }));
            } else {
                say!(
                    "task {} {what}; follow it with: chorus task watch {}",
                    self.task,
                    self.task
                );
            }
            return Ok(Exit::Ok);
        }
        // At a terminal, a call that asks is answered at the prompt.
        let acting: &[&str] = if prompt::interactive() && self.out.format != Format::Json {
            &["approval"]
        } else {
            &[]
        };
        let mut after = after;
        loop {
            let followed: Followed =
                follow::follow(self.client, self.task, after, self.out, acting).await?;
            after = followed.last;
            if let Outcome::NeedsYou(needs) = &followed.outcome
                && needs.status == "approval"
                && crate::approvals::at_prompt(self.client, self.out, self.task, needs, after)
                    .await?
            {
                continue;
            }
            let totals = follow::totals(self.client, self.task).await;
            follow::report_end(self.out, self.task, &followed, &totals);
            return Ok(followed.outcome.exit());
        }
    }

    async fn start(&mut self, agent: Option<String>, prompt: Option<String>) -> Result<(), Fail> {
        let started = self
            .client
            .start_task(pb::StartTaskRequest {
                task_id: self.task.to_owned(),
                agent: agent.unwrap_or_default(),
                prompt: prompt.unwrap_or_default(),
                timeout_secs: 0,
            })
            .await
            .map_err(|s| Fail::call("start the task", &s))?
            .into_inner();
        if let Some(run) = started.run {
            self.out
                .note(&format!("started {} (run {})", run.agent, run.id));
        }
        Ok(())
    }

    /// Answers the planner's open questions: `given` in order, else at the prompt.
    async fn answer(&mut self, given: Vec<String>) -> Result<(), Fail> {
        let task = self.get().await?;
        let mut questions = task.planning.unwrap_or_default().questions;
        // Answers go to the latest round; earlier rounds keep theirs.
        let round = questions.iter().map(|q| q.round).max().unwrap_or(0);
        questions.retain(|q| q.round == round);
        if task.status != "awaiting_input" {
            return Err(Fail::error(format!(
                "task {} is {}, not awaiting_input: there is nothing to answer",
                self.task, task.status
            )));
        }
        if !given.is_empty() && given.len() != questions.len() {
            return Err(Fail::usage(format!(
                "the planner asked {} question(s) and {} --answer were given; give one per question, in order",
                questions.len(),
                given.len()
            )));
        }
        if given.is_empty() && !prompt::interactive() {
            let list: Vec<&str> = questions.iter().map(|q| q.question.as_str()).collect();
            return Err(Fail {
                exit: Exit::NeedsYou,
                message: format!(
                    "the planner asks: {}; answer at a terminal with: chorus task answer {}, or give one --answer '…' per question",
                    list.join(" | "),
                    self.task
                ),
            });
        }
        let mut given = given.into_iter();
        let mut answers = Vec::with_capacity(questions.len());
        for (i, q) in questions.iter().enumerate() {
            let answer = match given.next() {
                Some(answer) => answer,
                None => {
                    let ask = format!(
                        "{} {}. {}\n> ",
                        self.out.paint(Colour::Yellow, "?"),
                        i + 1,
                        q.question
                    );
                    prompt::line(&ask)?.ok_or_else(|| Fail::usage("no answer: the input ended"))?
                }
            };
            answers.push(answer);
        }
        self.client
            .submit_answers(pb::SubmitAnswersRequest {
                task_id: self.task.to_owned(),
                answers,
                ..Default::default()
            })
            .await
            .map_err(|s| Fail::call("submit the answers", &s))?;
        Ok(())
    }
}

fn show_task(out: &Out, task: &pb::Task) {
    let mut value = output::task(task);
    // What it spent, and its limits, on one line each.
    let u = task.usage.unwrap_or_default();
    let mut spent = format!(
        "${:.4} · {} in / {} out tokens · {} model calls · {} tool calls",
        u.cost_usd,
        u.input_tokens,
        u.output_tokens,
        u.model_calls,
        task.budget.map_or(0, |b| b.tool_calls)
    );
    if u.unpriced_calls > 0 {
        spent.push_str(&format!(
            " ({} unpriced: the cost is a lower bound)",
            u.unpriced_calls
        ));
    }
    value["spent"] = json!(spent);
    value["branchText"] = json!(crate::task_change::branch_line(task));
    let limits = task.budget.and_then(|b| b.limits).unwrap_or_default();
    let mut named = Vec::new();
    if let Some(cost) = limits.cost_usd {
        named.push(format!("${cost:.4}"));
    }
    if let Some(tokens) = limits.tokens {
        named.push(format!("{tokens} tokens"));
    }
    if let Some(calls) = limits.tool_calls {
        named.push(format!("{calls} tool calls"));
    }
    if let Some(secs) = limits.wall_secs {
        named.push(format!("{secs} s active"));
    }
    value["limitsText"] = json!(if named.is_empty() {
        "none".to_owned()
    } else {
        named.join(" · ")
    });
    out.value(
        &value,
        &[
            ("ID", "id"),
            ("STATUS", "status"),
            ("REASON", "statusReason"),
            ("DESCRIPTION", "description"),
            ("AGENT", "currentAgent"),
            ("BRANCH", "branchText"),
            ("SPENT", "spent"),
            ("LIMITS", "limitsText"),
            ("UPDATED", "updated"),
        ],
    );
}

async fn show(client: &mut Client, out: &Out, id: &str) -> Result<Exit, Fail> {
    let task = client
        .get_task(pb::GetTaskRequest {
            task_id: id.to_owned(),
            ..Default::default()
        })
        .await
        .map_err(|s| Fail::call("read the task", &s))?
        .into_inner();
    let runs = client
        .list_runs(pb::ListRunsRequest {
            task_id: id.to_owned(),
        })
        .await
        .map_err(|s| Fail::call("list the task's runs", &s))?
        .into_inner()
        .runs;
    if out.format == Format::Json {
        let mut value = output::task(&task);
        value["runs"] = Value::Array(runs.iter().map(output::run).collect());
        out.value(&value, &[]);
        return Ok(Exit::Ok);
    }
    show_task(out, &task);
    let planning = task.planning.unwrap_or_default();
    if !planning.summary.is_empty() {
        say!("\nPLAN  {}", planning.summary);
        for (i, step) in planning.plan.iter().enumerate() {
            say!("  {}. {step}", i + 1);
        }
        if !planning.assigned_agent.is_empty() {
            say!("  agent: {}", planning.assigned_agent);
        }
    }
    if !task.waiting_approvals.is_empty() {
        say!("\nWAITING FOR YOU");
        for a in &task.waiting_approvals {
            say!("  {}", crate::approvals::waiting_line(a));
        }
    }
    if !task.task_rules.is_empty() {
        say!("\nAPPROVED FOR THIS TASK");
        for r in &task.task_rules {
            say!("  {}", crate::approvals::rule_text(r));
        }
    }
    if !planning.questions.is_empty() {
        say!("\nQUESTIONS");
        for (i, q) in planning.questions.iter().enumerate() {
            let answer = q.answer.as_deref().unwrap_or("(not answered)");
            say!("  {}. {}\n     → {answer}", i + 1, q.question);
        }
    }
    say!("\nRUNS");
    let rows: Vec<Value> = tree(&runs)
        .into_iter()
        .map(|(depth, run)| {
            let mut row = output::run(run);
            row["agent"] = json!(format!("{}{}", "  ".repeat(depth), run.agent));
            row
        })
        .collect();
    out.table(
        &rows,
        &[
            ("AGENT", "agent"),
            ("STATE", "state"),
            ("DURATION", "duration"),
            ("IN", "inputTokens"),
            ("OUT", "outputTokens"),
            ("COST $", "costUsd"),
            ("END", "endReason"),
            ("RUN", "id"),
        ],
    );
    Ok(Exit::Ok)
}

/// Runs in handoff-tree order (each child under its parent) with their depth.
fn tree(runs: &[pb::Run]) -> Vec<(usize, &pb::Run)> {
    fn visit<'a>(
        runs: &'a [pb::Run],
        parent: &str,
        depth: usize,
        out: &mut Vec<(usize, &'a pb::Run)>,
    ) {
        for run in runs.iter().filter(|r| r.parent_run_id == parent) {
            out.push((depth, run));
            if depth < 32 {
                visit(runs, &run.id, depth + 1, out);
            }
        }
    }
    let mut out = Vec::with_capacity(runs.len());
    visit(runs, "", 0, &mut out);
    // Runs whose parent is not listed (should not happen) still show.
    for run in runs {
        if !out.iter().any(|(_, r)| r.id == run.id) {
            out.push((0, run));
        }
    }
    out
}
