//! One set-up for logs, traces and metrics, returning a guard that flushes them.
//!
//! Spans always get OpenTelemetry ids (so logs carry them and trace context
//! travels on), but they leave the process only when the standard `OTEL_*`
//! variables ask for OTLP: `OTEL_EXPORTER_OTLP_ENDPOINT` (or the per-signal
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`), or
//! `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` set to `otlp`. `none` turns
//! a signal off and `OTEL_SDK_DISABLED=true` turns both off. The exporters speak
//! OTLP over gRPC.

use std::collections::HashMap;

use opentelemetry::global;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::warn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::LogFormat;
use crate::logs::WithTraceIds;

/// The variables that say where telemetry goes, passed on to the processes a
/// service starts (agents' chorus-tools export their spans the same way).
/// Headers (`OTEL_EXPORTER_OTLP_HEADERS`) are not passed: they may hold the
/// collector's credentials.
pub const EXPORT_ENV: [&str; 12] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_TRACES_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
    "OTEL_BSP_SCHEDULE_DELAY",
];

/// Where each signal goes, read from the standard variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Export {
    /// Spans are sent over OTLP.
    pub traces: bool,
    /// Metrics are sent over OTLP.
    pub metrics: bool,
    /// What was set that Chorus does not do (told once logging is up).
    pub problems: Vec<String>,
}

impl Export {
    /// From the process environment.
    pub fn from_env() -> Self {
        Self::from_vars(&std::env::vars().collect())
    }

    /// From `vars` (the environment, as tests give it).
    pub fn from_vars(vars: &HashMap<String, String>) -> Self {
        let get = |name: &str| {
            vars.get(name)
                .map(|v| v.trim().to_ascii_lowercase())
                .filter(|v| !v.is_empty())
        };
        let mut export = Self::default();
        if get("OTEL_SDK_DISABLED").as_deref() == Some("true") {
            return export;
        }
        let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let wanted = |exporter: &str, endpoint_var: &str, problems: &mut Vec<String>| match get(
            exporter,
        )
        .as_deref()
        {
            Some("none") => false,
            Some("otlp") => true,
            Some(other) => {
                problems.push(format!(
                        "{exporter}={other} is not supported (only otlp or none); nothing is exported for it"
                    ));
                false
            }
            None => endpoint || get(endpoint_var).is_some(),
        };
        export.traces = wanted(
            "OTEL_TRACES_EXPORTER",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &mut export.problems,
        );
        export.metrics = wanted(
            "OTEL_METRICS_EXPORTER",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            &mut export.problems,
        );
        for var in [
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ] {
            if let Some(protocol) = get(var).filter(|p| p != "grpc") {
                export.problems.push(format!(
                    "{var}={protocol} is not supported: Chorus exports OTLP over gRPC (port 4317)"
                ));
            }
        }
        export
    }
}

/// Keeps telemetry going; dropping it flushes and stops the exporters. Drop it
/// while the tokio runtime it was made in still runs (the OTLP client uses it).
#[must_use = "dropping the guard stops telemetry"]
#[derive(Debug)]
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: Option<SdkMeterProvider>,
    /// What was exported, as set up.
    pub export: Export,
}

impl Telemetry {
    /// Flushes and stops the exporters (what dropping does).
    pub fn shutdown(&mut self) {
        if let Err(e) = self.tracer_provider.shutdown() {
            // Already shut down, or the exporter could not be reached: nothing
            // else can be done for the spans.
            eprintln!("telemetry: spans not flushed: {e}");
        }
        if let Some(meter_provider) = self.meter_provider.take()
            && let Err(e) = meter_provider.shutdown()
        {
            eprintln!("telemetry: metrics not flushed: {e}");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The resource every signal of `service` carries: `service.name` (unless
/// `OTEL_SERVICE_NAME` says otherwise), `service.version` and what
/// `OTEL_RESOURCE_ATTRIBUTES` adds.
fn resource(service: &'static str, instance: Option<&str>) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty());
    let mut builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if let Some(instance) = instance {
        builder = builder.with_attribute(opentelemetry::KeyValue::new(
            "service.instance.id",
            instance.to_owned(),
        ));
    }
    if named {
        builder.build()
    } else {
        builder.with_service_name(service).build()
    }
}

/// The providers for `service`, exporting what `export` says. Must run inside
/// a tokio runtime when anything is exported.
fn providers(
    service: &'static str,
    instance: Option<&str>,
    export: &mut Export,
) -> (SdkTracerProvider, Option<SdkMeterProvider>) {
    let resource = resource(service, instance);
    let mut tracer_provider = SdkTracerProvider::builder().with_resource(resource.clone());
    if export.traces {
        match SpanExporter::builder().with_tonic().build() {
            Ok(exporter) => tracer_provider = tracer_provider.with_batch_exporter(exporter),
            Err(e) => {
                export.traces = false;
                export.problems.push(format!(
                    "spans are not exported: cannot make the OTLP exporter: {e}"
                ));
            }
        }
    }
    let meter_provider = if export.metrics {
        match MetricExporter::builder().with_tonic().build() {
            Ok(exporter) => Some(
                SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_periodic_exporter(exporter)
                    .build(),
            ),
            Err(e) => {
                export.metrics = false;
                export.problems.push(format!(
                    "metrics are not exported: cannot make the OTLP exporter: {e}"
                ));
                None
            }
        }
    } else {
        None
    };
    (tracer_provider.build(), meter_provider)
}

/// The log filter without `RUST_LOG`: `info`, but only errors of the HTTP/2
/// and HTTP libraries — what a client does wrong at that level (a rapid reset,
/// a bad frame) is the client's, and a line per connection would let any
/// client write the service's log.
const DEFAULT_FILTER: &str = "info,h2=error,hyper=error,hyper_util=error";

/// Sets up logs (`RUST_LOG` filter, default [`DEFAULT_FILTER`]; text or JSON on stderr,
/// each line with its trace and span ids), spans (through `tracing`) and
/// metrics for the binary `service`, and W3C trace context propagation.
///
/// Call it inside the tokio runtime the service runs on.
pub fn init(service: &'static str, format: LogFormat) -> Telemetry {
    init_instance(service, format, None)
}

/// [`init`] for one instance of a replicated service (an orchestrator's
/// replica id): spans and metrics carry it as `service.instance.id`, log
/// lines as `replica`.
pub fn init_instance(
    service: &'static str,
    format: LogFormat,
    instance: Option<&str>,
) -> Telemetry {
    let mut export = Export::from_env();
    let (tracer_provider, meter_provider) = providers(service, instance, &mut export);
    install(&tracer_provider, meter_provider.as_ref());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let otel_layer = tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer(service));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour());
    let registry = tracing_subscriber::registry().with(filter).with(otel_layer);
    match format {
        LogFormat::Text => registry
            .with(fmt.event_format(WithTraceIds::text().with_instance(instance)))
            .init(),
        LogFormat::Json => registry
            .with(
                fmt.fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(WithTraceIds::json().with_instance(instance)),
            )
            .init(),
    }
    for problem in &export.problems {
        warn!("{problem}");
    }
    Telemetry {
        tracer_provider,
        meter_provider,
        export,
    }
}

/// Sets up spans for a command-line program that writes no logs
/// (chorus-tools): nothing is installed unless something is exported, so a
/// call without `OTEL_*` costs nothing. Call it inside a tokio runtime.
pub fn init_quiet(service: &'static str) -> Option<Telemetry> {
    let mut export = Export::from_env();
    // A program that lives for one call records no metrics.
    export.metrics = false;
    if !export.traces {
        return None;
    }
    let (tracer_provider, meter_provider) = providers(service, None, &mut export);
    install(&tracer_provider, meter_provider.as_ref());
    let otel_layer = tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer(service));
    // Its own spans, not its libraries' (h2 and hyper trace at debug and below).
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(otel_layer)
        .try_init();
    Some(Telemetry {
        tracer_provider,
        meter_provider,
        export,
    })
}

fn install(tracer_provider: &SdkTracerProvider, meter_provider: Option<&SdkMeterProvider>) {
    global::set_text_map_propagator(TraceContextPropagator::new());
    global::set_tracer_provider(tracer_provider.clone());
    if let Some(meter_provider) = meter_provider {
        global::set_meter_provider(meter_provider.clone());
    }
}

/// Whether log lines may carry colour codes: only on a terminal, and not when
/// `NO_COLOR` is set (<https://no-color.org>). Files, pipes, `podman logs`
/// and log collectors get plain text.
fn colour() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn nothing_is_exported_unless_the_standard_variables_ask() {
        assert_eq!(Export::from_vars(&vars(&[])), Export::default());
        let both = Export::from_vars(&vars(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4317",
        )]));
        assert!(both.traces && both.metrics && both.problems.is_empty());
        let traces = Export::from_vars(&vars(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4317",
        )]));
        assert!(traces.traces && !traces.metrics);
        let explicit = Export::from_vars(&vars(&[("OTEL_METRICS_EXPORTER", "otlp")]));
        assert!(!explicit.traces && explicit.metrics);
    }

    #[test]
    fn none_and_disabled_turn_signals_off_and_unsupported_choices_are_named() {
        let off = Export::from_vars(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]));
        assert!(!off.traces && off.metrics);
        let disabled = Export::from_vars(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]));
        assert_eq!(disabled, Export::default());
        let odd = Export::from_vars(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ]));
        assert!(!odd.traces && odd.metrics);
        assert_eq!(odd.problems.len(), 2, "{:?}", odd.problems);
        assert!(odd.problems.iter().any(|p| p.contains("zipkin")));
        assert!(odd.problems.iter().any(|p| p.contains("http/protobuf")));
    }
}
