//! Two connections over a socket pair, each calling the other.

use super::*;
use std::os::unix::net::UnixStream;
use std::sync::Barrier;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const WAIT: Duration = Duration::from_secs(10);

/// Answers a heartbeat from `n` with a lease of `n * 2` ms and the bulk reversed:
/// every reply says which request it answers.
fn echo() -> Handler {
    Arc::new(|req, mut bulk: Vec<u8>| match req {
        Request::Heartbeat { from } => {
            bulk.reverse();
            (Ok(Response::Fenced { lease_left_ms: from as u64 * 2 }), bulk)
        }
        _ => (Err(libc::EINVAL), Vec::new()),
    })
}

fn opts(handler: Option<Handler>) -> Options {
    Options { handler, ..Options::new(WAIT) }
}

/// (the connecting side, the accepting side), with handlers as given.
fn pair(client: Option<Handler>, daemon: Option<Handler>) -> (Connection, Connection) {
    let (a, b) = UnixStream::pair().unwrap();
    let accepting = std::thread::spawn(move || Connection::accept(Box::new(b), SECRET, opts(daemon)).unwrap());
    let c = Connection::client(Box::new(a), SECRET, opts(client)).unwrap();
    (c, accepting.join().unwrap())
}

fn heartbeat(c: &Connection, n: u32) -> Result<(Reply, Vec<u8>), Error> {
    c.call(&Request::Heartbeat { from: n }, &n.to_le_bytes(), WAIT)
}

#[test]
fn both_sides_call_with_many_calls_in_flight() {
    let (c, d) = pair(Some(echo()), Some(echo()));
    let (c, d) = (Arc::new(c), Arc::new(d));
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let (side, start) = (if t % 2 == 0 { c.clone() } else { d.clone() }, start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..200 {
                    let n = t * 1000 + i;
                    let (reply, bulk) = heartbeat(&side, n).unwrap();
                    assert_eq!(reply, Ok(Response::Fenced { lease_left_ms: n as u64 * 2 }), "call {n}");
                    let mut want = n.to_le_bytes().to_vec();
                    want.reverse();
                    assert_eq!(bulk, want, "bulk of call {n}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(c.alive() && d.alive());
}

#[test]
fn a_request_nobody_answers_here_ends_the_connection() {
    // The accepting side has no handler: a call from it is a protocol error there.
    let (c, d) = pair(None, Some(echo()));
    assert!(heartbeat(&c, 1).is_ok());
    match heartbeat(&d, 2) {
        Err(Error::Lost(_)) => {}
        other => panic!("a call to a side without a handler: {other:?}"),
    }
    // The connecting side saw the end as well, and says so to its next call.
    match heartbeat(&c, 3) {
        Err(Error::Lost(_)) => {}
        other => panic!("after the connection ended: {other:?}"),
    }
    assert!(!c.alive());
}

#[test]
fn unknown_requests_are_answered_with_their_errno() {
    let (c, _d) = pair(None, Some(echo()));
    let (reply, _) = c.call(&Request::Ping, &[], WAIT).unwrap();
    assert_eq!(reply, Err(libc::EINVAL), "the handler's own answer");
    // An op nobody knows, sent raw: ENOSYS, and the connection stays.
    let (body, _) = c.call_raw(0x7ff0, &0x7ff0u32.to_le_bytes(), &[], WAIT).unwrap();
    assert_eq!(decode::<Reply>(&body).unwrap(), Err(libc::ENOSYS));
    assert!(heartbeat(&c, 4).is_ok());
}

#[test]
fn a_call_past_its_bound_times_out_and_waiting_callers_learn_of_the_end() {
    // The accepting side's handler holds the first request until told.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let held: Handler = Arc::new(move |_, _| {
        let _ = lock(&release_rx).recv();
        (Ok(Response::Ok), Vec::new())
    });
    let (c, d) = pair(None, Some(held));
    let c = Arc::new(c);
    // A second caller waits on the same connection meanwhile.
    let other = {
        let c = c.clone();
        std::thread::spawn(move || c.call(&Request::Ping, &[], WAIT))
    };
    assert_eq!(c.call(&Request::Ping, &[], Duration::from_millis(50)), Err(Error::TimedOut(Duration::from_millis(50))));
    // The timed-out call closed the connection: the other caller is told, well
    // before its own bound.
    match other.join().unwrap() {
        Err(Error::Lost(_)) => {}
        r => panic!("the other caller: {r:?}"),
    }
    assert!(!c.alive());
    drop(release_tx);
    drop(d);
}

#[test]
fn a_wrong_secret_is_refused() {
    let (a, b) = UnixStream::pair().unwrap();
    let accepting = std::thread::spawn(move || Connection::accept(Box::new(b), SECRET, opts(None)));
    let wrong = Connection::client(Box::new(a), b"not the secret, not the secret..", opts(None));
    assert!(matches!(wrong, Err(Error::Connect(_))), "client: {:?}", wrong.err());
    assert!(matches!(accepting.join().unwrap(), Err(Error::Connect(_))));
}

#[test]
fn nothing_listening_is_refused() {
    let dir = std::env::temp_dir().join(format!("gust-rpc-{}", std::process::id()));
    let ep = Endpoint::Unix(dir.join("nobody.sock"));
    let _ = std::fs::create_dir_all(&dir);
    let e = Connection::open(&ep, SECRET, opts(None)).err().unwrap();
    assert!(matches!(e, Error::Refused(_) | Error::Connect(_)), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A notification reaches the other side's handler, and its reply, which nobody
/// waits for, is dropped without disturbing the calls that follow.
#[test]
fn a_notification_is_handled_and_its_reply_dropped() {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let seen: Handler = Arc::new(move |req, _bulk| {
        let _ = lock(&tx).send(req);
        (Ok(Response::Ok), Vec::new())
    });
    // The daemon's side notifies the client's, as a daemon grants a lock.
    let (_c, d) = pair(Some(seen), None);
    d.notify(&Request::LockGranted { token: 7, errno: 0 }).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Request::LockGranted { token: 7, errno: 0 });
    assert!(d.alive(), "the reply nobody waited for was dropped, not taken for an error");
    let (c, d) = pair(Some(echo()), Some(echo()));
    c.notify(&Request::Heartbeat { from: 1 }).unwrap();
    let (reply, _) = heartbeat(&c, 2).unwrap();
    assert_eq!(reply, Ok(Response::Fenced { lease_left_ms: 4 }), "the next call gets its own reply");
    d.close();
    assert!(wait_dead(&c), "the other side closed");
    assert!(c.notify(&Request::Ping).is_err(), "a notification on an ended connection fails");
}

fn wait_dead(c: &Connection) -> bool {
    let end = std::time::Instant::now() + WAIT;
    while c.alive() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    !c.alive()
}
