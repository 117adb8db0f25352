//! An OTLP/gRPC receiver standing in for an OpenTelemetry Collector in the
//! container tests (the official collector image cannot be pulled there): it
//! serves the real `TraceService`, `MetricsService` and `LogsService` of
//! opentelemetry-proto and prints what arrives on stdout, one JSON object a line:
//!
//! - `{"signal":"span","service":…,"trace_id":…,"span_id":…,"parent_span_id":…,"name":…,"attributes":{…}}`
//! - `{"signal":"metric","service":…,"name":…}`
//! - `{"signal":"log","service":…,"records":N}`
//!
//! `otlp-sink [listen address]` (default `0.0.0.0:4317`); serves until SIGTERM or SIGINT.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::{Map, Value, json};
use tonic::{Request, Response, Status};

/// Prints every export it receives.
#[derive(Debug, Clone, Copy)]
struct Sink;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value(any: Option<&AnyValue>) -> Value {
    match any.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => json!(s),
        Some(Any::BoolValue(b)) => json!(b),
        Some(Any::IntValue(i)) => json!(i),
        Some(Any::DoubleValue(d)) => json!(d),
        Some(Any::ArrayValue(a)) => a.values.iter().map(|v| value(Some(v))).collect(),
        Some(other) => json!(format!("{other:?}")),
        None => Value::Null,
    }
}

fn attributes(attributes: &[KeyValue]) -> Map<String, Value> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn service(resource: Option<&Resource>) -> Value {
    resource
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .map_or(Value::Null, |kv| value(kv.value.as_ref()))
}

fn print(line: &Value) {
    let mut out = std::io::stdout().lock();
    // A closed stdout leaves nobody to tell.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        for resource in &request.get_ref().resource_spans {
            let service = service(resource.resource.as_ref());
            for scope in &resource.scope_spans {
                for span in &scope.spans {
                    print(&json!({
                        "signal": "span",
                        "service": service,
                        "trace_id": hex(&span.trace_id),
                        "span_id": hex(&span.span_id),
                        "parent_span_id": hex(&span.parent_span_id),
                        "name": span.name,
                        "attributes": attributes(&span.attributes),
                    }));
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Sink {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        for resource in &request.get_ref().resource_metrics {
            let service = service(resource.resource.as_ref());
            for scope in &resource.scope_metrics {
                for metric in &scope.metrics {
                    print(&json!({"signal": "metric", "service": service, "name": metric.name}));
                }
            }
        }
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Sink {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        for resource in &request.get_ref().resource_logs {
            let records: usize = resource
                .scope_logs
                .iter()
                .map(|s| s.log_records.len())
                .sum();
            print(&json!({
                "signal": "log",
                "service": service(resource.resource.as_ref()),
                "records": records,
            }));
        }
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

async fn serve(addr: &str) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let addr: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("'{addr}' is not an address: {e}"))?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    eprintln!("otlp-sink listening on {addr}");
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Sink))
        .add_service(MetricsServiceServer::new(Sink))
        .add_service(LogsServiceServer::new(Sink))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            },
        )
        .await
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "0.0.0.0:4317".to_owned());
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(serve(&addr)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("otlp-sink: {e}");
            ExitCode::FAILURE
        }
    }
}
