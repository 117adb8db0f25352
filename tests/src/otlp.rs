//! An OTLP/gRPC receiver in the test process: the real `TraceService` and
//! `MetricsService` of opentelemetry-proto, keeping what every exporter sends
//! so a test can wait for spans and metrics and look at them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use tokio::sync::Notify;

/// One span as received.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the process that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// Span ids this span links to.
    pub links: Vec<String>,
}

/// One data point of a metric, as received.
#[derive(Debug, Clone)]
pub struct Point {
    pub service: String,
    pub metric: String,
    pub attributes: HashMap<String, String>,
    /// A sum's or gauge's value, or a histogram's count.
    pub value: f64,
}

#[derive(Debug, Default)]
struct Received {
    spans: Vec<Span>,
    points: Vec<Point>,
}

#[derive(Debug, Clone, Default)]
struct Shared {
    received: Arc<Mutex<Received>>,
    arrived: Arc<Notify>,
}

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Received) -> T) -> T {
        f(&mut self.received.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn service_of(resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    resource
        .map(|r| attributes(&r.attributes))
        .and_then(|mut a| a.remove("service.name"))
        .unwrap_or_default()
}

#[tonic::async_trait]
impl TraceService for Shared {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service = service_of(resource_spans.resource.as_ref());
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(Span {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: attributes(&span.attributes),
                        status_code: span.status.map_or(0, |s| s.code),
                        links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
                    });
                }
            }
        }
        self.with(|r| r.spans.extend(spans));
        self.arrived.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Shared {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut points = Vec::new();
        for resource_metrics in request.into_inner().resource_metrics {
            let service = service_of(resource_metrics.resource.as_ref());
            for scope in resource_metrics.scope_metrics {
                for metric in scope.metrics {
                    let mut point = |attrs: &[KeyValue], value: f64| {
                        points.push(Point {
                            service: service.clone(),
                            metric: metric.name.clone(),
                            attributes: attributes(attrs),
                            value,
                        });
                    };
                    #[allow(clippy::cast_precision_loss)]
                    match &metric.data {
                        Some(Data::Sum(sum)) => {
                            for p in &sum.data_points {
                                point(&p.attributes, number(p.value.as_ref()));
                            }
                        }
                        Some(Data::Gauge(gauge)) => {
                            for p in &gauge.data_points {
                                point(&p.attributes, number(p.value.as_ref()));
                            }
                        }
                        Some(Data::Histogram(histogram)) => {
                            for p in &histogram.data_points {
                                point(&p.attributes, p.count as f64);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        self.with(|r| r.points.extend(points));
        self.arrived.notify_waiters();
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

#[allow(clippy::cast_precision_loss)]
fn number(
    value: Option<&opentelemetry_proto::tonic::metrics::v1::number_data_point::Value>,
) -> f64 {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    match value {
        Some(Value::AsDouble(d)) => *d,
        Some(Value::AsInt(i)) => *i as f64,
        None => 0.0,
    }
}

/// A receiver serving on 127.0.0.1 until dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        Self::start_on(listener)
    }

    /// Serves on a listener bound elsewhere (a receiver in a container listens
    /// on all of its addresses: tests/src/bin/otlp_sink.rs).
    pub fn start_on(listener: tokio::net::TcpListener) -> Self {
        let addr = listener.local_addr().expect("addr");
        let shared = Shared::default();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(shared.clone()))
            .add_service(MetricsServiceServer::new(shared.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        let server = tokio::spawn(async move {
            let _ = server.await;
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.shared.with(|r| r.spans.clone())
    }

    pub fn points(&self) -> Vec<Point> {
        self.shared.with(|r| r.points.clone())
    }

    /// Waits (up to a minute) until `done` holds for what was received.
    ///
    /// # Panics
    /// When it does not, naming `what` and listing what came.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&[Span], &[Point]) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let arrived = self.shared.arrived.notified();
                if self.shared.with(|r| done(&r.spans, &r.points)) {
                    return;
                }
                arrived.await;
            }
        })
        .await;
        if waited.is_err() {
            let (spans, points) = self.shared.with(|r| {
                (
                    r.spans
                        .iter()
                        .map(|s| format!("{} {}", s.service, s.name))
                        .collect::<Vec<_>>(),
                    r.points
                        .iter()
                        .map(|p| format!("{} {}", p.service, p.metric))
                        .collect::<std::collections::BTreeSet<_>>(),
                )
            });
            panic!("no {what} within a minute; spans: {spans:#?}; metrics: {points:#?}");
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}
