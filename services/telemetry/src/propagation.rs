//! W3C trace context (`traceparent`, `tracestate`) in gRPC metadata, in the
//! `TRACEPARENT` variable of agent processes and in the database.
//!
//! Only W3C trace context is spoken, so the propagator is used directly rather
//! than through the global one (which a process that never set up telemetry,
//! such as a test, leaves as a no-op).

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The variable that carries trace context into a process.
pub const TRACEPARENT: &str = "TRACEPARENT";
/// Its companion with vendor state.
pub const TRACESTATE: &str = "TRACESTATE";

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The context a request's headers carry (empty when they carry none).
pub fn extract(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes `context` into request headers.
pub fn inject(context: &opentelemetry::Context, headers: &mut http::HeaderMap) {
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(context, &mut HeaderInjector(headers));
    }
}

/// The `traceparent` (and `tracestate`, if any) of `span`, for a process's
/// environment or the database; None for a span without a valid context.
pub fn carrier(span: &tracing::Span) -> Option<HashMap<String, String>> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.retain(|_, v| !v.is_empty());
    carrier.contains_key("traceparent").then_some(carrier)
}

/// The `traceparent` of `span`.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    carrier(span).and_then(|mut c| c.remove("traceparent"))
}

/// The environment that continues `span`'s trace in a child process:
/// `TRACEPARENT` and, when there is state, `TRACESTATE`.
pub fn env_of(span: &tracing::Span) -> Vec<(String, String)> {
    carrier(span)
        .map(|carrier| {
            let mut env = Vec::new();
            if let Some(parent) = carrier.get("traceparent") {
                env.push((TRACEPARENT.to_owned(), parent.clone()));
            }
            if let Some(state) = carrier.get("tracestate") {
                env.push((TRACESTATE.to_owned(), state.clone()));
            }
            env
        })
        .unwrap_or_default()
}

/// The context a `traceparent` (and optional `tracestate`) names; empty when
/// the text is not a valid traceparent.
pub fn context_of(traceparent: &str, tracestate: Option<&str>) -> opentelemetry::Context {
    let mut carrier = HashMap::from([("traceparent".to_owned(), traceparent.trim().to_owned())]);
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.trim().to_owned());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The context this process was started in (`TRACEPARENT`/`TRACESTATE`), if any.
pub fn context_from_env() -> Option<opentelemetry::Context> {
    let parent = std::env::var(TRACEPARENT).ok()?;
    let context = context_of(&parent, std::env::var(TRACESTATE).ok().as_deref());
    context.span().span_context().is_valid().then_some(context)
}

/// [`context_from_env`], read once.
pub fn started_in() -> Option<&'static opentelemetry::Context> {
    static STARTED_IN: std::sync::OnceLock<Option<opentelemetry::Context>> =
        std::sync::OnceLock::new();
    STARTED_IN.get_or_init(context_from_env).as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_goes_into_headers_and_comes_back() {
        let context = context_of(PARENT, Some("vendor=1"));
        assert!(context.span().span_context().is_valid());
        let mut headers = http::HeaderMap::new();
        inject(&context, &mut headers);
        assert_eq!(headers["traceparent"], PARENT);
        assert_eq!(headers["tracestate"], "vendor=1");
        let back = extract(&headers);
        assert_eq!(
            back.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }

    #[test]
    fn nonsense_is_no_context_and_injects_nothing() {
        let context = context_of("00-not-a-parent", None);
        assert!(!context.span().span_context().is_valid());
        let mut headers = http::HeaderMap::new();
        inject(&context, &mut headers);
        assert!(headers.is_empty());
        assert!(!extract(&headers).span().span_context().is_valid());
    }
}
