//! `chorus task diff|land|discard`: a task's change, as a reviewer meets it.

use chorus_proto::orchestrator::v1 as pb;
use serde_json::json;

use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::output::{Colour, Format, Out, say};

/// How `task land` lands.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Mode {
    FastForward,
    Merge,
    Squash,
}

impl From<Mode> for pb::LandMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::FastForward => Self::FastForward,
            Mode::Merge => Self::Merge,
            Mode::Squash => Self::Squash,
        }
    }
}

/// A task's branch in one line: `chorus/1a2b3c4d from main (open)`, or why
/// it has none.
pub fn branch_line(task: &pb::Task) -> String {
    match &task.branch {
        Some(b) => {
            let mut line = format!("{} from {} ({})", b.name, display_base(&b.base), b.state);
            if !b.landed_commit.is_empty() {
                line.push_str(&format!(
                    " as {} by {}",
                    short(&b.landed_commit),
                    b.landed_by
                ));
            }
            line
        }
        None if task.branch_note.is_empty() => "none".to_owned(),
        None => format!("none: {}", task.branch_note),
    }
}

fn display_base(base: &str) -> &str {
    if base.is_empty() {
        "the workspace's HEAD"
    } else {
        base
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// `task diff`: the commits, the files with their counts, then each page of
/// patches until the last (or the files asked for).
pub async fn diff(
    c: &mut Client,
    out: &Out,
    id: &str,
    paths: Vec<String>,
    stat: bool,
) -> Result<Exit, Fail> {
    let mut page = read(c, id, paths.clone(), String::new()).await?;
    if out.format == Format::Json {
        let mut patches = std::mem::take(&mut page.patches);
        while !stat && !page.next_page_token.is_empty() {
            let next = read(c, id, paths.clone(), page.next_page_token.clone()).await?;
            patches.extend(next.patches);
            page.next_page_token = next.next_page_token;
        }
        out.json_line(&json!({
            "branch": page.branch.as_ref().map(|b| json!({"name": b.name, "base": b.base, "state": b.state})),
            "baseCommit": page.base_commit,
            "headCommit": page.head_commit,
            "commits": page.commits.iter().map(|c| json!({"id": c.id, "author": c.author, "timeMs": c.time_ms, "summary": c.summary})).collect::<Vec<_>>(),
            "files": page.files.iter().map(|f| json!({
                "path": f.path, "oldPath": f.old_path, "status": f.status,
                "additions": f.additions, "deletions": f.deletions, "uncommitted": f.uncommitted,
            })).collect::<Vec<_>>(),
            "patches": if stat { Vec::new() } else { patches.iter().map(|p| json!({"path": p.path, "patch": p.patch, "truncated": p.truncated})).collect() },
        }));
        return Ok(Exit::Ok);
    }
    if let Some(b) = &page.branch {
        say!(
            "{} {} from {} ({}), {} commit(s), {} file(s)",
            out.paint(Colour::Bold, "branch"),
            b.name,
            display_base(&b.base),
            b.state,
            page.commits.len(),
            page.files.len()
        );
    }
    for commit in &page.commits {
        say!(
            "  {} {}",
            out.paint(Colour::Yellow, short(&commit.id)),
            commit.summary
        );
    }
    for f in &page.files {
        let counts = match (f.additions, f.deletions) {
            (Some(a), Some(d)) => format!(
                "{}{}",
                out.paint(Colour::Green, &format!("+{a} ")),
                out.paint(Colour::Red, &format!("-{d}"))
            ),
            _ => "binary".to_owned(),
        };
        let renamed = if f.old_path.is_empty() {
            String::new()
        } else {
            format!(" (from {})", f.old_path)
        };
        let uncommitted = if f.uncommitted {
            out.paint(Colour::Dim, " uncommitted")
        } else {
            String::new()
        };
        say!(
            "  {:<9} {}{renamed}  {counts}{uncommitted}",
            f.status,
            f.path
        );
    }
    if stat {
        return Ok(Exit::Ok);
    }
    loop {
        for patch in &page.patches {
            say!("");
            for line in patch.patch.lines() {
                let colour = if line.starts_with('+') && !line.starts_with("+++") {
                    Some(Colour::Green)
                } else if line.starts_with('-') && !line.starts_with("---") {
                    Some(Colour::Red)
                } else if line.starts_with("@@") {
                    Some(Colour::Cyan)
                } else {
                    None
                };
                match colour {
                    Some(colour) => say!("{}", out.paint(colour, line)),
                    None => say!("{line}"),
                }
            }
            if patch.truncated {
                say!("{}", out.paint(Colour::Dim, "(cut at 1 MiB)"));
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(Exit::Ok);
        }
        page = read(c, id, paths.clone(), page.next_page_token.clone()).await?;
    }
}

async fn read(
    c: &mut Client,
    id: &str,
    paths: Vec<String>,
    page_token: String,
) -> Result<pb::GetTaskChangeResponse, Fail> {
    Ok(c.get_task_change(pb::GetTaskChangeRequest {
        task_id: id.to_owned(),
        paths,
        page_size: 0,
        page_token,
    })
    .await
    .map_err(|s| Fail::call("read the task's change", &s))?
    .into_inner())
}

/// `task land`.
pub async fn land(
    c: &mut Client,
    out: &Out,
    id: &str,
    mode: Option<Mode>,
    message: Option<String>,
) -> Result<Exit, Fail> {
    let task = c
        .land_task(pb::LandTaskRequest {
            task_id: id.to_owned(),
            mode: mode
                .map_or(pb::LandMode::Unspecified, pb::LandMode::from)
                .into(),
            message: message.unwrap_or_default(),
        })
        .await
        .map_err(|s| Fail::call("land the task", &s))?
        .into_inner();
    let branch = task.branch.clone().unwrap_or_default();
    if out.format == Format::Json {
        out.json_line(&crate::output::task(&task));
    } else {
        out.note(&format!(
            "task {} landed into {} as {}",
            task.id,
            branch.base,
            short(&branch.landed_commit)
        ));
    }
    Ok(Exit::Ok)
}

/// `task discard`.
pub async fn discard(c: &mut Client, out: &Out, id: &str) -> Result<Exit, Fail> {
    let task = c
        .discard_task(pb::DiscardTaskRequest {
            task_id: id.to_owned(),
        })
        .await
        .map_err(|s| Fail::call("discard the task", &s))?
        .into_inner();
    if out.format == Format::Json {
        out.json_line(&crate::output::task(&task));
    } else {
        out.note(&format!("task {}'s change discarded", task.id));
    }
    Ok(Exit::Ok)
}
