//! An MCP client no one here wrote: the official TypeScript SDK
//! (`@modelcontextprotocol/sdk`), driven by `tests/mcp/client.mjs`.

use std::path::PathBuf;

use serde_json::Value;

/// The `node_modules` holding the MCP SDK (`CHORUS_TEST_NODE_MODULES`; `.ci/run`
/// installs it), for a test that needs it; `None` (with a notice) to skip it
/// when none is named, which fails instead under
/// `CHORUS_TEST_REQUIRE_REAL_CLIS=1`.
pub fn sdk_or_skip() -> Option<PathBuf> {
    let modules = std::env::var_os("CHORUS_TEST_NODE_MODULES")
        .map(PathBuf::from)
        .filter(|m| m.join("@modelcontextprotocol/sdk/package.json").exists());
    if modules.is_none() {
        assert!(
            !crate::fake_anthropic::require_real_clis(),
            "CHORUS_TEST_REQUIRE_REAL_CLIS=1 but CHORUS_TEST_NODE_MODULES names no node_modules \
             holding @modelcontextprotocol/sdk (.ci/run installs it: npm install --prefix DIR \
             @modelcontextprotocol/sdk@1.32.2)"
        );
        eprintln!(
            "skipped: set CHORUS_TEST_NODE_MODULES to a node_modules holding @modelcontextprotocol/sdk"
        );
    }
    modules
}

/// Runs the SDK client with `plan` (see `tests/mcp/client.mjs`); what it
/// printed.
pub async fn run_client(modules: &std::path::Path, plan: &Value) -> Value {
    run_client_with_env(modules, plan, &[]).await
}

/// [`run_client`] with `env` added to the client's environment (such as
/// `NODE_EXTRA_CA_CERTS`).
pub async fn run_client_with_env(
    modules: &std::path::Path,
    plan: &Value,
    env: &[(&str, &std::ffi::OsStr)],
) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/client.mjs");
    let output = tokio::process::Command::new("node")
        .arg(script)
        .envs(env.iter().copied())
        // Not an argument: what the plan holds stays out of process listings.
        .env("CHORUS_TEST_MCP_PLAN", plan.to_string())
        .env("CHORUS_TEST_NODE_MODULES", modules)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs (apt install nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK client failed: {}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "the SDK client printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The stdio transport of a plan: `chorus-tools mcp` for the run of `run`.
pub fn stdio(run: &chorus_proto::orchestrator::v1::OpenRunResponse) -> Value {
    serde_json::json!({"stdio": {
        "command": crate::chorus_tools_bin(),
        "args": ["mcp"],
        "env": {
            "PATH": std::env::var("PATH").unwrap_or_default(),
            "CHORUS_RUN_TOKEN": run.token,
            "CHORUS_TOOLS_ADDR": run.tools_addr,
            "CHORUS_ORCHESTRATOR_ADDR": run.orchestrator_addr,
        },
    }})
}

/// How the SDK client reaches a run's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `chorus-tools mcp`, started by the client.
    Stdio,
    /// tool-exec's Streamable HTTP endpoint (OpenRun's `mcp_url`), the run
    /// token as bearer.
    Http,
}

impl Transport {
    /// The plan's transport for the run of `run`.
    pub fn to(self, run: &chorus_proto::orchestrator::v1::OpenRunResponse) -> Value {
        match self {
            Self::Stdio => stdio(run),
            Self::Http => http(run),
        }
    }

    /// The plan's transport for the run of `run`, with no token.
    pub fn without_token(self, run: &chorus_proto::orchestrator::v1::OpenRunResponse) -> Value {
        let mut transport = self.to(run);
        match self {
            Self::Stdio => transport["stdio"]["env"]
                .as_object_mut()
                .map(|env| env.remove("CHORUS_RUN_TOKEN")),
            Self::Http => transport["http"]["headers"]
                .as_object_mut()
                .map(|headers| headers.remove("Authorization")),
        };
        transport
    }

    /// What an orchestrator started as a process needs to serve it.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Stdio => &[],
            Self::Http => &["--mcp-listen", "127.0.0.1:0"],
        }
    }

    /// Makes an in-process orchestrator's embedded tool-exec serve it.
    pub fn serve(self, config: &mut chorus_orchestrator::server::OrchestratorConfig) {
        if self == Self::Http
            && let Some(embedded) = config.embedded_tool_exec.as_mut()
        {
            embedded.mcp = Some(endpoint());
        }
    }
}

/// An MCP endpoint on a free loopback port, with the default limits.
pub fn endpoint() -> chorus_tool_exec::mcp::McpFace {
    chorus_tool_exec::mcp::McpFace {
        listener: std::sync::Arc::new(
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the MCP endpoint"),
        ),
        limits: chorus_mcp::streamable::Limits::default(),
    }
}

/// The Streamable HTTP transport of a plan: OpenRun's MCP endpoint, the run
/// token as bearer.
pub fn http(run: &chorus_proto::orchestrator::v1::OpenRunResponse) -> Value {
    assert!(
        !run.mcp_url.is_empty(),
        "OpenRun names no MCP endpoint: the orchestrator serves none (--mcp-listen)"
    );
    serde_json::json!({"http": {
        "url": run.mcp_url,
        "headers": {"Authorization": format!("Bearer {}", run.token)},
    }})
}

/// The text of a call's result (its first content block).
pub fn text(result: &Value) -> String {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether a call's result is an error for the model to read.
pub fn is_error(result: &Value) -> bool {
    result["result"]["isError"].as_bool() == Some(true)
}
