//! What every way of starting a run shares (StartTask, PlanTask, SubmitAnswers,
//! Handoff): resolving the agent, its provider and everything the run needs
//! before anything is written, then turning the opened run into a context and
//! handing it to a driver.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::domain::{Agent, AgentKind, Name, ProviderKey, Run, RunState, TokenBinding, Workspace};
use crate::error::ServiceError;
use crate::execution::RunClock;
use crate::providers::prompt::system_prompt;
use crate::providers::{Attempt, ProviderSettings, RunContext};
use crate::state::AppState;

/// The longest run token lifetime. A token outlives its run's timeout because
/// the clock stops during handoffs; an ended run is refused by its state anyway.
const TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A run that can be started: everything checked and resolved.
#[derive(Debug)]
pub struct Launch {
    pub agent: Agent,
    pub workspace: Workspace,
    /// Where its tools act: its task's worktree, else the workspace's root.
    root: std::path::PathBuf,
    provider: ProviderSettings,
    model: Option<String>,
    pub tools: Vec<String>,
    system_prompt: String,
    timeout: Duration,
    /// Who its processes run as.
    identity: chorus_sandbox::Identity,
    /// What is left of its task's cost limit when it starts (a CLI's own
    /// second limit; the server's check is the one that holds).
    cost_left: Option<u64>,
}

impl Launch {
    /// Acts in `root` (its task's worktree) instead of the workspace's root.
    #[must_use]
    pub fn in_root(mut self, root: std::path::PathBuf) -> Self {
        self.root = root;
        self
    }

    /// What the agent is told when work is handed to it (its provider decides).
    pub fn handoff_message(&self, composed: String, prompt: &str) -> String {
        self.provider.provider().handoff_message(composed, prompt)
    }

    /// Resolves `agent_name` in `workspace`: the agent, its provider (the
    /// workspace's system provider for internal agents) and key, the CLI set-up.
    ///
    /// # Errors
    /// NOT_FOUND for a missing agent or provider; FAILED_PRECONDITION when the
    /// agent has no provider, the workspace no system provider, chorus-tools is
    /// missing, no tool-exec is configured for a CLI agent, the sandbox is
    /// unavailable or has no user to run a CLI agent as in this workspace, the
    /// provider's stored key does not decrypt, or its key reference (`env:NAME`,
    /// `file:/path`) does not resolve.
    pub async fn prepare(
        state: &AppState,
        workspace: Workspace,
        agent_name: &Name,
        timeout: Duration,
    ) -> Result<Self, ServiceError> {
        let agent = state
            .store
            .get_agent(workspace.id, agent_name.clone())
            .await?;
        Self::prepare_agent(state, workspace, agent, timeout).await
    }

    /// [`Launch::prepare`] for an agent already read.
    ///
    /// # Errors
    /// As [`Launch::prepare`], the agent lookup aside.
    pub async fn prepare_agent(
        state: &AppState,
        workspace: Workspace,
        agent: Agent,
        timeout: Duration,
    ) -> Result<Self, ServiceError> {
        let runner = &state.runner;
        let (provider, api_key) = provider_of(state, &workspace, &agent).await?;
        agent
            .check_provider_kind(provider.name.as_str(), provider.kind)
            .map_err(|e| ServiceError::Precondition(e.to_string()))?;
        let mut identity = chorus_sandbox::Identity::Service;
        if crate::providers::for_kind(provider.kind).spawns_processes() {
            identity = process_identity(state, &workspace)?;
        }
        let tools = agent.granted_tools()?;
        let chorus_tools = runner.config().chorus_tools.display().to_string();
        // Native tools (an API's functions, a CLI's MCP tools) or the shell form.
        let invocation = crate::providers::for_kind(provider.kind)
            .invocation(provider.tool_transport, &chorus_tools);
        let system_prompt = system_prompt(
            agent.kind,
            &agent.instructions,
            &agent.allowed_tools,
            invocation,
        );
        Ok(Self {
            root: workspace.root.clone(),
            model: agent.model.clone().or_else(|| provider.model.clone()),
            provider: ProviderSettings {
                name: provider.name.clone(),
                kind: provider.kind,
                base_url: provider.base_url.clone(),
                api_key,
                tool_transport: provider.tool_transport,
            },
            agent,
            workspace,
            tools,
            system_prompt,
            timeout,
            identity,
            cost_left: None,
        })
    }

    /// The run this launch opens on `task`, driven by a replica within the
    /// launch's timeout: a task's own run, or — `handoff` set (its parent and
    /// prompt) — a handoff's.
    pub fn new_run(
        &self,
        task: crate::domain::TaskId,
        handoff: Option<(Option<crate::domain::RunId>, String)>,
    ) -> crate::store::NewRun {
        let (parent, handoff_prompt) = match handoff {
            Some((parent, prompt)) => (parent, Some(prompt)),
            None => (None, None),
        };
        crate::store::NewRun {
            task_id: task,
            agent: self.agent.name.clone(),
            parent,
            tools: self.tools.clone(),
            rules: self.rules(),
            handoff_prompt,
            token: Some(self.token_binding()),
            drive: Some(self.timeout),
        }
    }

    /// The approval rules of a run opened for this launch: its agent's, then
    /// its workspace's.
    pub fn rules(&self) -> crate::domain::approval::RunRules {
        crate::domain::approval::RunRules::own(
            self.agent.name.as_str(),
            self.agent.approval_rules.clone(),
            self.workspace.approval_rules.clone(),
        )
    }

    /// What the token of a run opened for this launch is minted for: the
    /// root it acts in, and a lifetime beyond the run's timeout (its clock stops
    /// during handoffs; an ended run is refused by its state anyway).
    pub fn token_binding(&self) -> TokenBinding {
        crate::auth::runs::binding(
            &self.root,
            &self.agent.egress,
            TOKEN_TTL.max(self.timeout * 2),
        )
    }

    /// What the run's provider does.
    pub fn provider(&self) -> &'static dyn crate::providers::Provider {
        self.provider.provider()
    }

    /// Starts the driver of `run` (just opened with [`Launch::token_binding`],
    /// spawning) with its first message; its supervisor follows the task's
    /// history after `after`.
    /// Starts the driver of `run` of `task` with `message`; a CLI agent gets
    /// what is left of the task's cost limit as its own limit too.
    pub fn start(
        mut self,
        state: &AppState,
        run: &Run,
        task: &crate::domain::Task,
        message: String,
        after: u64,
    ) {
        self.cost_left = task.budget.cost_left(&task.usage);
        let attempt = Attempt {
            message,
            resume: None,
        };
        self.drive(state, run, attempt, after, false);
    }

    /// Starts the driver of `run`, just taken over from a replica that is
    /// gone, resuming `session` (a CLI's session, or the run's stored
    /// conversation for an API agent) with the message that says so. A run
    /// that waits for a handoff starts with its clock stopped.
    pub fn resume(self, state: &AppState, run: &Run, session: String, after: u64) {
        let message = match self.agent.kind {
            AgentKind::UserDefined => super::RESUMED,
            AgentKind::Internal => super::PLANNER_RESUMED,
        };
        let attempt = Attempt {
            message: message.to_owned(),
            resume: Some(session),
        };
        self.drive(state, run, attempt, after, true);
    }

    fn drive(self, state: &AppState, run: &Run, attempt: Attempt, after: u64, resumed: bool) {
        let runner = Arc::clone(&state.runner);
        // A run opened with this launch's binding always has a token.
        let token = crate::auth::runs::mint(state, run).unwrap_or_default();
        let ctx = RunContext {
            run_id: run.id,
            epoch: run.epoch,
            task_id: run.task_id,
            agent: run.agent.clone(),
            agent_kind: self.agent.kind,
            provider: self.provider,
            model: self.model,
            tools: self.tools,
            egress: run
                .token
                .as_ref()
                .map(|t| t.egress.clone())
                .unwrap_or_default(),
            system_prompt: self.system_prompt,
            token,
            tools_addr: state.addresses.tool_exec.clone(),
            orchestrator_addr: state.addresses.orchestrator.clone(),
            workspace_root: self.root.clone(),
            run_dir: runner.config().runs_dir.join(run.id.to_string()),
            identity: self.identity,
            clock: RunClock::start(self.timeout),
            timeout: self.timeout,
            cost_left_pico_usd: self.cost_left,
            resumed,
            stop: state.shutdown.child_token(),
            span: tracing::Span::none(),
        };
        if run.state == RunState::AwaitingHandoff {
            ctx.clock.pause();
        }
        info!(run_id = %run.id, task_id = %run.task_id, agent = %run.agent, parent = ?run.parent, provider = %ctx.provider.name, kind = ctx.provider.kind.as_str(), replica = %state.store.replica().id, epoch = run.epoch, resumed, "starting agent");
        runner.launch(state.clone(), ctx, run.parent, after, attempt);
    }
}

/// The provider `agent` runs on (its own, else the workspace's system
/// provider) and its API key, resolved when it is a reference.
async fn provider_of(
    state: &AppState,
    workspace: &Workspace,
    agent: &Agent,
) -> Result<(crate::domain::Provider, Option<String>), ServiceError> {
    let agent_name = &agent.name;
    let provider_name = agent
        .provider
        .clone()
        .or_else(|| workspace.system_provider.clone())
        .ok_or_else(|| {
            ServiceError::Precondition(match agent.kind {
                AgentKind::UserDefined => format!(
                    "agent '{agent_name}' has no provider and workspace '{}' has no system provider to run it on; give the agent one with UpdateAgent, or set the workspace's system_provider with UpdateWorkspace",
                    workspace.name
                ),
                AgentKind::Internal => format!(
                    "workspace '{}' has no system provider to run '{agent_name}'; set one with UpdateWorkspace (system_provider)",
                    workspace.name
                ),
            })
        })?;
    let provider = state
        .store
        .get_provider(workspace.id, provider_name.clone())
        .await?;
    let api_key = match state
        .store
        .provider_api_key(workspace.id, provider_name.clone())
        .await?
    {
        None => None,
        Some(ProviderKey::Secret(key)) => Some(key),
        Some(ProviderKey::Reference(reference)) => Some(
            crate::secrets::resolve(&reference, &state.key_references)
                .await
                .map_err(|e| {
                    ServiceError::Precondition(format!("provider '{provider_name}': {e}"))
                })?,
        ),
    };
    Ok((provider, api_key))
}

/// Who the processes of an agent on `workspace` run as; refused when they
/// cannot run (no chorus-tools, no tool-exec, no sandbox on this host).
fn process_identity(
    state: &AppState,
    workspace: &Workspace,
) -> Result<chorus_sandbox::Identity, ServiceError> {
    let runner = &state.runner;
    runner
        .config()
        .validate()
        .map_err(ServiceError::Precondition)?;
    if state.addresses.tool_exec.is_empty() {
        return Err(ServiceError::Precondition(
            "no tool-exec is configured, so a CLI agent could not use its tools; run the orchestrator with its embedded tool-exec or --tool-exec-addr".to_owned(),
        ));
    }
    let processes = runner.processes();
    if processes.status().state == "unavailable" {
        return Err(ServiceError::Precondition(format!(
            "CLI agents run only in the sandbox, which is unavailable on this host ({}); fix that, or run the orchestrator with --sandbox off to run them unconfined",
            processes.status().problems.join("; ")
        )));
    }
    processes
        .identity_for(&workspace.root)
        .map_err(|e| ServiceError::Precondition(e.to_string()))
}
