//! A run's span: the piece of its task's trace that the run's work — its agent
//! process (through `TRACEPARENT`), model requests, tool calls and handoffs —
//! hangs under, and the run metrics.

use chorus_telemetry::propagation;
use opentelemetry::KeyValue;
use opentelemetry::trace::TraceContextExt as _;
use tracing::{Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::domain::{AgentKind, Run, Usage};
use crate::providers::RunContext;
use crate::state::AppState;

/// The span of the run `ctx` describes. A handoff child continues the Handoff
/// call it was started by (`caller`); any other run continues its task's
/// trace, linked to the call that started it.
pub async fn run_span(state: &AppState, ctx: &RunContext, child: bool, caller: &Span) -> Span {
    let name = match ctx.agent_kind {
        AgentKind::Internal => format!("planning {}", ctx.agent),
        AgentKind::UserDefined => format!("run {}", ctx.agent),
    };
    let span = info_span!(
        parent: None,
        "run",
        otel.name = %name,
        chorus.task_id = %ctx.task_id,
        chorus.run_id = %ctx.run_id,
        chorus.agent = %ctx.agent,
        chorus.provider = %ctx.provider.name,
        gen_ai.agent.name = %ctx.agent,
        chorus.end = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    let caller_context = caller.context();
    let task_context = if child {
        None
    } else {
        match state.store.task_trace_context(ctx.task_id).await {
            Ok(Some(parent)) => Some(propagation::context_of(&parent, None)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(task_id = %ctx.task_id, error = %e, "cannot read the task's trace context");
                None
            }
        }
    };
    match task_context.filter(|c| c.span().span_context().is_valid()) {
        Some(task) => {
            let _ = span.set_parent(task);
            let caller = caller_context.span().span_context().clone();
            if caller.is_valid() {
                span.add_link(caller);
            }
        }
        None => {
            let _ = span.set_parent(caller_context);
        }
    }
    let attributes = run_attributes(ctx);
    chorus_telemetry::metrics().runs_started.add(1, &attributes);
    chorus_telemetry::metrics().runs_active.add(1, &[]);
    span
}

fn run_attributes(ctx: &RunContext) -> [KeyValue; 2] {
    [
        KeyValue::new("chorus.agent", ctx.agent.to_string()),
        KeyValue::new("gen_ai.provider.name", ctx.provider.name.to_string()),
    ]
}

/// Marks the end of a run on its span and in the metrics: `end` is how it
/// ended (`completed`, `failed`, `canceled`, ...), `run` its stored state.
pub fn ended(span: &Span, ctx: &RunContext, end: &str, run: Option<&Run>) {
    span.record("chorus.end", end);
    if end != "completed" {
        span.record("otel.status_code", "ERROR");
        if let Some(reason) = run.and_then(|r| r.end_reason.as_deref()) {
            span.record("otel.status_description", reason);
        }
    }
    let metrics = chorus_telemetry::metrics();
    metrics.runs_active.add(-1, &[]);
    let [agent, provider] = run_attributes(ctx);
    metrics.runs_ended.add(
        1,
        &[agent.clone(), KeyValue::new("chorus.end", end.to_owned())],
    );
    if let Some(run) = run {
        if run.handoff_index.is_some()
            && let Some(finished) = run.finished_ms
        {
            // A handoff lasts as long as the run it started.
            #[allow(clippy::cast_precision_loss)]
            let seconds = (finished - run.started_ms).max(0) as f64 / 1000.0;
            metrics.handoff_duration.record(
                seconds,
                &[agent.clone(), KeyValue::new("chorus.end", end.to_owned())],
            );
        }
        usage(&run.usage, agent, provider, ctx.model.as_deref());
    }
}

/// A run's usage, as the GenAI token metric and the cost counter.
fn usage(usage: &Usage, agent: KeyValue, provider: KeyValue, model: Option<&str>) {
    let metrics = chorus_telemetry::metrics();
    let mut attributes = vec![agent, provider];
    if let Some(model) = model {
        attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
    }
    for (kind, tokens) in [
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
    ] {
        if tokens > 0 {
            let mut attributes = attributes.clone();
            attributes.push(KeyValue::new("gen_ai.token.type", kind));
            metrics.tokens.record(tokens, &attributes);
        }
    }
    if usage.cost_pico_usd > 0 {
        metrics
            .cost
            .add(crate::domain::usd(usage.cost()), &attributes);
    }
}
