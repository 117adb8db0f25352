//! `chorus task list [--watch]`: the tasks as a table, then — watching —
//! each change of any of them as it happens, across restarts and replicas.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::task_change::Change;
use serde_json::{Value, json};

use crate::admin::workspace_id;
use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::follow::cut;
use crate::output::say;
use crate::output::{self, Colour, Format, Out};

/// Every task of `workspace` (all when empty) in `status` (any when empty).
async fn all_tasks(
    client: &mut Client,
    workspace: &str,
    status: String,
) -> Result<Vec<pb::Task>, Fail> {
    let mut tasks = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_tasks(pb::ListTasksRequest {
                workspace_id: workspace.to_owned(),
                status: status.clone(),
                page_size: 500,
                page_token,
            })
            .await
            .map_err(|s| Fail::call("list the tasks", &s))?
            .into_inner();
        tasks.extend(page.tasks);
        if page.next_page_token.is_empty() {
            return Ok(tasks);
        }
        page_token = page.next_page_token;
    }
}

pub async fn list(
    client: &mut Client,
    out: &Out,
    workspace: Option<String>,
    status: Option<String>,
    watch: bool,
) -> Result<Exit, Fail> {
    let workspace = match workspace {
        Some(w) => workspace_id(client, &w).await?,
        None => String::new(),
    };
    // Following starts first, so that nothing between the list and the
    // stream is missed.
    let changes = if watch {
        let mut stream = client
            .watch_tasks(pb::WatchTasksRequest {
                workspace_id: workspace.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| Fail::call("follow the tasks", &s))?
            .into_inner();
        // The first message says where "now" is.
        let now = stream
            .message()
            .await
            .map_err(|s| Fail::call("follow the tasks", &s))?;
        Some((Some(stream), now.map(|c| c.cursor).unwrap_or_default()))
    } else {
        None
    };
    let tasks = all_tasks(client, &workspace, status.unwrap_or_default()).await?;
    let rows: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let mut row = output::task(t);
            row["short"] = json!(cut(&t.description, 60));
            row
        })
        .collect();
    if out.format == Format::Json && watch {
        for row in &rows {
            out.json_line(row);
        }
        // Every task is listed: the changes from here on follow.
        if let Some((_, cursor)) = &changes {
            out.json_line(&json!({ "caughtUp": { "cursor": cursor } }));
        }
    } else {
        out.table(
            &rows,
            &[
                ("ID", "id"),
                ("STATUS", "status"),
                ("AGENT", "currentAgent"),
                ("UPDATED", "updated"),
                ("DESCRIPTION", "short"),
            ],
        );
    }
    let Some((mut stream, mut cursor)) = changes else {
        return Ok(Exit::Ok);
    };
    // After a break (a restart, another replica behind a balancer) the feed
    // resumes after the last change seen.
    let mut backoff = crate::reconnect::Backoff::default();
    loop {
        let open = match stream.take() {
            Some(open) => Ok(open),
            None => client
                .watch_tasks(pb::WatchTasksRequest {
                    workspace_id: workspace.clone(),
                    after_cursor: cursor.clone(),
                    ..Default::default()
                })
                .await
                .map(tonic::Response::into_inner),
        };
        let failure = match open {
            Ok(mut open) => loop {
                match open.message().await {
                    Ok(Some(change)) => {
                        backoff.reset();
                        if !change.cursor.is_empty() {
                            cursor.clone_from(&change.cursor);
                        }
                        print_change(out, &change);
                    }
                    Ok(None) => return Ok(Exit::Ok),
                    Err(status) => break status,
                }
            },
            Err(status) => status,
        };
        let from = format!("cursor {cursor}");
        backoff
            .after(failure, out, "the task feed", &from)
            .await
            .map_err(|s| Fail::call("follow the tasks", &s))?;
    }
}

/// One line per change of `task list --watch`.
fn print_change(out: &Out, change: &pb::TaskChange) {
    let Some(what) = &change.change else { return };
    if out.format == Format::Json {
        let value = match what {
            Change::Event(e) => {
                json!({ "cursor": change.cursor, "workspaceId": change.workspace_id, "event": output::event(e) })
            }
            Change::Deleted(d) => {
                json!({ "cursor": change.cursor, "taskId": change.task_id, "deleted": { "sequence": d.sequence } })
            }
            Change::CaughtUp(_) => return,
        };
        out.json_line(&value);
        return;
    }
    let line = match what {
        Change::Event(e) => {
            let data = Value::Object(chorus_proto::json::from_struct(
                e.data.clone().unwrap_or_default(),
            ));
            let at = output::time(e.at_ms);
            let what = match e.kind.as_str() {
                "task_created" => format!(
                    "created: {}",
                    cut(data["description"].as_str().unwrap_or_default(), 80)
                ),
                "status_changed" => format!(
                    "{} → {}",
                    data["from"].as_str().unwrap_or_default(),
                    data["to"].as_str().unwrap_or_default()
                ),
                "completion_report_submitted" => "report submitted".to_owned(),
                other => other.to_owned(),
            };
            let needs = e
                .needs_you
                .as_ref()
                .map(|n| out.paint(Colour::Yellow, &format!("  ⚑ needs you: {}", n.action)))
                .unwrap_or_default();
            format!("{at}  {}  {what}{needs}", change.task_id)
        }
        Change::Deleted(_) => format!("{}  deleted", change.task_id),
        Change::CaughtUp(_) => return,
    };
    say!("{line}");
}
