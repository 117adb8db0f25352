//! Approvals at the terminal: approval rules as people write them
//! (`ask git.push`, `allow bash command=cargo test`), and `chorus approve`,
//! which answers a call that waits for a person.

use chorus_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};

use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::output::{Format, Out};

/// `chorus approve TASK APPROVAL`: approves a waiting call (or denies it).
#[derive(Debug, clap::Args)]
pub struct Approve {
    /// The task whose call waits.
    pub task: String,
    /// The approval's id (`chorus task show` lists the calls that wait).
    pub approval: String,
    /// Approve its rule too, for the rest of the task.
    #[arg(long, conflicts_with = "deny")]
    pub for_task: bool,
    /// Deny the call instead, saying why (the agent reads it).
    #[arg(long, value_name = "REASON")]
    pub deny: Option<String>,
}

/// Asks the person at the terminal about a call that waits (`needs`) and
/// answers it; an answer given elsewhere meanwhile (the console, another
/// terminal) ends the question and says so. False when the input ended.
pub async fn at_prompt(
    client: &mut Client,
    out: &Out,
    task: &str,
    needs: &pb::NeedsYou,
    after: u64,
) -> Result<bool, Fail> {
    let id = needs.approval_id.clone();
    let mut watcher = client.clone();
    let elsewhere = answered_elsewhere(&mut watcher, task, &id, after);
    tokio::pin!(elsewhere);
    let (approve, for_task, reason) = loop {
        let said = tokio::select! {
            said = crate::prompt::next_line(
                "approve it? [y]es / [t]ask (and its rule for the rest of the task) / [n]o REASON: ",
            ) => said,
            how = &mut elsewhere => {
                eprintln!();
                out.note(&format!("approval {id} was answered elsewhere: {how}"));
                return Ok(true);
            }
        };
        let Some(said) = said else {
            return Ok(false);
        };
        let said = said.trim();
        let (word, rest) = said.split_once(' ').unwrap_or((said, ""));
        match word.to_lowercase().as_str() {
            "y" | "yes" => break (true, false, String::new()),
            "t" | "task" => break (true, true, String::new()),
            "n" | "no" => break (false, false, rest.trim().to_owned()),
            _ => eprintln!("say y, t, or n followed by why"),
        }
    };
    let answered = client
        .answer_approval(pb::AnswerApprovalRequest {
            task_id: task.to_owned(),
            approval_id: id.clone(),
            approve,
            for_task,
            reason,
        })
        .await;
    match answered {
        Ok(_) => Ok(true),
        // Answered elsewhere at the same moment: the history says how.
        Err(status) if status.code() == tonic::Code::AlreadyExists => {
            out.note(status.message());
            Ok(true)
        }
        Err(status) => Err(Fail::call("answer the approval", &status)),
    }
}

/// Resolves once approval `id` of `task` is answered (after event `after`):
/// how, and by whom. Pending forever if the watch fails (the question
/// stays the person's).
async fn answered_elsewhere(client: &mut Client, task: &str, id: &str, after: u64) -> String {
    let watched = client
        .watch_task(pb::WatchTaskRequest {
            task_id: task.to_owned(),
            after_sequence: after,
            follow: true,
            until_needed: false,
        })
        .await;
    if let Ok(stream) = watched {
        let mut stream = stream.into_inner();
        while let Ok(Some(event)) = stream.message().await {
            let data = Value::Object(chorus_proto::json::from_struct(
                event.data.clone().unwrap_or_default(),
            ));
            if event.kind == "approval_answered" && data["approval_id"] == id {
                return format!(
                    "{} by {}",
                    data["outcome"].as_str().unwrap_or_default(),
                    data["by"].as_str().unwrap_or_default()
                );
            }
        }
    }
    std::future::pending().await
}

/// Parses rules written `DECISION TOOL [FIELD=VALUE] [deadline=SECONDS]`,
/// where FIELD is command, path, remote or host and VALUE runs to the end (or to
/// ` deadline=`). The server checks what they say.
pub fn parse_rules(texts: &[String]) -> Result<Vec<pb::ApprovalRule>, Fail> {
    texts.iter().map(|t| parse_rule(t)).collect()
}

fn parse_rule(text: &str) -> Result<pb::ApprovalRule, Fail> {
    let bad = |why: &str| {
        Fail::usage(format!(
            "approval rule '{text}': {why}; write DECISION TOOL [command=..|path=..|remote=..|host=..] [deadline=SECONDS], e.g. 'ask git.push'"
        ))
    };
    let text = text.trim();
    let (decision, rest) = text
        .split_once(char::is_whitespace)
        .ok_or_else(|| bad("no tool"))?;
    let rest = rest.trim_start();
    let (tool, mut rest) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(t, r)| (t, r.trim()));
    let mut rule = pb::ApprovalRule {
        tool: tool.to_owned(),
        decision: decision.to_owned(),
        ..pb::ApprovalRule::default()
    };
    if let Some((before, seconds)) = rest.rsplit_once("deadline=")
        && (before.is_empty() || before.ends_with(char::is_whitespace))
    {
        rule.deadline_seconds = seconds
            .trim()
            .parse()
            .map_err(|_| bad("deadline= takes whole seconds"))?;
        rest = before.trim_end();
    }
    if !rest.is_empty() {
        let (field, value) = rest
            .split_once('=')
            .ok_or_else(|| bad("a condition is FIELD=VALUE"))?;
        let value = value.trim().to_owned();
        match field.trim() {
            "command" => rule.command = value,
            "path" => rule.path = value,
            "remote" => rule.remote = value,
            "host" => rule.host = value,
            other => {
                return Err(bad(&format!(
                    "unknown field '{other}' (command, path, remote or host)"
                )));
            }
        }
    }
    Ok(rule)
}

/// A rule as written (the inverse of [`parse_rule`]).
pub fn rule_text(r: &pb::ApprovalRule) -> String {
    let mut text = format!("{} {}", r.decision, r.tool);
    for (name, value) in [
        ("command", &r.command),
        ("path", &r.path),
        ("remote", &r.remote),
        ("host", &r.host),
    ] {
        if !value.is_empty() {
            text.push_str(&format!(" {name}={value}"));
        }
    }
    if r.deadline_seconds > 0 {
        text.push_str(&format!(" deadline={}", r.deadline_seconds));
    }
    text
}

/// An approval as the CLI shows it.
pub fn approval(a: &pb::Approval) -> Value {
    json!({
        "id": a.id,
        "taskId": a.task_id,
        "runId": a.run_id,
        "agent": a.agent,
        "tool": a.tool,
        "arguments": a.arguments.clone().map_or(Value::Null, |s| Value::Object(chorus_proto::json::from_struct(s))),
        "rule": a.rule,
        "ruleAgent": a.rule_agent,
        "state": a.state,
        "deadline": crate::output::time(a.deadline_ms),
        "answeredBy": a.answered_by,
        "reason": a.reason,
    })
}

/// One line about a waiting call: what it would do and how to answer.
pub fn waiting_line(a: &pb::Approval) -> String {
    let arguments = a.arguments.clone().map_or(Value::Null, |s| {
        Value::Object(chorus_proto::json::from_struct(s))
    });
    format!(
        "{} waits: {} wants {} {} (rule '{}'; until {}) — chorus approve {} {} [--for-task | --deny REASON]",
        a.id,
        a.agent,
        a.tool,
        arguments,
        a.rule,
        crate::output::time(a.deadline_ms),
        a.task_id,
        a.id
    )
}

pub async fn approve(c: &mut Client, out: &Out, a: Approve) -> Result<Exit, Fail> {
    let answered = c
        .answer_approval(pb::AnswerApprovalRequest {
            task_id: a.task,
            approval_id: a.approval,
            approve: a.deny.is_none(),
            for_task: a.for_task,
            reason: a.deny.unwrap_or_default(),
        })
        .await
        .map_err(|s| Fail::call("answer the approval", &s))?
        .into_inner();
    if out.format == Format::Json {
        out.json_line(&approval(&answered));
    } else {
        out.note(&format!(
            "approval {} of task {}: {} ({} {})",
            answered.id, answered.task_id, answered.state, answered.tool, answered.rule
        ));
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_people_write_them() {
        let rule = parse_rule("allow bash command=cargo test --all").expect("parses");
        assert_eq!(
            (
                rule.decision.as_str(),
                rule.tool.as_str(),
                rule.command.as_str()
            ),
            ("allow", "bash", "cargo test --all")
        );
        let rule = parse_rule("ask git.push remote=origin deadline=30").expect("parses");
        assert_eq!(
            (rule.remote.as_str(), rule.deadline_seconds),
            ("origin", 30)
        );
        let rule = parse_rule("deny file.* path=deploy/**").expect("parses");
        assert_eq!(rule.path, "deploy/**");
        assert_eq!(rule_text(&rule), "deny file.* path=deploy/**");
        assert_eq!(parse_rule("ask bash").expect("parses").command, "");
        let rule = parse_rule("ask network host=*.github.com:443 deadline=60").expect("parses");
        assert_eq!(
            (rule.host.as_str(), rule.deadline_seconds),
            ("*.github.com:443", 60)
        );
        assert_eq!(
            rule_text(&rule),
            "ask network host=*.github.com:443 deadline=60"
        );
        for bad in [
            "ask",
            "ask bash user=x",
            "ask bash deadline=soon",
            "ask bash command",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad}");
        }
    }
}
