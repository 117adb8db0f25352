//! Log lines that carry the trace and span ids of the span they were written in,
//! so a log line leads to its trace and back.

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The standard text or JSON line, with `trace_id` and `span_id` added when the
/// event happened inside a span.
#[derive(Debug)]
pub enum WithTraceIds {
    Text(Format),
    Json(Format<Json>),
}

impl WithTraceIds {
    pub fn text() -> Self {
        Self::Text(Format::default())
    }

    pub fn json() -> Self {
        Self::Json(Format::default().json())
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
        match self {
            Self::Text(inner) => {
                if let Some((trace_id, span_id)) = &ids {
                    write!(writer, "trace_id={trace_id} span_id={span_id} ")?;
                }
                inner.format_event(ctx, writer, event)
            }
            Self::Json(inner) => {
                let Some((trace_id, span_id)) = ids else {
                    return inner.format_event(ctx, writer, event);
                };
                // The JSON object, with the ids as its first fields.
                let mut line = String::new();
                inner.format_event(ctx, Writer::new(&mut line), event)?;
                match line.strip_prefix('{') {
                    Some(rest) => write!(
                        writer,
                        "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
                    ),
                    None => writer.write_str(&line),
                }
            }
        }
    }
}
