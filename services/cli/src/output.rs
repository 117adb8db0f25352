//! Printing: aligned tables for people, JSON for scripts. Answers go to
//! standard output; notes and errors to standard error, so a script's JSON
//! stays clean.

use std::io::{IsTerminal as _, Write as _};

use chorus_proto::orchestrator::v1 as pb;
use clap::ValueEnum;
use serde_json::{Value, json};

use crate::fail::Fail;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Prints a line on standard output. A reader that went away (`chorus … |
/// head`) ends the program quietly, as it would a Unix tool.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub fn write_line(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    gone(written);
}

/// Ends the program when standard output's reader is gone.
pub fn gone(result: std::io::Result<()>) {
    if let Err(e) = result
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Where a command prints.
#[derive(Debug)]
pub struct Out {
    pub format: Format,
    /// Standard output is a terminal (colour, a spinner).
    pub terminal: bool,
}

impl Out {
    pub fn new(format: Format) -> Self {
        Self {
            format,
            terminal: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// A list: one row per item, the columns named (header, JSON key; a
    /// dotted key reads inside).
    pub fn table(&self, rows: &[Value], columns: &[(&str, &str)]) {
        if self.format == Format::Json {
            println_json(&Value::Array(rows.to_vec()));
            return;
        }
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|row| {
                columns
                    .iter()
                    .map(|(_, key)| cell(lookup(row, key)))
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = columns
            .iter()
            .enumerate()
            .map(|(i, (header, _))| {
                cells
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([header.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |values: Vec<String>| {
            let last = values.len().saturating_sub(1);
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    if i == last {
                        v
                    } else {
                        format!("{v:<w$}", w = widths[i])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "{}",
            line(columns.iter().map(|(h, _)| (*h).to_owned()).collect())
        );
        for row in cells {
            let _ = writeln!(stdout, "{}", line(row));
        }
        if rows.is_empty() {
            let _ = writeln!(stdout, "(none)");
        }
    }

    /// One item: `FIELD  value` lines, or its JSON.
    pub fn value(&self, value: &Value, fields: &[(&str, &str)]) {
        if self.format == Format::Json {
            println_json(value);
            return;
        }
        let width = fields.iter().map(|(h, _)| h.len()).max().unwrap_or(0);
        for (header, key) in fields {
            say!("{header:<width$}  {}", cell(lookup(value, key)));
        }
    }

    /// A note for the person, on standard error.
    pub fn note(&self, text: &str) {
        eprintln!("{text}");
    }

    /// One JSON document per line (following).
    pub fn json_line(&self, value: &Value) {
        say!("{value}");
    }

    /// Text in a colour when printing to a terminal.
    pub fn paint(&self, colour: Colour, text: &str) -> String {
        if self.terminal {
            format!("\x1b[{}m{text}\x1b[0m", colour as u8)
        } else {
            text.to_owned()
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Colour {
    Red = 31,
    Green = 32,
    Yellow = 33,
    Cyan = 36,
    Dim = 2,
    Bold = 1,
}

/// Prints a command's failure.
pub fn error(format: Format, fail: &Fail) {
    match format {
        Format::Json => eprintln!(
            "{}",
            json!({ "error": fail.message, "exitCode": fail.exit as u8 })
        ),
        Format::Table => eprintln!("chorus: {}", fail.message),
    }
}

fn println_json(value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    say!("{text}");
}

fn lookup<'a>(value: &'a Value, key: &str) -> &'a Value {
    key.split('.')
        .fold(value, |v, k| v.get(k).unwrap_or(&Value::Null))
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.replace('\n', " "),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// A time in milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC);
/// empty for 0.
pub fn time(ms: i64) -> String {
    if ms <= 0 {
        return String::new();
    }
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// A duration in milliseconds as people read it: `850ms`, `12.3s`, `4m05s`.
pub fn duration(ms: i64) -> String {
    match ms {
        ..=999 => format!("{}ms", ms.max(0)),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
    }
}

pub fn task(t: &pb::Task) -> Value {
    let planning = t.planning.clone().unwrap_or_default();
    json!({
        "id": t.id,
        "workspaceId": t.workspace_id,
        "description": t.description,
        "status": t.status,
        "statusReason": t.status_reason,
        "stage": t.stage,
        "currentAgent": t.current_agent,
        "created": time(t.created_ms),
        "updated": time(t.updated_ms),
        "lastSequence": t.last_sequence,
        "usage": usage(t.usage.as_ref()),
        "budget": {
            "own": budget(t.budget.as_ref().and_then(|b| b.own.as_ref())),
            "limits": budget(t.budget.as_ref().and_then(|b| b.limits.as_ref())),
            "toolCalls": t.budget.as_ref().map_or(0, |b| b.tool_calls),
        },
        "branch": t.branch.as_ref().map(|b| json!({
            "name": b.name,
            "base": b.base,
            "state": b.state,
            "startCommit": b.start_commit,
            "worktree": b.worktree,
            "landedCommit": b.landed_commit,
            "landedBy": b.landed_by,
            "discardedBy": b.discarded_by,
            "continuesTaskId": b.continues_task_id,
        })),
        "branchNote": t.branch_note,
        "waitingApprovals": t.waiting_approvals.iter().map(crate::approvals::approval).collect::<Vec<_>>(),
        "taskRules": t.task_rules.iter().map(crate::approvals::rule_text).collect::<Vec<_>>(),
        "planning": {
            "summary": planning.summary,
            "requirements": planning.requirements,
            "acceptanceCriteria": planning.acceptance_criteria,
            "plan": planning.plan,
            "assignedAgent": planning.assigned_agent,
            "questions": planning.questions.iter().map(|q| json!({
                "question": q.question,
                "answer": q.answer,
                "round": q.round,
            })).collect::<Vec<_>>(),
        },
    })
}

pub fn workspace(w: &pb::Workspace) -> Value {
    let limits = w.limits.unwrap_or_default();
    let task = limits.task_budget.unwrap_or_default();
    let mut named = Vec::new();
    if let Some(d) = limits.daily_cost_usd {
        named.push(format!("${d:.2} a day"));
    }
    if let Some(m) = limits.monthly_cost_usd {
        named.push(format!("${m:.2} a month"));
    }
    if let Some(c) = task.cost_usd {
        named.push(format!("${c:.4} a task"));
    }
    if let Some(t) = task.tokens {
        named.push(format!("{t} tokens a task"));
    }
    if let Some(t) = task.tool_calls {
        named.push(format!("{t} tool calls a task"));
    }
    json!({
        "id": w.id,
        "name": w.name,
        "root": w.root,
        "systemProvider": w.system_provider,
        "warnings": w.warnings,
        "created": time(w.created_ms),
        "limits": {
            "dailyCostUsd": limits.daily_cost_usd,
            "monthlyCostUsd": limits.monthly_cost_usd,
            "taskBudget": budget(Some(&task)),
        },
        "limitsText": if named.is_empty() { "none".to_owned() } else { named.join(" · ") },
        "repository": w.repository,
        "changes": w.changes.map(|c| json!({
            "taskWorktrees": c.task_worktrees.unwrap_or(true),
            "landMode": land_mode(c.land_mode),
            "keepUnlandedDays": c.keep_unlanded_days,
        })),
        "changesText": changes_text(w),
    })
}

/// A land mode's name, as the CLI takes it.
pub fn land_mode(mode: i32) -> &'static str {
    match pb::LandMode::try_from(mode) {
        Ok(pb::LandMode::FastForward) => "fast-forward",
        Ok(pb::LandMode::Squash) => "squash",
        _ => "merge",
    }
}

/// How a workspace's tasks make their changes, in one line.
fn changes_text(w: &pb::Workspace) -> String {
    let c = w.changes.unwrap_or_default();
    if !w.repository {
        return "in the workspace's directory (not a git repository)".to_owned();
    }
    if !c.task_worktrees.unwrap_or(true) {
        return "in the workspace's directory (task worktrees off)".to_owned();
    }
    let kept = match c.keep_unlanded_days {
        0 => "kept until landed or discarded".to_owned(),
        n => format!("unlanded worktrees removed {n} day(s) after their task ended"),
    };
    format!(
        "each task on its own branch, landed by {}; {kept}",
        land_mode(c.land_mode)
    )
}

pub fn provider(p: &pb::Provider) -> Value {
    json!({
        "workspaceId": p.workspace_id,
        "name": p.name,
        "kind": pb::ProviderKind::try_from(p.kind).map(|k| k.as_str_name().trim_start_matches("PROVIDER_KIND_").to_lowercase()).unwrap_or_default(),
        "baseUrl": p.base_url,
        "model": p.model,
        "apiKey": if p.api_key_set { p.api_key_source.clone() } else { "none".to_owned() },
        // How a CLI's agents reach their tools; an API provider's loop runs in Chorus.
        "toolTransport": if p.kind == pb::ProviderKind::OpenaiCompatible as i32 || p.kind == pb::ProviderKind::A2a as i32 {
            String::new()
        } else {
            pb::ToolTransport::try_from(p.tool_transport).map(|k| k.as_str_name().trim_start_matches("TOOL_TRANSPORT_").to_lowercase()).unwrap_or_default()
        },
    })
}

pub fn agent(a: &pb::Agent) -> Value {
    json!({
        "workspaceId": a.workspace_id,
        "name": a.name,
        "kind": if a.kind == pb::AgentKind::Internal as i32 { "internal" } else { "user" },
        "instructions": a.instructions,
        "allowedTools": a.allowed_tools,
        "grantedTools": a.granted_tools,
        "provider": a.provider,
        "model": a.model,
        "egress": a.egress,
        "budget": budget(a.budget.as_ref()),
        "approvalRules": a.approval_rules.iter().map(crate::approvals::rule_text).collect::<Vec<_>>(),
    })
}

pub fn role(role: i32) -> String {
    pb::Role::try_from(role)
        .map(|r| r.as_str_name().trim_start_matches("ROLE_").to_lowercase())
        .unwrap_or_default()
}

pub fn api_key(k: &pb::ApiKey) -> Value {
    json!({
        "id": k.id,
        "name": k.name,
        "role": role(k.role),
        "created": time(k.created_ms),
        "revoked": time(k.revoked_ms),
    })
}

/// Usage as the CLI shows it (a cost with unpriced calls is a lower bound).
pub fn usage(u: Option<&pb::Usage>) -> Value {
    let u = u.copied().unwrap_or_default();
    json!({
        "modelCalls": u.model_calls,
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
        "cacheReadTokens": u.cache_read_tokens,
        "cacheWriteTokens": u.cache_write_tokens,
        "costUsd": u.cost_usd,
        "unpricedCalls": u.unpriced_calls,
    })
}

/// A budget as the CLI shows it: each limit, or null for none.
pub fn budget(b: Option<&pb::Budget>) -> Value {
    let b = b.copied().unwrap_or_default();
    json!({ "costUsd": b.cost_usd, "tokens": b.tokens, "toolCalls": b.tool_calls, "wallSecs": b.wall_secs })
}

pub fn run(r: &pb::Run) -> Value {
    let usage = r.usage.unwrap_or_default();
    let end = if r.finished_ms > 0 { r.finished_ms } else { 0 };
    json!({
        "id": r.id,
        "agent": r.agent,
        "parentRunId": r.parent_run_id,
        "state": r.state,
        "started": time(r.started_ms),
        "duration": if end > 0 { duration(end - r.started_ms) } else { String::new() },
        "endReason": r.end_reason,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "costUsd": usage.cost_usd,
    })
}

pub fn event(e: &pb::TaskEvent) -> Value {
    let mut value = json!({
        "taskId": e.task_id,
        "sequence": e.sequence,
        "kind": e.kind,
        "data": chorus_proto::json::from_struct(e.data.clone().unwrap_or_default()),
        "atMs": e.at_ms,
    });
    if let Some(n) = &e.needs_you {
        value["needsYou"] = json!({ "status": n.status, "reason": n.reason, "action": n.action });
    }
    value
}
