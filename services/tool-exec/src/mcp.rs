//! The MCP face of tool-exec: a run's tools over Streamable HTTP, for MCP
//! clients Chorus did not start, each request with its run token as bearer.
//! Workspace tools take the same path as ExecuteTool ([`ToolCalls`]);
//! orchestration tools go to the orchestrator through the gate, as an
//! agent's own call would. A session stays with the run that opened it
//! ([`chorus_mcp::streamable`]).

use std::sync::Arc;

use chorus_catalog::{Executor, ToolSpec};
use chorus_mcp::streamable::{Admits, Limits, McpHttp};
use chorus_mcp::{Caller, Progress, Ran, Refused, RunTools, Why};
use chorus_proto::orchestrator::v1::HandoffProgress;
use chorus_run_token::{RunGrant, RunTokenVerifier};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::calls::ToolCalls;
use crate::context::ToolOutcome;
use crate::error::ToolError;
use crate::gate::RunGate;

/// The HTTP service of tool-exec's MCP face.
pub fn service(
    calls: ToolCalls,
    gate: Option<Arc<dyn RunGate>>,
    verifier: RunTokenVerifier,
    limits: &Limits,
    stop: CancellationToken,
) -> McpHttp<SessionTools> {
    let admits: Admits = Arc::new(move |token: &str| {
        verifier
            .verify(token)
            .map(|grant| format!("run {}", grant.run_id))
            .map_err(|e| e.to_string())
    });
    McpHttp::new(
        move || SessionTools {
            calls: calls.clone(),
            gate: gate.clone(),
        },
        admits,
        limits,
        stop,
    )
}

/// The tools of one MCP session (the face keeps a session to the run that
/// opened it).
pub struct SessionTools {
    calls: ToolCalls,
    gate: Option<Arc<dyn RunGate>>,
}

impl SessionTools {
    /// The token of `caller` and its verified grant.
    fn token(&self, caller: &Caller) -> Result<(String, RunGrant), Refused> {
        let Some(token) = caller.bearer.clone() else {
            return Err(Refused {
                why: Why::Unauthenticated,
                code: "unauthenticated".to_owned(),
                message: "no run token: send it as Authorization: Bearer <token>".to_owned(),
            });
        };
        let grant = self.calls.verify(&token).map_err(refused)?;
        Ok((token, grant))
    }

    async fn orchestration(
        &self,
        token: &str,
        tool: &'static ToolSpec,
        arguments: Map<String, Value>,
        progress: Progress,
    ) -> Result<ToolOutcome, ToolError> {
        let Some(gate) = &self.gate else {
            return Err(ToolError::FailedPrecondition(format!(
                "{} is the orchestrator's tool, and this tool-exec runs without one (--standalone)",
                tool.name
            )));
        };
        // A handoff's progress comes as it happens; the client hears of it
        // while the call goes on.
        progress
            .relay(|said| async move {
                let mut on_progress = move |p: &HandoffProgress| {
                    let data = p.data.clone().map(chorus_proto::json::from_struct);
                    let _ = said.send(chorus_mcp::progress_line(
                        &p.kind,
                        &data.unwrap_or_default(),
                    ));
                };
                gate.call_orchestration(token, tool.name, arguments, &mut on_progress)
                    .await
            })
            .await
    }
}

impl RunTools for SessionTools {
    async fn granted(&self, caller: &Caller) -> Result<Vec<String>, Refused> {
        // Checked as a call is (the run still active), but not recorded:
        // listing the tools is not calling one.
        let (token, grant) = self.token(caller)?;
        self.calls.still_active(&token).await.map_err(refused)?;
        Ok(chorus_catalog::granted_names(&grant.tools)
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    async fn call(
        &self,
        caller: &Caller,
        tool: &'static ToolSpec,
        arguments: Map<String, Value>,
        progress: Progress,
    ) -> Result<Ran, Refused> {
        let (token, grant) = self.token(caller)?;
        let outcome = match tool.executor {
            Executor::Orchestrator => self.orchestration(&token, tool, arguments, progress).await,
            Executor::ToolExec | Executor::AgentCli => {
                self.calls
                    .call(token, grant, tool.name.to_owned(), Value::Object(arguments))
                    .await
            }
        }
        .map_err(refused)?;
        Ok(Ran {
            output: outcome.output,
            error: outcome.error.map(|e| chorus_mcp::ToolError {
                code: e.code,
                message: e.message,
            }),
            metadata: outcome.metadata,
        })
    }
}

/// A call the services did not run, by its status code: a refusal the model
/// can act on (`isError`), or one that ends what the session can do.
fn refused(error: ToolError) -> Refused {
    let code = error.code();
    let why = match code {
        Code::Unauthenticated => Why::Unauthenticated,
        Code::InvalidArgument => Why::Invalid,
        Code::Unavailable | Code::Internal | Code::Unknown | Code::ResourceExhausted => {
            Why::Unavailable
        }
        _ => Why::Denied,
    };
    Refused {
        why,
        code: chorus_proto::code_name(code).to_owned(),
        message: error.to_string(),
    }
}

/// The flags of the MCP endpoint (tool-exec's, and the orchestrator's for
/// its embedded tool-exec).
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Serve the run's tools over MCP (Streamable HTTP, at /mcp) on this
    /// address, for MCP clients Chorus did not start; each request carries
    /// its run token as bearer. Off when not given: the agents Chorus starts
    /// use `chorus-tools mcp` over stdio.
    #[arg(long, env = "CHORUS_MCP_LISTEN")]
    pub mcp_listen: Option<std::net::SocketAddr>,
    /// A Host header the MCP endpoint accepts (host or host:port; repeat the
    /// flag or separate by commas). Loopback names only when none is given:
    /// name the host clients use when it is not.
    #[arg(long, env = "CHORUS_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_host: Vec<String>,
    /// A browser Origin the MCP endpoint accepts (scheme://host:port; repeat
    /// or separate by commas). A request with any other Origin is refused;
    /// requests without one (non-browser clients) are not affected.
    #[arg(long, env = "CHORUS_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub mcp_allowed_origin: Vec<String>,
    /// MCP sessions open at once, at most; past it a new session is refused
    /// (503, Retry-After) until one ends.
    #[arg(long, env = "CHORUS_MCP_MAX_SESSIONS", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub mcp_max_sessions: u64,
    /// An MCP session unused for this many seconds is closed.
    #[arg(long, env = "CHORUS_MCP_IDLE_SECS", default_value_t = Limits::default().idle.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub mcp_idle_secs: u64,
}

impl McpArgs {
    /// The endpoint these flags ask for, its listener bound now; None when
    /// it is off. Requests are bounded as gRPC messages are
    /// (`max_request_bytes`).
    pub fn bind(&self, max_request_bytes: usize) -> std::io::Result<Option<McpFace>> {
        let Some(addr) = self.mcp_listen else {
            return Ok(None);
        };
        let listener = std::net::TcpListener::bind(addr)?;
        Ok(Some(McpFace {
            listener: Arc::new(listener),
            limits: Limits {
                max_sessions: usize::try_from(self.mcp_max_sessions).unwrap_or(usize::MAX),
                idle: std::time::Duration::from_secs(self.mcp_idle_secs),
                max_request_bytes,
                allowed_hosts: self.mcp_allowed_host.clone(),
                allowed_origins: self.mcp_allowed_origin.clone(),
            },
        }))
    }
}

/// The MCP endpoint of a tool-exec: its listener, bound, and its limits.
#[derive(Debug, Clone)]
pub struct McpFace {
    pub listener: Arc<std::net::TcpListener>,
    pub limits: Limits,
}

impl McpFace {
    /// The endpoint's URL on its listener's address (`https` with TLS).
    pub fn url(&self, tls: bool) -> std::io::Result<String> {
        let addr = self.listener.local_addr()?;
        let scheme = if tls { "https" } else { "http" };
        Ok(format!("{scheme}://{addr}{}", chorus_mcp::streamable::PATH))
    }
}

/// Serves the MCP endpoint of `face` until `stop` fires.
pub async fn serve(
    face: McpFace,
    calls: ToolCalls,
    gate: Option<Arc<dyn RunGate>>,
    verifier: RunTokenVerifier,
    tls: Option<chorus_auth::tls::ServerTls>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let listener = face.listener.try_clone()?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let tls = tls
        .as_ref()
        .map(chorus_serve::http::rustls_config)
        .transpose()?;
    let mcp = service(calls, gate, verifier, &face.limits, stop.clone());
    // A connection that has had an answer past the run token's check is a
    // run's: it is not the first closed when the endpoint needs room.
    let http = tower::service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let standing = request
            .extensions()
            .get::<chorus_serve::http::Standing>()
            .cloned();
        let mut mcp = mcp.clone();
        async move {
            let answer = tower::Service::call(&mut mcp, request).await?;
            if answer.status().is_success()
                && let Some(standing) = standing
            {
                standing.prove();
            }
            Ok::<_, std::convert::Infallible>(answer)
        }
    });
    // A session's client holds a connection or two (its requests, its
    // stream); a few more for requests of no session (refusals).
    let connections = face
        .limits
        .max_sessions
        .saturating_mul(2)
        .saturating_add(64);
    chorus_serve::http::serve(listener, http, tls, connections, "the MCP endpoint", stop).await;
    Ok(())
}
