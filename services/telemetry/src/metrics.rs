//! The instruments every Chorus process records into. They come from the global
//! meter provider the first time [`metrics`] is called, so call [`crate::init`]
//! first; without it (tests) they record nowhere.

use std::sync::OnceLock;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge, UpDownCounter};

/// Seconds, the unit of every duration.
const SECONDS: &str = "s";

/// Bucket bounds (seconds) for calls and runs, from 1 ms to 1 h.
const DURATION_BOUNDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 600.0,
    3600.0,
];

/// Bucket bounds for token counts (the GenAI conventions' advice).
const TOKEN_BOUNDS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

#[derive(Debug)]
pub struct Metrics {
    meter: Meter,
    /// `rpc.server.call.duration`: every RPC served, by service, method and code.
    pub rpc_duration: Histogram<f64>,
    /// `chorus.runs.started`, by agent and provider.
    pub runs_started: Counter<u64>,
    /// `chorus.runs.active`.
    pub runs_active: UpDownCounter<i64>,
    /// `chorus.runs.ended`, by agent and reason.
    pub runs_ended: Counter<u64>,
    /// `chorus.tool.calls`, by tool and outcome.
    pub tool_calls: Counter<u64>,
    /// `chorus.tool.duration`, by tool and outcome.
    pub tool_duration: Histogram<f64>,
    /// `chorus.handoff.duration`, by target agent and outcome.
    pub handoff_duration: Histogram<f64>,
    /// `gen_ai.client.token.usage`, by token type, provider, model and agent.
    pub tokens: Histogram<u64>,
    /// `chorus.model.cost`: US dollars a provider reported, by provider and agent.
    pub cost: Counter<f64>,
    /// `chorus.events.appended`, by kind.
    pub events_appended: Counter<u64>,
    /// `chorus.budget.events`: budget warnings and stops, by event
    /// (`warning`, `exceeded`) and the limit (`cost_usd`, `tokens`,
    /// `tool_calls`, `workspace_daily_cost_usd`, `workspace_monthly_cost_usd`).
    pub budget_events: Counter<u64>,
    /// `chorus.approval.wait`: how long calls waited for approval, by
    /// outcome (approved, approved_for_task, denied, expired, canceled, error).
    pub approval_wait: Histogram<f64>,
    /// `chorus.watchers`: WatchTask streams open.
    pub watchers: UpDownCounter<i64>,
    /// `chorus.refusals`: calls and connections refused or cut for a limit or
    /// a credential, by reason and kind of caller (see [`Metrics::refused`]).
    pub refusals: Counter<u64>,
    /// `chorus.connections.open`: connections a server holds now.
    pub connections: UpDownCounter<i64>,
}

impl Metrics {
    fn new(meter: Meter) -> Self {
        Self {
            rpc_duration: meter
                .f64_histogram("rpc.server.call.duration")
                .with_unit(SECONDS)
                .with_description("Duration of RPCs served, streams until their end")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            runs_started: meter
                .u64_counter("chorus.runs.started")
                .with_description("Agent runs started")
                .build(),
            runs_active: meter
                .i64_up_down_counter("chorus.runs.active")
                .with_description("Agent runs running now")
                .build(),
            runs_ended: meter
                .u64_counter("chorus.runs.ended")
                .with_description("Agent runs ended, by reason")
                .build(),
            tool_calls: meter
                .u64_counter("chorus.tool.calls")
                .with_description("Tool calls, by tool and outcome")
                .build(),
            tool_duration: meter
                .f64_histogram("chorus.tool.duration")
                .with_unit(SECONDS)
                .with_description("Duration of tool calls")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            handoff_duration: meter
                .f64_histogram("chorus.handoff.duration")
                .with_unit(SECONDS)
                .with_description("Duration of handoffs, from the call to the child's end")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used by model requests")
                .with_boundaries(TOKEN_BOUNDS.to_vec())
                .build(),
            cost: meter
                .f64_counter("chorus.model.cost")
                .with_unit("USD")
                .with_description("Model cost providers reported")
                .build(),
            events_appended: meter
                .u64_counter("chorus.events.appended")
                .with_description("Task history events appended")
                .build(),
            budget_events: meter
                .u64_counter("chorus.budget.events")
                .with_description("Budget warnings (80 % of a limit) and stops (a limit reached)")
                .build(),
            approval_wait: meter
                .f64_histogram("chorus.approval.wait")
                .with_unit(SECONDS)
                .with_description("How long calls waited for approval, by outcome")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            watchers: meter
                .i64_up_down_counter("chorus.watchers")
                .with_description("WatchTask streams open")
                .build(),
            refusals: meter
                .u64_counter("chorus.refusals")
                .with_description("Calls and connections refused or cut, by reason and caller")
                .build(),
            connections: meter
                .i64_up_down_counter("chorus.connections.open")
                .with_description("Connections held by the server")
                .build(),
            meter,
        }
    }

    /// The meter, for instruments a service observes itself (database pool use).
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// One refusal: `reason` names the limit or the check (`unauthenticated`,
    /// `credential-calls`, `handshake-timeout`, …), `caller` the kind of
    /// caller (`agent`, `key`, `anonymous`, `connection`) and `credential`
    /// the API key's id when there is one (runs are not named: there are too
    /// many).
    pub fn refused(&self, reason: &'static str, caller: &'static str, credential: Option<&str>) {
        let mut attributes = vec![
            KeyValue::new("chorus.reason", reason),
            KeyValue::new("chorus.caller", caller),
        ];
        if let Some(credential) = credential {
            attributes.push(KeyValue::new("chorus.credential", credential.to_owned()));
        }
        self.refusals.add(1, &attributes);
    }

    /// `chorus.sandbox`: 1, with how the sandbox of this process is (`state`:
    /// enforced, off or unavailable; `tier`: namespaces or landlock when
    /// enforced), for as long as the returned gauge is kept.
    pub fn sandbox(&self, state: &'static str, tier: &'static str) -> ObservableGauge<i64> {
        self.meter
            .i64_observable_gauge("chorus.sandbox")
            .with_description("The run sandbox of this process: 1, by state and tier")
            .with_callback(move |observer| {
                observer.observe(
                    1,
                    &[
                        KeyValue::new("chorus.sandbox.state", state),
                        KeyValue::new("chorus.sandbox.tier", tier),
                    ],
                );
            })
            .build()
    }

    /// One tool call: counted and timed.
    pub fn tool_call(&self, tool: &str, outcome: &str, seconds: f64) {
        let attributes = [
            KeyValue::new("chorus.tool", tool.to_owned()),
            KeyValue::new("chorus.outcome", outcome.to_owned()),
        ];
        self.tool_calls.add(1, &attributes);
        self.tool_duration.record(seconds, &attributes);
    }

    /// A call's wait for approval ended with `outcome` after `seconds`.
    pub fn approval(&self, outcome: &str, seconds: f64) {
        self.approval_wait.record(
            seconds,
            &[KeyValue::new("chorus.outcome", outcome.to_owned())],
        );
    }
}

/// The process's instruments.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics::new(opentelemetry::global::meter("chorus")))
}
