use std::convert::Infallible;

use tokio::sync::oneshot;

use super::*;
use chorus_auth::Principal;

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
    held_with(capacity, Vec::new())
}

/// [`held`] with `quotas`.
fn held_with(
    capacity: Capacity,
    quotas: Vec<Quota>,
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
    let layer = LoadShedLayer::new(crate::calls::demo(), capacity, quotas, None, "the demo");
    (layer.layer(inner), waiting)
}

/// A call of API key `key-1`.
fn request(path: &str) -> Request {
    request_of(path, Some(key("key-1")))
}

fn key(id: &str) -> Principal {
    Principal::Key {
        id: id.to_owned(),
        name: id.to_owned(),
        role: chorus_auth::Role::Viewer,
    }
}

fn agent(run: &str) -> Principal {
    Principal::Run {
        verified: chorus_run_token::VerifiedToken {
            grant: chorus_run_token::RunGrant {
                run_id: run.to_owned(),
                task_id: "t".into(),
                agent: "a".into(),
                tools: Vec::new(),
                root: "/w".into(),
                egress: Vec::new(),
                epoch: 0,
            },
            kid: "k".into(),
            expires_at: 0,
        },
        token: String::new(),
    }
}

/// A call of `principal` (None: no credential).
fn request_of(path: &str, principal: Option<Principal>) -> Request {
    let mut request = http::Request::builder()
        .uri(path)
        .body(Body::empty())
        .expect("request");
    if let Some(principal) = principal {
        request.extensions_mut().insert(principal);
    }
    request
}

fn status(response: &Response) -> Status {
    Status::from_header_map(response.headers()).expect("a status")
}

/// Asserts that `response` is a refusal with `code` whose message says `says`.
fn refused_with(response: &Response, code: Code, says: &str) {
    let refusal = status(response);
    assert_eq!(refusal.code(), code, "{refusal:?}");
    assert!(refusal.message().contains(says), "{}", refusal.message());
}

const CAPACITY: Capacity = Capacity {
    unary: 2,
    streams: 1,
    agent_unary: 1,
    agent_streams: 1,
    credential_unary: 8,
    credential_streams: 8,
    anonymous: 1,
    anonymous_stream: Duration::from_secs(60),
    retry_after: Duration::from_millis(1500),
    request_body: Duration::from_secs(15),
    request_bytes: 1024,
    answer_bytes: 1 << 20,
    agent_answer_bytes: 1 << 20,
    credential_answer_bytes: 1 << 20,
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
        "the demo is serving its limit of 2 calls of API keys at once (--max-concurrent-requests); nothing of this call was done: retry after 1500 ms"
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

    // An answered call frees its place once its answer is taken (here
    // dropped with the response).
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
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "1 streams of API keys at once (--max-concurrent-streams)",
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

/// Read-only keys that fill their shares leave an eighth of the keys'
/// streams to admins: the next viewer is refused naming why, an admin is
/// served.
#[tokio::test]
async fn keys_without_reserved_room_leave_an_eighth_of_the_streams_to_admins() {
    let capacity = Capacity {
        streams: 8,
        ..CAPACITY
    };
    let (service, mut waiting) = held(capacity);
    let mut open = Vec::new();
    for i in 0..7 {
        let call = tokio::spawn(service.clone().call(request_of(
            "/demo.v1.Demo/Watch",
            Some(key(&format!("viewer-{i}"))),
        )));
        let _ = waiting.recv().await.expect("in").send(());
        open.push(call.await.expect("task").expect("answered"));
    }
    let refused = service
        .clone()
        .call(request_of("/demo.v1.Demo/Watch", Some(key("viewer-7"))))
        .await
        .expect("answered");
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "7 streams of keys other than admins' (seven eighths of --max-concurrent-streams)",
    );
    let admin = Principal::Key {
        id: "admin".to_owned(),
        name: "admin".to_owned(),
        role: chorus_auth::Role::Admin,
    };
    let served = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Watch", Some(admin))),
    );
    let _ = waiting
        .recv()
        .await
        .expect("the admin's stream is served")
        .send(());
    let answer = served.await.expect("task").expect("answered");
    assert!(
        Status::from_header_map(answer.headers()).is_none_or(|s| s.code() == Code::Ok),
        "the admin's stream is served"
    );
}

/// API keys busy with every place of theirs take nothing from agents, and
/// callers without a credential take nothing from either.
#[tokio::test]
async fn each_kind_of_caller_has_places_no_other_can_take() {
    let (service, mut waiting) = held(CAPACITY);
    // Both key places and the key stream place are taken.
    let calls: Vec<_> = [
        "/demo.v1.Demo/Get",
        "/demo.v1.Demo/Get",
        "/demo.v1.Demo/Watch",
    ]
    .into_iter()
    .map(|path| tokio::spawn(service.clone().call(request(path))))
    .collect();
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(waiting.recv().await.expect("in"));
    }
    let refused = service
        .clone()
        .call(request_of("/demo.v1.Demo/Get", Some(key("key-2"))))
        .await
        .expect("answered");
    assert_eq!(status(&refused).code(), Code::ResourceExhausted);
    // An agent's call and stream are served.
    let agent_call = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Get", Some(agent("run-1")))),
    );
    let agent_stream = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Watch", Some(agent("run-1")))),
    );
    answers.push(waiting.recv().await.expect("the agent's call is in"));
    answers.push(waiting.recv().await.expect("the agent's stream is in"));
    // A caller without a credential has one stream place; a second is refused.
    let anonymous = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Watch", None)),
    );
    answers.push(waiting.recv().await.expect("the anonymous stream is in"));
    let refused = service
        .clone()
        .call(request_of("/demo.v1.Demo/Watch", None))
        .await
        .expect("answered");
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "1 streams without a credential at once (--max-anonymous-calls)",
    );
    for answer in answers {
        let _ = answer.send(());
    }
    for call in calls {
        call.await.expect("task").expect("answered");
    }
    for call in [agent_call, agent_stream, anonymous] {
        call.await.expect("task").expect("answered");
    }
}

/// One key holds at most its own share of its kind's places: a second key
/// is served while the first is at its limit.
#[tokio::test]
async fn one_credential_holds_at_most_its_share() {
    let (service, mut waiting) = held(Capacity {
        streams: 10,
        credential_streams: 2,
        ..CAPACITY
    });
    let mine: Vec<_> = (0..2)
        .map(|_| tokio::spawn(service.clone().call(request("/demo.v1.Demo/Watch"))))
        .collect();
    let mut answers = Vec::new();
    for _ in 0..2 {
        answers.push(waiting.recv().await.expect("in"));
    }
    let refused = service
        .clone()
        .call(request("/demo.v1.Demo/Watch"))
        .await
        .expect("answered");
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "2 streams for key key-1 at once (--max-concurrent-streams-per-credential)",
    );
    let other = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Watch", Some(key("key-2")))),
    );
    answers.push(waiting.recv().await.expect("another key is served"));
    for answer in answers {
        let _ = answer.send(());
    }
    for call in mine {
        call.await.expect("task").expect("answered");
    }
    other.await.expect("task").expect("answered");
}

/// A stream without a credential ends when its time is up, with a status
/// that says why.
#[tokio::test(start_paused = true)]
async fn a_stream_without_a_credential_ends_when_its_time_is_up() {
    use http_body_util::BodyExt as _;
    let (service, mut waiting) = held(Capacity {
        anonymous_stream: Duration::from_secs(5),
        ..CAPACITY
    });
    let call = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Watch", None)),
    );
    let _ = waiting.recv().await.expect("in").send(());
    let mut body = call.await.expect("task").expect("answered").into_body();
    // Its first frame is the event; then, time being up, the trailers.
    let first = body.frame().await.expect("a frame").expect("ok");
    assert!(first.is_data());
    tokio::time::advance(Duration::from_secs(6)).await;
    let last = body.frame().await.expect("a frame").expect("ok");
    let trailers = last.into_trailers().expect("trailers");
    let ended = Status::from_header_map(&trailers).expect("a status");
    assert_eq!(ended.code(), Code::DeadlineExceeded);
    assert!(
        ended.message().contains("--anonymous-stream-secs"),
        "{}",
        ended.message()
    );
}

/// A request body that never comes.
fn never() -> Body {
    Body::new(http_body_util::StreamBody::new(
        futures_util::stream::pending::<Result<Frame<Bytes>, Status>>(),
    ))
}

/// A call whose message does not come holds only its credential's place
/// while it waits, and is answered DEADLINE_EXCEEDED when its time is up:
/// other callers of its kind are served meanwhile.
#[tokio::test(start_paused = true)]
async fn a_call_whose_message_never_comes_holds_no_place_of_its_kind() {
    let (service, mut waiting) = held(Capacity {
        unary: 1,
        request_body: Duration::from_secs(5),
        ..CAPACITY
    });
    let mut bodiless = request("/demo.v1.Demo/Get");
    *bodiless.body_mut() = never();
    let stalled = tokio::spawn(service.clone().call(bodiless));
    // The one unary place of API keys is free for another key.
    let other = tokio::spawn(
        service
            .clone()
            .call(request_of("/demo.v1.Demo/Get", Some(key("key-2")))),
    );
    let _ = waiting
        .recv()
        .await
        .expect("another key is served")
        .send(());
    assert_eq!(
        status(&other.await.expect("task").expect("answered")).code(),
        Code::Ok
    );
    tokio::time::advance(Duration::from_secs(6)).await;
    let refused = stalled.await.expect("task").expect("answered");
    let refusal = status(&refused);
    assert_eq!(refusal.code(), Code::DeadlineExceeded);
    assert!(
        refusal.message().contains("--request-body-secs"),
        "{}",
        refusal.message()
    );
    assert!(waiting.try_recv().is_err(), "the stalled call never ran");
}

/// Answers sent and not yet read count against their credential's bytes;
/// one over them is ended RESOURCE_EXHAUSTED, and reading frees them.
#[tokio::test]
async fn unread_answers_are_bounded_per_credential() {
    use http_body_util::BodyExt as _;
    let (service, _waiting) = held(Capacity {
        unary: 10,
        // Each answer is the 5 bytes "event".
        credential_answer_bytes: 8,
        ..CAPACITY
    });
    let answer = |principal| {
        let service = service.clone();
        async move {
            service
                .clone()
                .call(request_of("/demo.v1.Demo/Run", Some(principal)))
                .await
                .expect("answered")
                .into_body()
        }
    };
    let mut first = answer(key("key-1")).await;
    let sent = first.frame().await.expect("a frame").expect("ok");
    assert!(sent.is_data(), "the first answer is sent");
    // Not read yet: a second answer of the same key is over its 8 bytes.
    let mut second = answer(key("key-1")).await;
    let cut = second.frame().await.expect("a frame").expect("ok");
    let refusal = Status::from_header_map(&cut.into_trailers().expect("trailers")).expect("status");
    assert_eq!(refusal.code(), Code::ResourceExhausted);
    assert!(
        refusal
            .message()
            .contains("8 bytes of answers not yet read for key key-1 at once (--max-unread-answer-bytes-per-credential)"),
        "{}",
        refusal.message()
    );
    // Another key is not held back.
    let mut other = answer(key("key-2")).await;
    assert!(other.frame().await.expect("a frame").expect("ok").is_data());
    // Asking for the next frame means the first was taken.
    let _ = first.frame().await;
    let mut third = answer(key("key-1")).await;
    assert!(third.frame().await.expect("a frame").expect("ok").is_data());
}

#[test]
fn quotas_read_as_written_and_bad_ones_say_how_to_write_them() {
    let quota: Quota = "viewer=16/64".parse().expect("a role's");
    assert_eq!(quota.of, QuotaOf::Role(chorus_auth::Role::Viewer));
    assert_eq!((quota.requests, quota.streams), (16, 64));
    assert_eq!(quota.to_string(), "viewer=16/64");
    let quota: Quota = "key:3f1c=128/512".parse().expect("a key's");
    assert_eq!(quota.of, QuotaOf::Key("3f1c".into()));
    assert_eq!(
        "agents=32/8".parse::<Quota>().expect("agents'").of,
        QuotaOf::Agents
    );
    for bad in [
        "viewer",
        "viewer=16",
        "viewer=0/1",
        "nobody=1/1",
        "key:=1/1",
    ] {
        let error = bad.parse::<Quota>().expect_err(bad);
        assert!(error.contains(bad), "{error}");
    }
}

/// A key's own quota wins over its role's, which wins over the default: a
/// viewer key is held to the viewers' 1 call, a named key gets its 3.
#[tokio::test]
async fn quotas_of_roles_and_keys_replace_the_default_share() {
    let (service, mut waiting) = held_with(
        Capacity {
            unary: 10,
            ..CAPACITY
        },
        vec![
            "viewer=1/1".parse().expect("quota"),
            "key:key-2=3/1".parse().expect("quota"),
        ],
    );
    let first = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let mut answers = vec![waiting.recv().await.expect("in")];
    let refused = service
        .clone()
        .call(request("/demo.v1.Demo/Get"))
        .await
        .expect("answered");
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "1 calls for key key-1 at once (--quota)",
    );
    let mine: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(
                service
                    .clone()
                    .call(request_of("/demo.v1.Demo/Get", Some(key("key-2")))),
            )
        })
        .collect();
    for _ in 0..3 {
        answers.push(waiting.recv().await.expect("key-2's three are in"));
    }
    for answer in answers {
        let _ = answer.send(());
    }
    first.await.expect("task").expect("answered");
    for call in mine {
        call.await.expect("task").expect("answered");
    }
}

#[tokio::test]
async fn calls_waiting_for_a_person_give_back_their_places_and_others_are_served() {
    // Calls to Get wait for a person: they give back their places first.
    let (calls, mut waiting) = tokio::sync::mpsc::unbounded_channel::<oneshot::Sender<()>>();
    let inner = tower::service_fn(move |request: Request| {
        let calls = calls.clone();
        async move {
            if request.uri().path() == "/demo.v1.Demo/Get" {
                let places = request.extensions().get::<HeldPlaces>().cloned();
                places
                    .expect("the places are given to the handler")
                    .give_back();
                let (answer, answered) = oneshot::channel();
                let _ = calls.send(answer);
                let _ = answered.await;
            }
            Ok::<_, Infallible>(Status::ok("").into_http::<Body>())
        }
    });
    let capacity = Capacity {
        credential_unary: 2,
        ..CAPACITY
    };
    let service = LoadShedLayer::new(crate::calls::demo(), capacity, Vec::new(), None, "the demo")
        .layer(inner);

    // Ten waits of one key: past its two places and the keys' two.
    let mut calls = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..10 {
        calls.push(tokio::spawn(
            service.clone().call(request("/demo.v1.Demo/Get")),
        ));
        answers.push(waiting.recv().await.expect("a wait is in"));
    }
    // Its other calls, and another key's, are served meanwhile.
    for who in ["key-1", "key-2"] {
        let answered = service
            .clone()
            .call(request_of("/demo.v1.Demo/Run", Some(key(who))))
            .await
            .expect("answered");
        assert_eq!(
            status(&answered).code(),
            Code::Ok,
            "{who}: {:?}",
            status(&answered)
        );
    }
    for answer in answers {
        let _ = answer.send(());
    }
    for call in calls {
        let answered = call.await.expect("task").expect("answered");
        assert_eq!(status(&answered).code(), Code::Ok);
    }
}

#[tokio::test]
async fn a_call_that_keeps_its_places_still_counts() {
    // Without giving back, two waits of one key fill its places.
    let capacity = Capacity {
        credential_unary: 2,
        unary: 8,
        ..CAPACITY
    };
    let (service, mut waiting) = held(capacity);
    let first = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let second = tokio::spawn(service.clone().call(request("/demo.v1.Demo/Get")));
    let answers = [
        waiting.recv().await.expect("in"),
        waiting.recv().await.expect("in"),
    ];
    let refused = service
        .clone()
        .call(request("/demo.v1.Demo/Run"))
        .await
        .expect("answered");
    refused_with(
        &refused,
        Code::ResourceExhausted,
        "2 calls for key key-1 at once (--max-concurrent-requests-per-credential)",
    );
    for answer in answers {
        let _ = answer.send(());
    }
    first.await.expect("task").expect("answered");
    second.await.expect("task").expect("answered");
}
