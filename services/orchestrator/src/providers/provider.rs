//! The provider interface: what a kind of provider does for a run. One
//! implementation per kind, chosen once ([`for_kind`]); the runner calls it
//! and never asks which kind it has.
//!
//! - CLI providers (Claude Code, OpenCode) implement [`CliProvider`] — the
//!   program, its command for an attempt, the reader of its output — and
//!   share one attempt path ([`Cli`]): the command in the run sandbox, its
//!   output read line by line into progress, its exit into the attempt's end.
//! - The OpenAI-compatible provider runs the model's tool loop in this
//!   process ([`OpenaiCompatible`], `providers::openai`).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use chorus_auth::tls::ClientTls;
use tokio::sync::mpsc;
use tracing::info;

use super::cli::CliSetup;
use super::prompt::Invocation;
use super::{Attempt, AttemptEnd, AttemptError, Progress, RunContext};
use crate::domain::{ProviderKind, Run, ToolTransport};
use crate::execution::process::{CliCommand, CliEnd, CliExit, run_cli};
use crate::execution::tools::ToolRouter;
use crate::execution::{Facilities, RunnerConfig};
use crate::state::AppState;

/// A future a provider returns (the interface is used as a trait object).
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an attempt may use besides its run.
#[derive(Clone, Copy)]
pub struct AttemptEnv<'a> {
    pub state: &'a AppState,
    /// What runs are carried out with.
    pub facilities: &'a Facilities,
    /// Where the agent's progress goes, as it happens.
    pub progress: &'a mpsc::UnboundedSender<Progress>,
}

/// What a kind of provider does for a run.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Its name in logs and failure reasons (`claude`, `opencode`, ...).
    fn name(&self) -> &'static str;

    /// Whether its agents run as processes Chorus starts (in the run sandbox,
    /// as the workspace's user, reaching the services through chorus-tools).
    fn spawns_processes(&self) -> bool;

    /// How its agents call Chorus's tools over `transport`; `chorus_tools`
    /// is the program of the shell form.
    fn invocation<'a>(&self, transport: ToolTransport, chorus_tools: &'a str) -> Invocation<'a>;

    /// The hosts its agent's process reaches when the provider names no base
    /// URL (none for a provider whose process is this one).
    fn default_hosts(&self, model: Option<&str>) -> Vec<&'static str>;

    /// A file the run directory holds for it: (name, content).
    fn run_file(&self, ctx: &RunContext) -> Option<(&'static str, Vec<u8>)> {
        let _ = ctx;
        None
    }

    /// What its agent is told when work is handed to it: Chorus's message
    /// (`composed`: who hands it what, and to report), or, for an agent
    /// that knows nothing of Chorus, the `prompt` alone.
    fn handoff_message(&self, composed: String, prompt: &str) -> String {
        let _ = prompt;
        composed
    }

    /// The session a second attempt continues, given the session the first
    /// named; None: it cannot be continued.
    fn continue_session(&self, ctx: &RunContext, named: Option<&str>) -> Option<String>;

    /// The session that resumes `run` here, taken over from a replica that is
    /// gone; None (with the reason logged) when it cannot be resumed here.
    fn resumable<'a>(&'a self, state: &'a AppState, run: &'a Run) -> Answer<'a, Option<String>>;

    /// One attempt of a run.
    fn attempt<'a>(
        &'a self,
        env: AttemptEnv<'a>,
        ctx: &'a RunContext,
        attempt: &'a Attempt,
    ) -> Answer<'a, Result<AttemptEnd, AttemptError>>;
}

/// The implementation of `kind`: the one place a provider kind is matched.
pub fn for_kind(kind: ProviderKind) -> &'static dyn Provider {
    match kind {
        ProviderKind::ClaudeCode => &Cli(super::claude::Claude),
        ProviderKind::Opencode => &Cli(super::opencode::Opencode),
        ProviderKind::OpenaiCompatible => &OpenaiCompatible,
        ProviderKind::A2a => &A2aRemote,
    }
}

/// A CLI agent: its program, its command for an attempt, and how to read
/// what it prints.
pub trait CliProvider: Send + Sync + std::fmt::Debug + 'static {
    /// The program's name in logs and failure reasons.
    const NAME: &'static str;
    /// The reader of one attempt's output.
    type Output: CliOutput + Default + Send;

    /// The program, as configured.
    fn program(config: &RunnerConfig) -> &Path;

    /// The command of one attempt.
    fn command(setup: &CliSetup, ctx: &RunContext, attempt: &Attempt) -> CliCommand;

    /// The hosts it reaches when the provider names no base URL.
    fn default_hosts(model: Option<&str>) -> Vec<&'static str>;

    /// A file the run directory holds for it.
    fn run_file(ctx: &RunContext) -> Option<(&'static str, Vec<u8>)> {
        let _ = ctx;
        None
    }
}

/// The reader of a CLI's output, line by line.
pub trait CliOutput {
    /// Reads one line; what it shows the agent doing.
    fn line(&mut self, line: &str) -> Vec<Progress>;
    /// The output ended (the CLI exited or was stopped): what it showed and
    /// was not yet reported (a model call cut off mid-message).
    fn finish(&mut self) -> Vec<Progress> {
        Vec::new()
    }
    /// What the attempt produced, and the error the CLI reported, if any.
    fn end(self) -> (AttemptEnd, Option<String>);
}

/// A CLI provider as a [`Provider`].
#[derive(Debug)]
pub struct Cli<P>(pub P);

impl<P: CliProvider> Provider for Cli<P> {
    fn name(&self) -> &'static str {
        P::NAME
    }

    fn spawns_processes(&self) -> bool {
        true
    }

    fn invocation<'a>(&self, transport: ToolTransport, chorus_tools: &'a str) -> Invocation<'a> {
        match transport {
            ToolTransport::Mcp => Invocation::Functions,
            ToolTransport::Shell => Invocation::Cli(chorus_tools),
        }
    }

    fn default_hosts(&self, model: Option<&str>) -> Vec<&'static str> {
        P::default_hosts(model)
    }

    fn run_file(&self, ctx: &RunContext) -> Option<(&'static str, Vec<u8>)> {
        P::run_file(ctx)
    }

    fn continue_session(&self, _ctx: &RunContext, named: Option<&str>) -> Option<String> {
        named.map(str::to_owned)
    }

    fn resumable<'a>(&'a self, state: &'a AppState, run: &'a Run) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let session = run.session_id.clone()?;
            let home = crate::execution::home_dir(
                &state.runner.config().runs_dir.join(run.id.to_string()),
            );
            if !home.is_dir() {
                info!(run_id = %run.id, home = %home.display(), "a CLI run of a replica that is gone cannot be resumed here: its session's files are not in this replica's runs directory (share --runs-dir between replicas to resume CLI runs)");
                return None;
            }
            Some(session)
        })
    }

    fn attempt<'a>(
        &'a self,
        env: AttemptEnv<'a>,
        ctx: &'a RunContext,
        attempt: &'a Attempt,
    ) -> Answer<'a, Result<AttemptEnd, AttemptError>> {
        Box::pin(async move {
            let config = env.facilities.config();
            let setup = CliSetup::new(env.facilities, P::program(config));
            let command = P::command(&setup, ctx, attempt);
            let mut output = P::Output::default();
            let exit = run_cli(
                env.facilities.processes(),
                &command,
                &ctx.clock,
                ctx.timeout,
                config.kill_grace,
                &ctx.stop,
                &mut |line: &str| {
                    for p in output.line(line) {
                        let _ = env.progress.send(p);
                    }
                },
            )
            .await;
            for p in output.finish() {
                let _ = env.progress.send(p);
            }
            let (end, error) = output.end();
            cli_result(P::NAME, exit, end, error)
        })
    }
}

/// Turns a CLI's exit into the attempt's result.
fn cli_result(
    program: &str,
    exit: Result<CliExit, String>,
    end: AttemptEnd,
    stream_error: Option<String>,
) -> Result<AttemptEnd, AttemptError> {
    let exit = match exit {
        Ok(exit) => exit,
        Err(reason) => {
            return Err(AttemptError::Failed {
                reason,
                partial: end,
            });
        }
    };
    match &exit.ending {
        CliEnd::Exited(0) => match stream_error {
            None => Ok(end),
            Some(error) => Err(AttemptError::Failed {
                reason: format!("{program} reported an error: {error}"),
                partial: end,
            }),
        },
        CliEnd::Exited(_) | CliEnd::Signaled(_) => {
            let mut reason = exit.describe(program);
            if let Some(error) = stream_error {
                reason = format!("{reason}\n{program} reported: {error}");
            }
            Err(AttemptError::Failed {
                reason,
                partial: end,
            })
        }
        CliEnd::TimedOut(_) => Err(AttemptError::TimedOut {
            reason: exit.describe(program),
            partial: end,
        }),
        CliEnd::Stopped => Err(AttemptError::Stopped { partial: end }),
        CliEnd::Fenced(_) => Err(AttemptError::Fenced {
            reason: exit.describe(program),
            partial: end,
        }),
    }
}

/// An agent on an OpenAI-compatible chat-completions API: its tool loop runs
/// here, its calls go to the services with the run's token.
#[derive(Debug)]
pub struct OpenaiCompatible;

impl Provider for OpenaiCompatible {
    fn name(&self) -> &'static str {
        "openai-compatible"
    }

    fn spawns_processes(&self) -> bool {
        false
    }

    /// The model calls its tools as functions whatever the transport (a
    /// provider of this kind refuses the shell form).
    fn invocation<'a>(&self, _transport: ToolTransport, _chorus_tools: &'a str) -> Invocation<'a> {
        Invocation::Functions
    }

    fn default_hosts(&self, _model: Option<&str>) -> Vec<&'static str> {
        Vec::new()
    }

    /// The conversation is the run's stored messages: the run continues it.
    fn continue_session(&self, ctx: &RunContext, _named: Option<&str>) -> Option<String> {
        Some(ctx.run_id.to_string())
    }

    fn resumable<'a>(&'a self, state: &'a AppState, run: &'a Run) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let stored = state.store.run_messages(run.id).await.ok()?;
            (!stored.is_empty()).then(|| run.id.to_string())
        })
    }

    fn attempt<'a>(
        &'a self,
        env: AttemptEnv<'a>,
        ctx: &'a RunContext,
        attempt: &'a Attempt,
    ) -> Answer<'a, Result<AttemptEnd, AttemptError>> {
        Box::pin(async move {
            let config = env.facilities.config();
            let tls = ClientTls {
                ca: config.tls_ca.clone(),
                ..ClientTls::default()
            };
            let router = ToolRouter::new(&ctx.tools_addr, &ctx.orchestrator_addr, &ctx.token, &tls)
                .map_err(|reason| AttemptError::Failed {
                    reason,
                    partial: AttemptEnd::default(),
                })?;
            super::openai::attempt(
                env.facilities.http(),
                &config.api,
                env.state,
                &router,
                ctx,
                attempt,
                &mut |p| {
                    let _ = env.progress.send(p);
                },
            )
            .await
        })
    }
}

/// A remote A2A agent: the run follows its task over A2A, in this process
/// (`providers::a2a`).
#[derive(Debug)]
pub struct A2aRemote;

impl Provider for A2aRemote {
    fn name(&self) -> &'static str {
        "a2a"
    }

    fn spawns_processes(&self) -> bool {
        false
    }

    /// It calls no Chorus tool (its report is made for it).
    fn invocation<'a>(&self, _transport: ToolTransport, _chorus_tools: &'a str) -> Invocation<'a> {
        Invocation::Functions
    }

    fn default_hosts(&self, _model: Option<&str>) -> Vec<&'static str> {
        Vec::new()
    }

    /// A remote agent knows nothing of Chorus's reports: it is told the work.
    fn handoff_message(&self, _composed: String, prompt: &str) -> String {
        prompt.to_owned()
    }

    /// A second attempt follows the same remote task.
    fn continue_session(&self, _ctx: &RunContext, named: Option<&str>) -> Option<String> {
        named.map(str::to_owned)
    }

    /// The remote task goes on without this replica: the new driver
    /// subscribes to it again.
    fn resumable<'a>(&'a self, _state: &'a AppState, run: &'a Run) -> Answer<'a, Option<String>> {
        Box::pin(async move { run.session_id.clone() })
    }

    fn attempt<'a>(
        &'a self,
        env: AttemptEnv<'a>,
        ctx: &'a RunContext,
        attempt: &'a Attempt,
    ) -> Answer<'a, Result<AttemptEnd, AttemptError>> {
        Box::pin(super::a2a::attempt(env, ctx, attempt))
    }
}
