//! Log lines that carry the trace and span ids of the span they were written in,
//! so a log line leads to its trace and back.

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The standard text or JSON line, with `trace_id` and `span_id` added when the
/// event happened inside a span, and the process's instance (an orchestrator's
/// replica id) when it has one.
#[derive(Debug)]
pub struct WithTraceIds {
    kind: Kind,
    /// Written as `replica` on every line.
    instance: Option<String>,
}

#[derive(Debug)]
enum Kind {
    Text(Format),
    Json(Format<Json>),
}

impl WithTraceIds {
    pub fn text() -> Self {
        Self {
            kind: Kind::Text(Format::default()),
            instance: None,
        }
    }

    pub fn json() -> Self {
        Self {
            kind: Kind::Json(Format::default().json()),
            instance: None,
        }
    }

    /// Every line names `instance` as `replica`.
    #[must_use]
    pub fn with_instance(mut self, instance: Option<&str>) -> Self {
        self.instance = instance.map(str::to_owned);
        self
    }
}

/// The ids of the span active now (entered `tracing` spans activate theirs).
fn current_ids() -> Option<(String, String)> {
    let context = opentelemetry::Context::current();
    let span = context.span();
    let ids = span.span_context();
    ids.is_valid()
        .then(|| (ids.trace_id().to_string(), ids.span_id().to_string()))
}

impl<S, N> FormatEvent<S, N> for WithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let ids = current_ids();
        match &self.kind {
            Kind::Text(inner) => {
                if let Some(instance) = &self.instance {
                    write!(writer, "replica={instance} ")?;
                }
                if let Some((trace_id, span_id)) = &ids {
                    write!(writer, "trace_id={trace_id} span_id={span_id} ")?;
                }
                inner.format_event(ctx, writer, event)
            }
            Kind::Json(inner) => {
                let mut prefix = String::new();
                if let Some((trace_id, span_id)) = &ids {
                    prefix.push_str(&format!(
                        "\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\","
                    ));
                }
                if let Some(instance) = &self.instance {
                    prefix.push_str(&format!(
                        "\"replica\":{},",
                        serde_json::Value::String(instance.clone())
                    ));
                }
                if prefix.is_empty() {
                    return inner.format_event(ctx, writer, event);
                }
                // The JSON object, with the ids as its first fields.
                let mut line = String::new();
                inner.format_event(ctx, Writer::new(&mut line), event)?;
                match line.strip_prefix('{') {
                    Some(rest) => write!(writer, "{{{prefix}{rest}"),
                    None => writer.write_str(&line),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lines").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `format` writes for one event inside a span and one outside,
    /// with the span's trace id.
    fn written(format: WithTraceIds, json: bool) -> (String, String) {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let lines = Lines::default();
        let writer = lines.clone();
        let fmt = tracing_subscriber::fmt::layer().with_writer(move || writer.clone());
        let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let registry = tracing_subscriber::registry().with(otel);
        let trace_id = if json {
            let subscriber = registry.with(
                fmt.fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(format),
            );
            tracing::subscriber::with_default(subscriber, log_in_and_out)
        } else {
            tracing::subscriber::with_default(
                registry.with(fmt.event_format(format)),
                log_in_and_out,
            )
        };
        let text = String::from_utf8(lines.0.lock().expect("lines").clone()).expect("utf-8");
        (text, trace_id)
    }

    fn log_in_and_out() -> String {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let span = tracing::info_span!("work");
        let trace_id = span.context().span().span_context().trace_id().to_string();
        span.in_scope(|| tracing::info!("inside"));
        tracing::info!("outside");
        trace_id
    }

    #[test]
    fn text_lines_inside_a_span_start_with_its_ids() {
        let (text, trace_id) = written(WithTraceIds::text(), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with(&format!("trace_id={trace_id} span_id=")),
            "{text}"
        );
        assert!(lines[0].ends_with("inside"), "{text}");
        assert!(!lines[1].contains("trace_id"), "{text}");
    }

    #[test]
    fn json_lines_inside_a_span_carry_its_ids_as_fields() {
        let (text, trace_id) = written(WithTraceIds::json(), true);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["trace_id"], trace_id.as_str());
        assert_eq!(lines[0]["span_id"].as_str().map(str::len), Some(16));
        assert_eq!(lines[0]["fields"]["message"], "inside");
        assert!(lines[1].get("trace_id").is_none(), "{text}");
    }

    #[test]
    fn every_line_of_a_replica_names_it() {
        let (text, trace_id) = written(WithTraceIds::json().with_instance(Some("r-1")), true);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["trace_id"], trace_id.as_str());
        for line in &lines {
            assert_eq!(line["replica"], "r-1", "{text}");
        }
        let (text, _) = written(WithTraceIds::text().with_instance(Some("r-1")), false);
        assert!(
            text.lines().all(|l| l.starts_with("replica=r-1 ")),
            "{text}"
        );
    }
}
