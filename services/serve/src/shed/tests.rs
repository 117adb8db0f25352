use std::convert::Infallible;

use tokio::sync::oneshot;

use super::*;

type Request = http::Request<Body>;
type Response = http::Response<Body>;

/// A service whose calls to `/demo.v1.Demo/Get` and `/demo.v1.Demo/Watch`
/// wait for the test to answer them (one sender per call, in call order);
/// every other call is answered at once.
fn held(
    capacity: Capacity,
) -> (
    LoadShed<
        impl Service<Request, Response = Response, Error = Infallible, Future = impl Send> + Clone,
    >,
    tokio::sync::mpsc::UnboundedReceiver<oneshot::Sender<()>>,
) {
    let (calls, waiting) = tokio::sync::mpsc::unbounded_channel();
    let inner = tower::service_fn(move |request: Request| {
        let calls = calls.clone();
        async move {
            let path = request.uri().path().to_owned();
            if path == "/demo.v1.Demo/Get" || path == "/demo.v1.Demo/Watch" {
                let (answer, answered) = oneshot::channel();
                let _ = calls.send(answer);
                let _ = answered.await;
            }
            let response: Response = Status::ok("").into_http();
            // A stream's body is open until it is read to its end.
            Ok::<_, Infallible>(
                response
                    .map(|_| Body::new(http_body_util::Full::new(Bytes::from_static(b"event")))),
            )
        }
    });
    let layer = LoadShedLayer::new(crate::calls::demo(), capacity, "the demo");
    (layer.layer(inner), waiting)
}

fn request(path: &str) -> Request {
    http::Request::builder()
        .uri(path)
        .body(Body::empty())
        .expect("request")
}

fn status(response: &Response) -> Status {
    Status::from_header_map(response.headers()).expect("a status")
}

const CAPACITY: Capacity = Capacity {
    unary: 2,
    streams: 1,
    retry_after: Duration::from_millis(1500),
};

#[tokio::test]
async fn a_call_beyond_the_limit_is_refused_at_once_with_a_retry_hint() {
    let (service, mut waiting) = held(CAPACITY);
    let first = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let second = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let answers = [
        waiting.recv().await.expect("first is in"),
        waiting.recv().await.expect("second is in"),
    ];

    let refused = service
        .clone()
        .call(request("/demo.v1.Demo/Run"))
        .await
        .expect("answered");
    let refusal = status(&refused);
    assert_eq!(refusal.code(), Code::ResourceExhausted);
    assert_eq!(
        refusal.message(),
        "the demo is serving its limit of 2 calls at once (--max-concurrent-requests); nothing of this call was done: retry after 1500 ms"
    );
    assert_eq!(
        refused.headers().get(RETRY_PUSHBACK).map(|v| v.as_bytes()),
        Some(&b"1500"[..])
    );

    // Health is never counted; streams have their own places.
    let health = service
        .clone()
        .call(request("/grpc.health.v1.Health/Check"))
        .await
        .expect("answered");
    assert_eq!(status(&health).code(), Code::Ok);
    let stream = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Watch")));
    let stream_answer = waiting.recv().await.expect("the stream is in");

    // An answered call frees its place before its caller has the answer.
    let [one, two] = answers;
    let _ = one.send(());
    first.await.expect("task").expect("answered");
    let again = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let again_answer = waiting.recv().await.expect("a freed place is taken again");
    for answer in [two, again_answer, stream_answer] {
        let _ = answer.send(());
    }
    second.await.expect("task").expect("answered");
    again.await.expect("task").expect("answered");
    stream.await.expect("task").expect("answered");
}

#[tokio::test]
async fn a_stream_holds_its_place_until_its_body_is_gone() {
    let (service, mut waiting) = held(CAPACITY);
    let call = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Watch")));
    let _ = waiting.recv().await.expect("in").send(());
    let open = call.await.expect("task").expect("answered");
    // The handler has answered, the body is still open: the place is taken.
    let refused = service
        .clone()
        .call(request("/demo.v1.Demo/Watch"))
        .await
        .expect("answered");
    let refusal = status(&refused);
    assert_eq!(refusal.code(), Code::ResourceExhausted);
    assert!(
        refusal
            .message()
            .contains("1 streams at once (--max-concurrent-streams)"),
        "{}",
        refusal.message()
    );
    drop(open);
    let next = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Watch")));
    let _ = waiting
        .recv()
        .await
        .expect("the place is free again")
        .send(());
    next.await.expect("task").expect("answered");
}
