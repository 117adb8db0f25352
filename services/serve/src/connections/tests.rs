use std::net::Ipv4Addr;

use futures_util::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpSocket;

use super::*;

const LIMITS: ConnectionLimits = ConnectionLimits {
    max: Some(8),
    per_peer: 2,
    unproven: 1_000,
    per_credential: 64,
    handshake: Duration::from_secs(10),
    idle: Duration::from_secs(60),
    answer_send: Duration::from_secs(30),
};

/// An admin's key: a credential with reserved room.
fn admin() -> Holder {
    Holder {
        name: "key admin".into(),
        reserved: true,
    }
}

/// A viewer's key `id`.
fn viewer(id: &str) -> Holder {
    Holder {
        name: format!("key {id}"),
        reserved: false,
    }
}

/// A listener on 127.0.0.1 whose accepted connections are bounded by
/// `limits`, and its address.
async fn listening(
    limits: ConnectionLimits,
) -> (
    Connections,
    std::pin::Pin<Box<dyn futures_util::Stream<Item = io::Result<Conn>> + Send>>,
    SocketAddr,
) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("listen");
    let addr = listener.local_addr().expect("address");
    let connections = Connections::new(limits, 1024, "the demo");
    let incoming = Box::pin(connections.incoming(listener, None, false));
    (connections, incoming, addr)
}

/// A client connection from `from` (an address of 127.0.0.0/8).
async fn client(to: SocketAddr, from: Ipv4Addr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind((from, 0).into()).expect("bind");
    socket.connect(to).await.expect("connect")
}

/// Reads the server side of a connection as the HTTP/2 server would, until
/// it fails; the error.
async fn served(mut conn: Conn) -> io::Error {
    let mut buf = [0_u8; 64];
    loop {
        match conn.read(&mut buf).await {
            Ok(0) => return io::Error::other("the client closed"),
            Ok(_) => {}
            Err(e) => return e,
        }
    }
}

/// Whether the client's connection has been closed by the server, after
/// what it said (a goodbye).
async fn closed(client: &mut TcpStream) -> bool {
    let mut buf = [0_u8; 256];
    let mut said = 0;
    loop {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(n) if said + n <= 1024 => said += n,
            Ok(_) => return false,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_says_nothing_is_closed_after_the_handshake_time() {
    let (_connections, mut incoming, addr) = listening(LIMITS).await;
    let mut silent = client(addr, Ipv4Addr::LOCALHOST).await;
    let conn = incoming.next().await.expect("accepted").expect("admitted");
    let started = Instant::now();
    let error = served(conn).await;
    assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted);
    assert!(
        error.to_string().contains("no HTTP/2 preface within 10 s"),
        "{error}"
    );
    assert!(started.elapsed() >= LIMITS.handshake);
    assert!(closed(&mut silent).await);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_began_is_closed_only_when_idle_and_never_during_a_call() {
    let (connections, mut incoming, addr) = listening(LIMITS).await;
    let mut talking = client(addr, Ipv4Addr::LOCALHOST).await;
    talking
        .write_all(&[0_u8; HANDSHAKE_BYTES])
        .await
        .expect("preface");
    let conn = incoming.next().await.expect("accepted").expect("admitted");
    let state = connections
        .registry
        .by_peer
        .lock()
        .expect("peers")
        .get(&talking.local_addr().expect("address"))
        .and_then(Weak::upgrade)
        .expect("known by its peer address");
    let call = state.call();
    let started = Instant::now();
    let server = tokio::spawn(served(conn));
    // A call in flight for longer than the idle time keeps it open.
    tokio::time::sleep(LIMITS.idle * 2).await;
    assert!(!server.is_finished(), "closed during a call");
    drop(call);
    let error = server.await.expect("task");
    assert!(error.to_string().contains("no call for 60 s"), "{error}");
    assert!(started.elapsed() >= LIMITS.idle * 3);
}

#[tokio::test(start_paused = true)]
async fn an_answer_left_unread_closes_its_connection() {
    let (connections, mut incoming, addr) = listening(LIMITS).await;
    let mut reader = client(addr, Ipv4Addr::LOCALHOST).await;
    reader
        .write_all(&[0_u8; HANDSHAKE_BYTES])
        .await
        .expect("preface");
    let conn = incoming.next().await.expect("accepted").expect("admitted");
    let peer = reader.local_addr().expect("address");
    let mut extensions = http::Extensions::new();
    extensions.insert(TcpConnectInfo {
        local_addr: Some(addr),
        remote_addr: Some(peer),
    });
    let state = connections
        .of(&extensions)
        .expect("found from a call's extensions");
    let _call = state.call();
    let server = tokio::spawn(served(conn));
    let _unread = state.answer();
    let error = server.await.expect("task");
    assert!(
        error
            .to_string()
            .contains("an answer waited 30 s to be read"),
        "{error}"
    );
    assert!(closed(&mut reader).await);
    assert_eq!(connections.open(), 0);
}

#[tokio::test]
async fn one_address_holds_few_connections_without_a_credential_the_oldest_goes_first() {
    let (connections, mut incoming, addr) = listening(LIMITS).await;
    let mut first = client(addr, Ipv4Addr::LOCALHOST).await;
    let conn_first = incoming.next().await.expect("accepted").expect("admitted");
    let _second = client(addr, Ipv4Addr::LOCALHOST).await;
    let conn_second = incoming.next().await.expect("accepted").expect("admitted");
    // A third from the same address is admitted, and the oldest closed.
    let _third = client(addr, Ipv4Addr::LOCALHOST).await;
    let _conn_third = incoming.next().await.expect("accepted").expect("admitted");
    let error = served(conn_first).await;
    assert!(
        error
            .to_string()
            .contains("--max-unproven-connections-per-peer"),
        "{error}"
    );
    assert!(closed(&mut first).await, "the oldest was closed");
    assert_eq!(connections.open(), 2);

    // A call with a credential on the second: it no longer counts, and is
    // never the one closed.
    conn_second.state.take_call(Some(&admin()));
    let _fourth = client(addr, Ipv4Addr::LOCALHOST).await;
    let _conn_fourth = incoming.next().await.expect("accepted").expect("admitted");
    // Another address has a share of its own.
    let _other = client(addr, Ipv4Addr::new(127, 0, 0, 2)).await;
    let _conn_other = incoming.next().await.expect("accepted").expect("admitted");
    assert_eq!(connections.open(), 4);
    let second = tokio::spawn(served(conn_second));
    let _fifth = client(addr, Ipv4Addr::LOCALHOST).await;
    let _conn_fifth = incoming.next().await.expect("accepted").expect("admitted");
    assert!(
        !second.is_finished(),
        "a proven connection is never evicted"
    );
    second.abort();
}

/// Many addresses, each within its share, cannot together keep more than
/// `unproven` silent connections: one more closes the oldest of all of them
/// (whatever its address), never a proven one, and the newcomer is admitted.
#[tokio::test]
async fn many_addresses_together_hold_few_silent_connections_the_oldest_goes_first() {
    let (connections, mut incoming, addr) = listening(ConnectionLimits {
        unproven: 3,
        ..LIMITS
    })
    .await;
    let mut clients = Vec::new();
    let mut accepted = Vec::new();
    for last in 1..=3 {
        clients.push(client(addr, Ipv4Addr::new(127, 0, 0, last)).await);
        let conn = incoming.next().await.expect("accepted").expect("admitted");
        accepted.push(conn);
    }
    // The second carries a call with a credential: it no longer counts.
    accepted[1].state.take_call(Some(&admin()));
    let mut tasks: Vec<_> = accepted
        .into_iter()
        .map(|c| tokio::spawn(served(c)))
        .collect();
    // Five more addresses, each within its own share of 2: from the third
    // on, each closes the oldest silent connection of all.
    for last in 4..=8 {
        clients.push(client(addr, Ipv4Addr::new(127, 0, 0, last)).await);
        let conn = incoming.next().await.expect("accepted").expect("admitted");
        tasks.push(tokio::spawn(served(conn)));
    }
    // Closed, oldest first: the first, the third, the fourth, the fifth.
    for closed_one in [0, 2, 3, 4] {
        // Bounded, so a connection never closed fails here instead of hanging.
        let error = tokio::time::timeout(Duration::from_secs(30), &mut tasks[closed_one])
            .await
            .unwrap_or_else(|_| panic!("connection {} was never closed", closed_one + 1))
            .expect("served");
        assert!(
            error.to_string().contains("--max-unproven-connections)"),
            "connection {}: {error}",
            closed_one + 1
        );
        assert!(closed(&mut clients[closed_one]).await);
    }
    assert_eq!(
        connections.open(),
        4,
        "the proven one and the three newest silent ones"
    );
    assert!(
        !tasks[1].is_finished(),
        "a proven connection is never evicted"
    );
    for task in tasks {
        task.abort();
    }
}

#[tokio::test]
async fn past_the_total_the_oldest_silent_connection_makes_room_and_proven_ones_never_do() {
    let (connections, mut incoming, addr) = listening(ConnectionLimits {
        max: Some(2),
        ..LIMITS
    })
    .await;
    let mut first = client(addr, Ipv4Addr::new(127, 0, 0, 1)).await;
    let conn_first = incoming.next().await.expect("accepted").expect("admitted");
    let _second = client(addr, Ipv4Addr::new(127, 0, 0, 2)).await;
    let conn_second = incoming.next().await.expect("accepted").expect("admitted");
    // A third, the server being full: the oldest silent one makes room.
    let _third = client(addr, Ipv4Addr::new(127, 0, 0, 3)).await;
    let conn_third = incoming.next().await.expect("accepted").expect("admitted");
    let error = served(conn_first).await;
    assert!(error.to_string().contains("--max-connections"), "{error}");
    assert!(closed(&mut first).await);
    assert_eq!(connections.open(), 2);
    // Every connection has carried a call: one more is closed when accepted.
    conn_second.state.take_call(Some(&admin()));
    conn_third.state.take_call(Some(&admin()));
    let mut over = client(addr, Ipv4Addr::new(127, 0, 0, 4)).await;
    let next = tokio::spawn(async move { incoming.next().await.map(|c| c.map(|_| ())) });
    assert!(closed(&mut over).await, "refused: nothing to make room");
    assert_eq!(connections.open(), 2);
    next.abort();
}

/// A burst that outruns the dropping of the connections it pushes out: past
/// `max` + [`ROOM_BEING_MADE`] the accept loop waits for a drop, leaving the
/// next caller in the backlog, instead of closing it on arrival (a reset, for
/// a caller that had already sent its call); it waits at most [`ROOM_WAIT`].
#[tokio::test(start_paused = true)]
async fn a_caller_behind_a_burst_waits_for_room_instead_of_being_reset() {
    let (connections, mut incoming, addr) = listening(ConnectionLimits {
        max: Some(1),
        per_peer: 1_000,
        ..LIMITS
    })
    .await;
    // Silent connections, each pushing out an older one whose drop has not
    // happened yet (its Conn is still held).
    let mut held = Vec::new();
    let mut silent = Vec::new();
    for _ in 0..=ROOM_BEING_MADE {
        silent.push(client(addr, Ipv4Addr::LOCALHOST).await);
        held.push(incoming.next().await.expect("accepted").expect("admitted"));
    }
    assert_eq!(connections.open(), 1 + ROOM_BEING_MADE);
    let mut caller = client(addr, Ipv4Addr::LOCALHOST).await;
    caller
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("the caller's preface");
    let next = tokio::spawn(async move {
        let conn = incoming.next().await;
        (conn, incoming)
    });
    let mut buf = [0_u8; 16];
    let waited = tokio::time::timeout(ROOM_WAIT / 2, caller.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "the caller was closed on arrival: {waited:?}"
    );
    // One pushed-out connection is dropped: the caller is taken.
    drop(held.remove(0));
    let (taken, mut incoming) = next.await.expect("the accept loop");
    let taken = taken.expect("accepted").expect("admitted");
    assert_eq!(taken.state.peer, caller.local_addr().expect("address"));
    assert_eq!(
        connections.open(),
        1 + ROOM_BEING_MADE,
        "the caller pushed out another"
    );

    // With no drop at all, the loop waits only so long, then closes the next.
    let mut late = client(addr, Ipv4Addr::LOCALHOST).await;
    let started = Instant::now();
    let next = tokio::spawn(async move { incoming.next().await.map(|c| c.map(|_| ())) });
    assert!(closed(&mut late).await, "refused once the wait is over");
    assert!(started.elapsed() >= ROOM_WAIT, "{:?}", started.elapsed());
    next.abort();
    drop((held, silent, taken));
}

#[test]
fn the_default_total_is_three_quarters_of_the_open_file_limit() {
    let connections = Connections::new(ConnectionLimits::default(), 20_000, "the demo");
    assert_eq!(connections.max(), 15_000);
}

/// An HTTP/2 client on `tcp` that has opened stream 1 (a call whose body is
/// still to come); its answer, and the connection's task.
async fn call_opened(
    tcp: TcpStream,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    h2::client::ResponseFuture,
    tokio::task::JoinHandle<()>,
) {
    let (send, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.expect("ready");
    let call = http::Request::post("http://chorus/demo.v1.Demo/Call")
        .body(())
        .expect("request");
    let (answer, _body) = send.send_request(call, false).expect("stream 1 opened");
    (send, answer, driver)
}

/// Reads the server side of `conn` until the client's stream `id` has been
/// read, as the HTTP/2 server would.
async fn read_until_stream(conn: &mut Conn, id: u32) {
    let mut buf = [0_u8; 256];
    while conn.http2.last_stream() < id {
        assert!(
            conn.read(&mut buf).await.expect("read") > 0,
            "the client left"
        );
    }
}

fn is_remote_goaway(error: &h2::Error) -> bool {
    error.is_go_away() && error.is_remote() && error.reason() == Some(h2::Reason::NO_ERROR)
}

#[tokio::test]
async fn a_connection_closed_before_it_took_a_call_tells_its_client_that_none_was_taken() {
    let (_connections, mut incoming, addr) = listening(LIMITS).await;
    let (_send, answer, _driver) = call_opened(client(addr, Ipv4Addr::LOCALHOST).await).await;
    let mut conn_first = incoming.next().await.expect("accepted").expect("admitted");
    // The server has read the call, but no layer has taken it yet.
    read_until_stream(&mut conn_first, 1).await;
    // A second asks too: no connection is silent, so the oldest goes.
    let (_send_second, _answer_second, _driver_second) =
        call_opened(client(addr, Ipv4Addr::LOCALHOST).await).await;
    let mut conn_second = incoming.next().await.expect("accepted").expect("admitted");
    read_until_stream(&mut conn_second, 1).await;
    let _third = client(addr, Ipv4Addr::LOCALHOST).await;
    let conn_third = incoming.next().await.expect("accepted").expect("admitted");
    // The first is evicted: the call it read must not run now.
    assert!(
        !conn_first.state.take_call(Some(&admin())),
        "a call taken on an evicted connection"
    );
    let error = served(conn_first).await;
    assert!(error.to_string().contains("per-peer"), "{error}");
    let refused = answer.await.expect_err("the call has no answer");
    assert!(
        is_remote_goaway(&refused),
        "the client was not told its call was not taken: {refused:?}"
    );
    // A connection that took a call is never evicted in its place.
    assert!(conn_third.state.take_call(Some(&admin())));
}

#[tokio::test]
async fn a_connection_closed_after_a_call_names_it_and_later_calls_are_not_taken() {
    let (_connections, mut incoming, addr) = listening(LIMITS).await;
    let (send, answer, _driver) = call_opened(client(addr, Ipv4Addr::LOCALHOST).await).await;
    let mut conn = incoming.next().await.expect("accepted").expect("admitted");
    read_until_stream(&mut conn, 1).await;
    assert!(conn.state.take_call(Some(&admin())), "the first call runs");
    conn.state.close("the demo closes it".to_owned());
    let error = served(conn).await;
    assert!(error.to_string().contains("the demo closes it"), "{error}");
    // Stream 1 was taken: its client must not think otherwise.
    let lost = answer.await.expect_err("the call has no answer");
    assert!(
        !lost.is_go_away(),
        "a taken call reported as not taken: {lost:?}"
    );
    // A call after the goodbye is refused unsent.
    let later = match send.ready().await {
        Err(e) => e,
        Ok(mut ready) => {
            let call = http::Request::post("http://chorus/demo.v1.Demo/Call")
                .body(())
                .expect("request");
            match ready.send_request(call, true) {
                Err(e) => e,
                Ok((answer, _)) => answer.await.expect_err("no answer after the goodbye"),
            }
        }
    };
    assert!(is_remote_goaway(&later), "{later:?}");
}

#[tokio::test]
async fn a_connection_whose_call_came_outlives_silent_ones_that_came_after_it() {
    let (_connections, mut incoming, addr) = listening(LIMITS).await;
    let (_send, _answer, _driver) = call_opened(client(addr, Ipv4Addr::LOCALHOST).await).await;
    let mut asking = incoming.next().await.expect("accepted").expect("admitted");
    read_until_stream(&mut asking, 1).await;
    let mut silent = client(addr, Ipv4Addr::LOCALHOST).await;
    let conn_silent = incoming.next().await.expect("accepted").expect("admitted");
    // One too many for the address: the silent one goes, though it is newer.
    let _third = client(addr, Ipv4Addr::LOCALHOST).await;
    let _conn_third = incoming.next().await.expect("accepted").expect("admitted");
    let error = served(conn_silent).await;
    assert!(error.to_string().contains("per-peer"), "{error}");
    assert!(closed(&mut silent).await);
    assert!(
        asking.state.take_call(Some(&admin())),
        "the connection whose call came was closed"
    );
}

/// One credential's connections past `--max-connections-per-credential`:
/// the oldest without a call in flight is closed; one with a call in flight
/// is not, and another credential's are not.
#[tokio::test]
async fn a_credentials_connections_past_its_limit_close_its_oldest_idle_one() {
    let (connections, mut incoming, addr) = listening(ConnectionLimits {
        max: Some(64),
        per_peer: 64,
        per_credential: 2,
        ..LIMITS
    })
    .await;
    let mut clients = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..4 {
        clients.push(client(addr, Ipv4Addr::LOCALHOST).await);
        conns.push(incoming.next().await.expect("accepted").expect("admitted"));
    }
    let [first, second, third, fourth]: [Conn; 4] = conns.try_into().expect("four");
    // The first is busy (a call in flight); the second idle.
    assert!(first.state.take_call(Some(&viewer("v1"))));
    let busy = first.state.call();
    assert!(second.state.take_call(Some(&viewer("v1"))));
    // Another credential's connection counts for it alone.
    assert!(fourth.state.take_call(Some(&viewer("v2"))));
    let first = tokio::spawn(served(first));
    let fourth = tokio::spawn(served(fourth));
    // A third of v1's: its oldest idle one (the second) is closed.
    assert!(third.state.take_call(Some(&viewer("v1"))));
    let error = served(second).await;
    assert!(
        error
            .to_string()
            .contains("--max-connections-per-credential"),
        "{error}"
    );
    assert!(
        closed(&mut clients[1]).await,
        "the oldest idle one was closed"
    );
    assert!(
        !first.is_finished(),
        "a connection with a call in flight stays"
    );
    assert!(
        !fourth.is_finished(),
        "another credential's connection stays"
    );
    drop(busy);
    first.abort();
    fourth.abort();
    assert!(connections.open() >= 3);
}

/// Keys other than admins' hold at most seven eighths of the connections:
/// past that, a viewer's newly proven connection closes the oldest idle one
/// of theirs, never an admin's.
#[tokio::test]
async fn keys_without_reserved_room_leave_an_eighth_of_the_connections_to_admins_and_agents() {
    let (_connections, mut incoming, addr) = listening(ConnectionLimits {
        max: Some(16),
        per_peer: 64,
        per_credential: 64,
        ..LIMITS
    })
    .await;
    let mut clients = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..16 {
        clients.push(client(addr, Ipv4Addr::LOCALHOST).await);
        conns.push(incoming.next().await.expect("accepted").expect("admitted"));
    }
    let mut conns = conns.into_iter();
    let admins = conns.next().expect("a connection");
    assert!(admins.state.take_call(Some(&admin())));
    let admins = tokio::spawn(served(admins));
    // Fourteen viewers' connections: seven eighths of sixteen, the most
    // they may hold.
    let oldest = conns.next().expect("a connection");
    assert!(oldest.state.take_call(Some(&viewer("v0"))));
    let mut rest = Vec::new();
    for i in 1..14 {
        let conn = conns.next().expect("a connection");
        assert!(conn.state.take_call(Some(&viewer(&format!("v{i}")))));
        rest.push(tokio::spawn(served(conn)));
    }
    let oldest = tokio::spawn(served(oldest));
    // A fifteenth: the oldest idle viewer's connection is closed.
    let fifteenth = conns.next().expect("a connection");
    assert!(fifteenth.state.take_call(Some(&viewer("v14"))));
    let error = oldest.await.expect("served");
    assert!(
        error.to_string().contains("kept for admins and agents"),
        "{error}"
    );
    assert!(
        closed(&mut clients[1]).await,
        "the oldest viewer's was closed"
    );
    assert!(!admins.is_finished(), "an admin's connection stays");
    assert!(
        rest.iter().all(|r| !r.is_finished()),
        "the newer viewers' stay"
    );
    admins.abort();
    for r in rest {
        r.abort();
    }
}
