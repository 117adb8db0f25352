//! `chorus workspace|provider|agent|key …` and `chorus status`.

use std::path::PathBuf;

use chorus_proto::orchestrator::v1 as pb;
use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::output::say;
use crate::output::{self, Format, Out};

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    List,
    /// Creates a workspace on a directory (absolute, under the
    /// orchestrator's --workspace-roots).
    Create {
        name: String,
        root: PathBuf,
    },
    Show {
        workspace: String,
    },
    /// Sets the provider the planner runs on ("" to clear).
    SetSystemProvider {
        workspace: String,
        provider: String,
    },
    /// Sets what the workspace's tasks may spend: together per UTC day and
    /// month, and each (the default of a task that sets no limit of its
    /// own). Replaces all of them: a limit left out is none.
    Limits {
        workspace: String,
        /// US dollars all its tasks may spend in a UTC day.
        #[arg(long)]
        daily_usd: Option<f64>,
        /// US dollars all its tasks may spend in a UTC month.
        #[arg(long)]
        monthly_usd: Option<f64>,
        /// Each task's default cost limit, in US dollars.
        #[arg(long)]
        task_cost_usd: Option<f64>,
        /// Each task's default token limit (input and output).
        #[arg(long)]
        task_tokens: Option<u64>,
        /// Each task's default tool-call limit.
        #[arg(long)]
        task_tool_calls: Option<u64>,
    },
    /// Sets how the workspace's tasks make and land their changes (a git
    /// repository): each on its own worktree and branch or not, how a
    /// change lands, and how long an unlanded worktree stays. Replaces all
    /// of them: a setting left out is its default.
    Changes {
        workspace: String,
        /// Each task in its own worktree on its own branch (default on).
        #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
        task_worktrees: Option<bool>,
        /// How `task land` lands unless it says (default merge).
        #[arg(long)]
        land_mode: Option<crate::task_change::Mode>,
        /// Remove a task's unlanded worktree this many days after it ended,
        /// keeping its branch (default 0: kept until landed or discarded).
        #[arg(long, default_value_t = 0)]
        keep_unlanded_days: u32,
    },
    Delete {
        workspace: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    List {
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
    Show {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
    /// Creates an agent: its allowed tools (names and @profiles), provider
    /// and instructions.
    Create {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
        /// Allowed tools, comma-separated (e.g. @read-only,file.write).
        #[arg(long, value_delimiter = ',')]
        tools: Vec<String>,
        /// The provider it runs on (else the workspace's system provider).
        #[arg(long)]
        provider: Option<String>,
        /// The model, over the provider's.
        #[arg(long)]
        model: Option<String>,
        /// A file with the agent's instructions.
        #[arg(long)]
        instructions_file: Option<PathBuf>,
        /// `host:port` rules the agent may connect to with the network grant.
        #[arg(long, value_delimiter = ',')]
        egress: Vec<String>,
        /// An approval rule, once per rule: `DECISION TOOL [command=..|path=..|remote=..|host=..] [deadline=SECONDS]`,
        /// e.g. 'ask git.push', 'allow bash command=cargo test', 'deny file.* path=deploy/**'.
        #[arg(long = "rule")]
        rules: Vec<String>,
    },
    /// Changes an agent: only what is given changes ("" clears the
    /// provider or the model).
    Update {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
        /// Replaces the allowed tools, comma-separated (e.g. @reviewer,file.write).
        #[arg(long, value_delimiter = ',')]
        tools: Option<Vec<String>>,
        /// The provider it runs on ("" for the workspace's system provider).
        #[arg(long)]
        provider: Option<String>,
        /// The model, over the provider's ("" for the provider's).
        #[arg(long)]
        model: Option<String>,
        /// A file with the agent's new instructions.
        #[arg(long, conflicts_with = "reset_instructions")]
        instructions_file: Option<PathBuf>,
        /// Gives a default agent its original instructions back.
        #[arg(long)]
        reset_instructions: bool,
        /// Replaces the `host:port` egress rules, comma-separated ("" for none).
        #[arg(long, value_delimiter = ',')]
        egress: Option<Vec<String>>,
        /// The cost limit (US dollars) of a task started with it that sets none.
        #[arg(long)]
        budget_cost_usd: Option<f64>,
        /// The token limit of a task started with it that sets none.
        #[arg(long)]
        budget_tokens: Option<u64>,
        /// The tool-call limit of a task started with it that sets none.
        #[arg(long)]
        budget_tool_calls: Option<u64>,
        /// Clears its default task budget.
        #[arg(long, conflicts_with_all = ["budget_cost_usd", "budget_tokens", "budget_tool_calls"])]
        no_budget: bool,
        /// Replaces its approval rules, once per rule (see `agent create --rule`).
        #[arg(long = "rule")]
        rules: Vec<String>,
        /// Removes every approval rule of the agent.
        #[arg(long, conflicts_with = "rules")]
        no_rules: bool,
    },
    Delete {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Role {
    Admin,
    Operator,
    Viewer,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    List {
        #[arg(long)]
        include_revoked: bool,
    },
    /// Creates a key; its secret is printed once, on standard output.
    Create {
        name: String,
        #[arg(long, value_enum)]
        role: Role,
    },
    Revoke {
        id: String,
    },
}

/// The id of the workspace named by `name_or_id`.
pub async fn workspace_id(client: &mut Client, name_or_id: &str) -> Result<String, Fail> {
    let workspaces = list_workspaces(client).await?;
    workspaces
        .iter()
        .find(|w| w.id == name_or_id || w.name == name_or_id)
        .map(|w| w.id.clone())
        .ok_or_else(|| {
            let known: Vec<&str> = workspaces.iter().map(|w| w.name.as_str()).collect();
            Fail::usage(format!(
                "no workspace '{name_or_id}'; known: {}; create one with: chorus workspace create NAME ROOT",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))
        })
}

async fn list_workspaces(client: &mut Client) -> Result<Vec<pb::Workspace>, Fail> {
    Ok(client
        .list_workspaces(pb::ListWorkspacesRequest {})
        .await
        .map_err(|s| Fail::call("list the workspaces", &s))?
        .into_inner()
        .workspaces)
}

const WORKSPACE_FIELDS: &[(&str, &str)] = &[
    ("ID", "id"),
    ("NAME", "name"),
    ("ROOT", "root"),
    ("SYSTEM PROVIDER", "systemProvider"),
    ("CHANGES", "changesText"),
    ("WARNINGS", "warnings"),
];

pub async fn workspace(
    command: WorkspaceCommand,
    mut client: Client,
    out: &Out,
) -> Result<Exit, Fail> {
    let c = &mut client;
    match command {
        WorkspaceCommand::List => {
            let rows: Vec<Value> = list_workspaces(c)
                .await?
                .iter()
                .map(output::workspace)
                .collect();
            out.table(
                &rows,
                &[
                    ("ID", "id"),
                    ("NAME", "name"),
                    ("ROOT", "root"),
                    ("SYSTEM PROVIDER", "systemProvider"),
                ],
            );
        }
        WorkspaceCommand::Create { name, root } => {
            let root = std::path::absolute(&root)
                .map_err(|e| Fail::usage(format!("{}: {e}", root.display())))?;
            let w = c
                .create_workspace(pb::CreateWorkspaceRequest {
                    name,
                    root: root.display().to_string(),
                })
                .await
                .map_err(|s| Fail::call("create the workspace", &s))?
                .into_inner();
            out.value(&output::workspace(&w), WORKSPACE_FIELDS);
            for warning in &w.warnings {
                out.note(&format!("warning: {warning}"));
            }
        }
        WorkspaceCommand::Show { workspace } => {
            let id = workspace_id(c, &workspace).await?;
            let w = c
                .get_workspace(pb::GetWorkspaceRequest { id })
                .await
                .map_err(|s| Fail::call("read the workspace", &s))?
                .into_inner();
            out.value(&output::workspace(&w), WORKSPACE_FIELDS);
        }
        WorkspaceCommand::SetSystemProvider {
            workspace,
            provider,
        } => {
            let id = workspace_id(c, &workspace).await?;
            let w = c
                .update_workspace(pb::UpdateWorkspaceRequest {
                    id,
                    system_provider: Some(provider),
                    ..Default::default()
                })
                .await
                .map_err(|s| Fail::call("update the workspace", &s))?
                .into_inner();
            out.value(&output::workspace(&w), WORKSPACE_FIELDS);
        }
        WorkspaceCommand::Limits {
            workspace,
            daily_usd,
            monthly_usd,
            task_cost_usd,
            task_tokens,
            task_tool_calls,
        } => {
            let id = workspace_id(c, &workspace).await?;
            let w = c
                .update_workspace(pb::UpdateWorkspaceRequest {
                    id,
                    limits: Some(pb::WorkspaceLimits {
                        task_budget: Some(pb::Budget {
                            cost_usd: task_cost_usd,
                            tokens: task_tokens,
                            tool_calls: task_tool_calls,
                            wall_secs: None,
                        }),
                        daily_cost_usd: daily_usd,
                        monthly_cost_usd: monthly_usd,
                    }),
                    ..Default::default()
                })
                .await
                .map_err(|s| Fail::call("set the workspace's limits", &s))?
                .into_inner();
            let mut fields = WORKSPACE_FIELDS.to_vec();
            fields.push(("LIMITS", "limitsText"));
            out.value(&output::workspace(&w), &fields);
        }
        WorkspaceCommand::Changes {
            workspace,
            task_worktrees,
            land_mode,
            keep_unlanded_days,
        } => {
            let id = workspace_id(c, &workspace).await?;
            let w = c
                .update_workspace(pb::UpdateWorkspaceRequest {
                    id,
                    changes: Some(pb::WorkspaceChanges {
                        task_worktrees,
                        land_mode: land_mode
                            .map_or(pb::LandMode::Unspecified, pb::LandMode::from)
                            .into(),
                        keep_unlanded_days,
                    }),
                    ..Default::default()
                })
                .await
                .map_err(|s| Fail::call("set how the workspace's tasks make changes", &s))?
                .into_inner();
            out.value(&output::workspace(&w), WORKSPACE_FIELDS);
        }
        WorkspaceCommand::Delete { workspace } => {
            let id = workspace_id(c, &workspace).await?;
            c.delete_workspace(pb::DeleteWorkspaceRequest { id })
                .await
                .map_err(|s| Fail::call("delete the workspace", &s))?;
            out.note(&format!("workspace {workspace} deleted"));
        }
    }
    Ok(Exit::Ok)
}

const AGENT_FIELDS: &[(&str, &str)] = &[
    ("NAME", "name"),
    ("KIND", "kind"),
    ("PROVIDER", "provider"),
    ("MODEL", "model"),
    ("ALLOWED", "allowedTools"),
    ("GRANTED", "grantedTools"),
    ("EGRESS", "egress"),
    ("RULES", "approvalRules"),
];

pub async fn agent(command: AgentCommand, mut client: Client, out: &Out) -> Result<Exit, Fail> {
    let c = &mut client;
    match command {
        AgentCommand::List { workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let agents = c
                .list_agents(pb::ListAgentsRequest { workspace_id })
                .await
                .map_err(|s| Fail::call("list the agents", &s))?
                .into_inner()
                .agents;
            let rows: Vec<Value> = agents.iter().map(output::agent).collect();
            out.table(
                &rows,
                &[
                    ("NAME", "name"),
                    ("KIND", "kind"),
                    ("PROVIDER", "provider"),
                    ("ALLOWED", "allowedTools"),
                ],
            );
        }
        AgentCommand::Show { name, workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let a = c
                .get_agent(pb::GetAgentRequest { workspace_id, name })
                .await
                .map_err(|s| Fail::call("read the agent", &s))?
                .into_inner();
            let mut fields = AGENT_FIELDS.to_vec();
            fields.push(("INSTRUCTIONS", "instructions"));
            out.value(&output::agent(&a), &fields);
        }
        AgentCommand::Create {
            name,
            workspace,
            tools,
            provider,
            model,
            instructions_file,
            egress,
            rules,
        } => {
            let approval_rules = crate::approvals::parse_rules(&rules)?;
            let workspace_id = workspace_id(c, &workspace).await?;
            let instructions = match instructions_file {
                Some(path) => std::fs::read_to_string(&path)
                    .map_err(|e| Fail::usage(format!("cannot read {}: {e}", path.display())))?,
                None => String::new(),
            };
            let a = c
                .create_agent(pb::CreateAgentRequest {
                    budget: None,
                    workspace_id,
                    name,
                    instructions,
                    allowed_tools: tools,
                    provider: provider.unwrap_or_default(),
                    model: model.unwrap_or_default(),
                    egress,
                    approval_rules,
                })
                .await
                .map_err(|s| Fail::call("create the agent", &s))?
                .into_inner();
            out.value(&output::agent(&a), AGENT_FIELDS);
        }
        AgentCommand::Update {
            name,
            workspace,
            tools,
            provider,
            model,
            instructions_file,
            reset_instructions,
            egress,
            budget_cost_usd,
            budget_tokens,
            budget_tool_calls,
            no_budget,
            rules,
            no_rules,
        } => {
            let set_approval_rules = no_rules || !rules.is_empty();
            let approval_rules = crate::approvals::parse_rules(&rules)?;
            // Any limit given replaces the agent's default budget.
            let given =
                budget_cost_usd.is_some() || budget_tokens.is_some() || budget_tool_calls.is_some();
            let budget = (given || no_budget).then_some(pb::Budget {
                cost_usd: budget_cost_usd,
                tokens: budget_tokens,
                tool_calls: budget_tool_calls,
                wall_secs: None,
            });
            let workspace_id = workspace_id(c, &workspace).await?;
            let instructions = instructions_file
                .map(|path| {
                    std::fs::read_to_string(&path)
                        .map_err(|e| Fail::usage(format!("cannot read {}: {e}", path.display())))
                })
                .transpose()?;
            let listed = |list: Option<Vec<String>>| {
                let set = list.is_some();
                let items = list
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|i| !i.trim().is_empty())
                    .collect();
                (items, set)
            };
            let (allowed_tools, set_allowed_tools) = listed(tools);
            let (egress, set_egress) = listed(egress);
            let a = c
                .update_agent(pb::UpdateAgentRequest {
                    budget,
                    workspace_id,
                    name,
                    instructions,
                    allowed_tools,
                    set_allowed_tools,
                    provider,
                    model,
                    reset_instructions,
                    egress,
                    set_egress,
                    approval_rules,
                    set_approval_rules,
                })
                .await
                .map_err(|s| Fail::call("update the agent", &s))?
                .into_inner();
            out.value(&output::agent(&a), AGENT_FIELDS);
        }
        AgentCommand::Delete { name, workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            c.delete_agent(pb::DeleteAgentRequest {
                workspace_id,
                name: name.clone(),
            })
            .await
            .map_err(|s| Fail::call("delete the agent", &s))?;
            out.note(&format!("agent {name} deleted"));
        }
    }
    Ok(Exit::Ok)
}

pub async fn key(command: KeyCommand, mut client: Client, out: &Out) -> Result<Exit, Fail> {
    let c = &mut client;
    let fields = [
        ("ID", "id"),
        ("NAME", "name"),
        ("ROLE", "role"),
        ("CREATED", "created"),
        ("REVOKED", "revoked"),
    ];
    match command {
        KeyCommand::List { include_revoked } => {
            let keys = c
                .list_api_keys(pb::ListApiKeysRequest { include_revoked })
                .await
                .map_err(|s| Fail::call("list the keys", &s))?
                .into_inner()
                .keys;
            let rows: Vec<Value> = keys.iter().map(output::api_key).collect();
            out.table(&rows, &fields);
        }
        KeyCommand::Create { name, role } => {
            let role = match role {
                Role::Admin => pb::Role::Admin,
                Role::Operator => pb::Role::Operator,
                Role::Viewer => pb::Role::Viewer,
            };
            let created = c
                .create_api_key(pb::CreateApiKeyRequest {
                    name,
                    role: role as i32,
                })
                .await
                .map_err(|s| Fail::call("create the key", &s))?
                .into_inner();
            let key = created.key.unwrap_or_default();
            if out.format == Format::Json {
                let mut value = output::api_key(&key);
                value["secret"] = json!(created.secret);
                out.value(&value, &[]);
            } else {
                out.note(&format!(
                    "key {} ({}) created; its secret is shown once, below: keep it in a file readable by its user only",
                    key.id,
                    output::role(key.role)
                ));
                say!("{}", created.secret);
            }
        }
        KeyCommand::Revoke { id } => {
            let key = c
                .revoke_api_key(pb::RevokeApiKeyRequest { id })
                .await
                .map_err(|s| Fail::call("revoke the key", &s))?
                .into_inner();
            out.value(&output::api_key(&key), &fields);
        }
    }
    Ok(Exit::Ok)
}

pub async fn status(mut client: Client, out: &Out) -> Result<Exit, Fail> {
    let status = client
        .get_status(pb::GetStatusRequest {})
        .await
        .map_err(|s| Fail::call("read the status", &s))?
        .into_inner();
    let sandbox = status.sandbox.clone().unwrap_or_default();
    let replicas: Vec<Value> = status
        .replicas
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "live": r.live,
                "started": output::time(r.started_ms),
                "heartbeat": output::time(r.heartbeat_ms),
                "leaseExpires": output::time(r.lease_expires_ms),
                "stopped": output::time(r.stopped_ms),
            })
        })
        .collect();
    let value = json!({
        "version": status.version,
        "replica": status.replica,
        "sandbox": {
            "state": sandbox.state,
            "tier": sandbox.tier,
            "tierReason": sandbox.tier_reason,
            "identity": sandbox.identity,
            "limits": sandbox.limits,
            "problems": sandbox.problems,
        },
        "embeddedToolExec": status.embedded_tool_exec,
        "liveRuns": status.live_runs,
        "queuedRuns": status.queued_runs,
        "replicas": replicas,
    });
    if out.format == Format::Json {
        out.value(&value, &[]);
        return Ok(Exit::Ok);
    }
    out.value(
        &value,
        &[
            ("VERSION", "version"),
            ("REPLICA", "replica"),
            ("SANDBOX", "sandbox.state"),
            ("TIER", "sandbox.tier"),
            ("WHY THIS TIER", "sandbox.tierReason"),
            ("RUNS AS", "sandbox.identity"),
            ("LIMITS", "sandbox.limits"),
            ("PROBLEMS", "sandbox.problems"),
            ("EMBEDDED TOOL-EXEC", "embeddedToolExec"),
            ("LIVE RUNS", "liveRuns"),
            ("QUEUED RUNS", "queuedRuns"),
        ],
    );
    say!("");
    out.table(
        &replicas,
        &[
            ("REPLICA", "id"),
            ("LIVE", "live"),
            ("STARTED", "started"),
            ("HEARTBEAT", "heartbeat"),
            ("LEASE UNTIL", "leaseExpires"),
            ("STOPPED", "stopped"),
        ],
    );
    Ok(Exit::Ok)
}

/// `chorus usage`: GetUsage as a table (or JSON).
pub async fn usage(
    mut client: Client,
    out: &Out,
    workspace: Option<String>,
    by: Vec<String>,
    from: Option<String>,
    to: Option<String>,
) -> Result<Exit, Fail> {
    let workspace_id = match workspace {
        Some(w) => workspace_id(&mut client, &w).await?,
        None => String::new(),
    };
    let report = client
        .get_usage(pb::GetUsageRequest {
            workspace_id,
            from: from.unwrap_or_default(),
            to: to.unwrap_or_default(),
            group_by: by.clone(),
        })
        .await
        .map_err(|s| Fail::call("read the usage", &s))?
        .into_inner();
    let mut rows: Vec<Value> = report
        .groups
        .iter()
        .map(|g| {
            let mut row = output::usage(g.usage.as_ref());
            row["workspace"] = json!(g.workspace_id);
            row["agent"] = json!(g.agent);
            row["provider"] = json!(g.provider);
            row["model"] = json!(g.model);
            row["day"] = json!(g.day);
            row
        })
        .collect();
    if out.format == Format::Json {
        out.value(
            &json!({
                "from": report.from,
                "to": report.to,
                "groups": rows,
                "total": output::usage(report.total.as_ref()),
            }),
            &[],
        );
        return Ok(Exit::Ok);
    }
    let mut total = output::usage(report.total.as_ref());
    total["agent"] = json!("TOTAL");
    total["workspace"] = json!("TOTAL");
    rows.push(total);
    let mut columns: Vec<(&str, &str)> = [
        ("workspace", ("WORKSPACE", "workspace")),
        ("agent", ("AGENT", "agent")),
        ("provider", ("PROVIDER", "provider")),
        ("model", ("MODEL", "model")),
        ("day", ("DAY", "day")),
    ]
    .into_iter()
    .filter(|(d, _)| by.iter().any(|b| b == d))
    .map(|(_, c)| c)
    .collect();
    columns.extend([
        ("CALLS", "modelCalls"),
        ("IN", "inputTokens"),
        ("OUT", "outputTokens"),
        ("CACHED", "cacheReadTokens"),
        ("COST $", "costUsd"),
        ("UNPRICED", "unpricedCalls"),
    ]);
    say!(
        "{} to {} (UTC days; the last one not included)",
        report.from,
        report.to
    );
    out.table(&rows, &columns);
    Ok(Exit::Ok)
}
