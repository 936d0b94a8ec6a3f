//! The grant table with real callback connections (socket pairs): who is recalled,
//! when grants are refused, what a holder's end does.

use super::*;
use std::os::unix::net::UnixStream;

/// A client's callback connection: its handler records each recall and answers.
struct FakeClient {
    holder: Arc<Holder>,
    recalls: Arc<Mutex<Vec<String>>>,
    _client_side: gust_rpc::Connection,
}

fn client(g: &Arc<Grants>, id: u64) -> FakeClient {
    let (a, b) = UnixStream::pair().unwrap();
    let recalls = Arc::new(Mutex::new(Vec::new()));
    let seen = recalls.clone();
    let mut copts = gust_rpc::Options::new(Duration::from_secs(10));
    copts.handler = Some(Arc::new(move |req, _| match req {
        Request::Recall { paths } => {
            // A held size gives up end 42 of file `id` (size_cache.rs's answer).
            let sizes: Vec<HeldSize> = paths
                .iter()
                .filter_map(|k| gust_proto::path::size_path(k))
                .map(|p| HeldSize { path: p.into(), file_id: id as u128, end: 42, mtime_ns: 0 })
                .collect();
            let any = paths.iter().any(|k| gust_proto::path::size_path(k).is_some());
            lock(&seen).extend(paths);
            if any {
                (Ok(Response::HeldSizes { sizes }), Vec::new())
            } else {
                (Ok(Response::Ok), Vec::new())
            }
        }
        _ => (Err(libc::ENOSYS), Vec::new()),
    }));
    let client_side = gust_rpc::Connection::established(Box::new(a), copts).unwrap();
    let mut dopts = gust_rpc::Options::new(LEASE);
    let g2 = g.clone();
    dopts.on_end = Some(Arc::new(move |by_peer| g2.link_ended(id, by_peer)));
    let daemon_side = gust_rpc::Connection::established(Box::new(b), dopts).unwrap();
    let holder = g.hello(id).unwrap();
    g.set_link(&holder, daemon_side);
    FakeClient { holder, recalls, _client_side: client_side }
}

fn chmod(p: &str) -> Request {
    Request::SetAttr { path: p.into(), mode: Some(0o600), atime_ns: None, mtime_ns: None, ctime_ns: 0 }
}

fn recalled(c: &FakeClient) -> Vec<String> {
    lock(&c.recalls).clone()
}

#[test]
fn a_change_recalls_other_holders_but_not_the_changer() {
    let g = Arc::new(Grants::new());
    let (a, b) = (client(&g, 1), client(&g, 2));
    assert_eq!(g.grant("/f", &a.holder), Grant::New);
    assert_eq!(g.grant("/f", &b.holder), Grant::New);
    assert_eq!(g.grant("/f", &a.holder), Grant::Held, "a failed request must not take it back");
    let c = g.begin_change(&chmod("/f"), Some(1)).unwrap();
    g.end_change(c, false);
    assert_eq!(recalled(&a), Vec::<String>::new());
    assert_eq!(recalled(&b), vec!["/f".to_string()]);
    // b no longer holds it: a second change recalls nobody.
    let c = g.begin_change(&chmod("/f"), None).unwrap();
    g.end_change(c, false);
    assert_eq!(recalled(&b).len(), 1);
    assert_eq!(recalled(&a), vec!["/f".to_string()], "a change without a caller recalls every holder");
}

#[test]
fn no_grant_to_others_while_a_change_is_under_way_nor_on_a_contended_path() {
    let g = Arc::new(Grants::new());
    let (a, b) = (client(&g, 1), client(&g, 2));
    let c = g.begin_change(&chmod("/x"), Some(1)).unwrap();
    assert_eq!(g.grant("/x", &b.holder), Grant::No, "granted during another's change");
    assert_ne!(g.grant("/x", &a.holder), Grant::No, "the changer itself may be granted (its create's reply)");
    g.end_change(c, false);
    // Recalled from a: the path is contended for a while.
    let c = g.begin_change(&chmod("/x"), Some(2)).unwrap();
    g.end_change(c, false);
    assert_eq!(recalled(&a), vec!["/x".to_string()]);
    assert_eq!(g.grant("/x", &a.holder), Grant::No, "granted again right after a recall");
    assert_ne!(g.grant("/y", &a.holder), Grant::No, "another path is not contended");
}

#[test]
fn changes_that_touch_no_record_take_no_lock_and_removes_forget_the_path() {
    let g = Arc::new(Grants::new());
    let a = client(&g, 1);
    assert!(g.begin_change(&Request::Stat { path: "/f".into() }, Some(1)).is_none());
    assert_eq!(g.grant("/f", &a.holder), Grant::New);
    let c = g.begin_change(&Request::Remove { path: "/f".into(), kind: gust_proto::RemoveKind::NotDir }, Some(1));
    g.end_change(c.unwrap(), true);
    assert_eq!(g.counts().0, 0, "a removed path keeps no grant");
}

#[test]
fn a_holder_that_closed_its_connection_delays_nothing() {
    let g = Arc::new(Grants::new());
    let a = client(&g, 1);
    assert_eq!(g.grant("/f", &a.holder), Grant::New);
    drop(a); // the client's end closes: its process ended
    let t = Instant::now();
    let c = g.begin_change(&chmod("/f"), Some(2)).unwrap();
    g.end_change(c, false);
    assert!(t.elapsed() < LEASE, "waited {:?} for a holder that is gone", t.elapsed());
    assert_eq!(g.expired.load(Ordering::Relaxed), 0);
}

#[test]
fn a_client_without_a_callback_connection_gets_no_grant() {
    let g = Grants::new();
    let h = g.hello(7).unwrap();
    assert_eq!(g.grant("/f", &h), Grant::No);
    assert!(!h.leased());
}

#[test]
fn a_recall_takes_the_holders_other_grants_in_the_directory_along() {
    let g = Arc::new(Grants::new());
    let a = client(&g, 1);
    for p in ["/d/x", "/d/y", "/d/z", "/e/w"] {
        assert_eq!(g.grant(p, &a.holder), Grant::New);
    }
    let c = g.begin_change(&chmod("/d/x"), Some(2)).unwrap();
    g.end_change(c, false);
    let mut got = recalled(&a);
    got.sort();
    assert_eq!(got, vec!["/d/x", "/d/y", "/d/z"]);
    // Only /e/w is still held: a change of /d/y recalls nothing more.
    let c = g.begin_change(&chmod("/d/y"), Some(2)).unwrap();
    g.end_change(c, false);
    assert_eq!(recalled(&a).len(), 3);
    assert_eq!(g.counts().0, 1);
}

/// A listing page is granted whole after its records were read, and only if no
/// change of a record in its directory ended between the read and the grants: a
/// change that did means the page may hold the record from before it.
#[test]
fn a_listing_is_granted_whole_unless_a_change_in_its_directory_crossed_it() {
    let g = Arc::new(Grants::new());
    let (a, b) = (client(&g, 1), client(&g, 2));
    let page = |names: &[&str]| names.iter().map(|n| format!("/d/{n}")).collect::<Vec<_>>();

    let epoch = g.dir_epoch("/d");
    assert!(g.grant_listed("/d", &page(&["x", "y"]), &a.holder, epoch));
    assert_eq!(g.grant("/d/x", &a.holder), Grant::Held, "every entry is granted");
    // b changes /d/x after the grant: a is recalled, as after a stat.
    let c = g.begin_change(&chmod("/d/x"), Some(2)).unwrap();
    g.end_change(c, false);
    assert_eq!(recalled(&a), vec!["/d/x".to_string(), "/d/y".to_string()], "with its neighbour");

    // A change of /d/z that ends after b's read and before b's grants: no grants.
    let epoch = g.dir_epoch("/d");
    let c = g.begin_change(&chmod("/d/z"), Some(1)).unwrap();
    g.end_change(c, false);
    assert!(!g.grant_listed("/d", &page(&["w", "z"]), &b.holder, epoch));
    assert_eq!(g.grant("/d/w", &b.holder), Grant::New, "the page's grants were taken back");
    // A change under way on one entry: the page is not granted, the rest taken back.
    let epoch = g.dir_epoch("/d");
    let c = g.begin_change(&chmod("/d/v"), Some(1)).unwrap();
    assert!(!g.grant_listed("/d", &page(&["u", "v"]), &b.holder, epoch));
    g.end_change(c, false);
    assert_eq!(g.grant("/d/u", &b.holder), Grant::New);
    // Changes in another directory do not count (unless it shares the bucket).
    let epoch = g.dir_epoch("/d");
    let other = (0..).map(|i| format!("/e{i}")).find(|e| dir_bucket(e) != dir_bucket("/d")).unwrap();
    let c = g.begin_change(&chmod(&format!("{other}/f")), Some(1)).unwrap();
    g.end_change(c, false);
    assert!(g.grant_listed("/d", &page(&["t"]), &b.holder, epoch));
}

/// A client whose recall handler waits until `gate` says go (a holder slow to
/// answer), telling `started` when a recall arrived.
fn slow_client(
    g: &Arc<Grants>,
    id: u64,
    started: std::sync::mpsc::Sender<()>,
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
) -> (Arc<Holder>, gust_rpc::Connection) {
    let (a, b) = UnixStream::pair().unwrap();
    let started = Mutex::new(started);
    let mut copts = gust_rpc::Options::new(Duration::from_secs(10));
    copts.handler = Some(Arc::new(move |req, _| match req {
        Request::Recall { .. } => {
            let _ = lock(&started).send(());
            let (m, cv) = &*gate;
            let mut open = lock(m);
            while !*open {
                open = cv.wait(open).unwrap();
            }
            (Ok(Response::Ok), Vec::new())
        }
        _ => (Err(libc::ENOSYS), Vec::new()),
    }));
    let client_side = gust_rpc::Connection::established(Box::new(a), copts).unwrap();
    let daemon_side = gust_rpc::Connection::established(Box::new(b), gust_rpc::Options::new(LEASE)).unwrap();
    let holder = g.hello(id).unwrap();
    g.set_link(&holder, daemon_side);
    (holder, client_side)
}

/// A recall takes the holder's other grant in the directory along; while it is under
/// way, that path's entry stays even when nothing else refers to it, so that a
/// change of the path waits for the recall (with the entry gone, the change went
/// ahead at once, and the recall's end was then counted against the new entry: the
/// count went below zero and every later change of the path waited for ever, the
/// 600 s soak's stall).
#[test]
fn a_change_waits_for_a_recall_of_its_path_that_another_change_started() {
    let g = Arc::new(Grants::new());
    let (started_tx, started) = std::sync::mpsc::channel();
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let (x, _x_side) = slow_client(&g, 1, started_tx, gate.clone());
    let y = client(&g, 2);
    assert_eq!(g.grant("/d/a", &x), Grant::New);
    assert_eq!(g.grant("/d/b", &x), Grant::New);
    let g1 = g.clone();
    let first = std::thread::spawn(move || {
        let c = g1.begin_change(&chmod("/d/a"), Some(2)).unwrap();
        g1.end_change(c, false);
    });
    started.recv().unwrap();
    // Something that would drop an unused entry of /d/b (a failed read's ungrant).
    g.ungrant("/d/b", &y.holder);
    let (done_tx, done) = std::sync::mpsc::channel();
    let g2 = g.clone();
    let second = std::thread::spawn(move || {
        let c = g2.begin_change(&chmod("/d/b"), Some(2)).unwrap();
        done_tx.send(()).unwrap();
        g2.end_change(c, false);
    });
    // One-sided: with the entry kept, the second change cannot finish before the
    // gate opens, however long this waits.
    assert!(
        done.recv_timeout(Duration::from_millis(300)).is_err(),
        "a change of /d/b went ahead while its recall was under way"
    );
    {
        let (m, cv) = &*gate;
        *lock(m) = true;
        cv.notify_all();
    }
    first.join().unwrap();
    done.recv().unwrap();
    second.join().unwrap();
    // And the path is not stuck: a later change goes through.
    let c = g.begin_change(&chmod("/d/b"), Some(2)).unwrap();
    g.end_change(c, false);
}

/// A claim is refused while another client holds a grant in the directory, and
/// given once that grant is gone (taken back, or its holder gone); grants in other
/// directories, or the claimant's own, stand in no one's way.
#[test]
fn a_claim_waits_for_other_clients_grants_in_its_directory_only() {
    let g = Arc::new(Grants::new());
    let (a, b) = (client(&g, 1), client(&g, 2));
    a.holder.claims.store(true, Ordering::Relaxed);
    let only = |_: &str| true;
    assert_eq!(g.grant("/d/x", &b.holder), Grant::New);
    assert_eq!(g.grant("/e/y", &b.holder), Grant::New);
    assert_eq!(g.grant("/d/own", &a.holder), Grant::New);
    assert!(!g.claim("/d/new", &a.holder, only), "b holds /d/x");
    assert!(g.claim("/f/new", &a.holder, only), "b holds nothing in /f");
    g.ungrant("/d/x", &b.holder);
    assert!(g.claim("/d/new", &a.holder, only), "b's grant in /d is gone, a's own is no obstacle");
    // A client gone takes its directories' counts with it (its connection's end
    // is noticed on the connection's own thread: wait for it, bounded).
    assert!(!g.claim("/e/new", &a.holder, only));
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !g.claim("/e/new", &a.holder, only) {
        assert!(Instant::now() < deadline, "b is gone, yet its grant in /e still refuses the claim");
        std::thread::yield_now();
    }
}

#[test]
fn a_look_or_a_change_takes_held_sizes_back_but_another_writer_does_not() {
    let g = Arc::new(Grants::new());
    let (a, b) = (client(&g, 1), client(&g, 2));
    assert!(g.begin_look(&["/f"], Some(1)).is_none(), "no size held: no lock taken");
    let key = gust_proto::path::size_key("/f");
    assert_eq!(g.grant(&key, &a.holder), Grant::New);
    assert_eq!(g.grant(&key, &b.holder), Grant::New, "two writers hold at once");
    // A look of a's recalls b's hold only, and brings its size.
    let mut c = g.begin_look(&["/f"], Some(1)).unwrap();
    assert_eq!(c.take_sizes(), vec![HeldSize { path: "/f".into(), file_id: 2, end: 42, mtime_ns: 0 }]);
    g.end_change(c, false);
    assert_eq!(recalled(&b), vec![key.clone()]);
    assert!(recalled(&a).is_empty(), "the looker's own hold stays");
    // Growing the file (b's size merge) commutes with a's held size: no recall.
    let grow = Request::UpdateSize { path: "/f".into(), file_id: 2, end: 9, append_len: None, mtime_ns: 0 };
    let c = g.begin_change(&grow, Some(2)).unwrap();
    g.end_change(c, false);
    assert!(recalled(&a).is_empty());
    // A truncate of b's takes a's size back first.
    let truncate = Request::Truncate { path: "/f".into(), size: 0, mtime_ns: 0 };
    let mut c = g.begin_change(&truncate, Some(2)).unwrap();
    assert_eq!(c.take_sizes(), vec![HeldSize { path: "/f".into(), file_id: 1, end: 42, mtime_ns: 0 }]);
    g.end_change(c, false);
    assert_eq!(recalled(&a), vec![key]);
    assert!(g.begin_look(&["/f"], None).is_none(), "no size held any more");
}

/// A look at a record while another look's recall of its size is under way waits
/// for that recall, and the recalled size is applied before either goes on: the
/// holder's own look too (it gave the size up to the first). Before, the second
/// look found no holder (the first had taken it off) and read the record without
/// the size: ROMIO's preallocate saw its own old size in 1 run in 5 to 15.
#[test]
fn a_look_during_a_size_recall_waits_for_the_size_to_be_applied() {
    let g = Arc::new(Grants::new());
    let applied = Arc::new(Mutex::new(Vec::new()));
    let into = applied.clone();
    g.set_size_applier(Box::new(move |sizes| lock(&into).extend(sizes)));
    let (started_tx, started) = std::sync::mpsc::channel();
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let (writer, _writer_side) = slow_client(&g, 1, started_tx, gate.clone());
    let key = gust_proto::path::size_key("/f");
    assert_eq!(g.grant(&key, &writer), Grant::New);
    let g1 = g.clone();
    let first = std::thread::spawn(move || {
        let c = g1.begin_look(&["/f"], Some(2)).expect("another's hold is recalled");
        g1.end_change(c, false);
    });
    started.recv().unwrap();
    // The writer's own look, while the recall of its hold is under way.
    let (done_tx, done) = std::sync::mpsc::channel();
    let g2 = g.clone();
    let applied2 = applied.clone();
    let second = std::thread::spawn(move || {
        let c = g2.begin_look(&["/f"], Some(1));
        done_tx.send(lock(&applied2).len()).unwrap();
        if let Some(c) = c {
            g2.end_change(c, false);
        }
    });
    assert!(
        done.recv_timeout(Duration::from_millis(300)).is_err(),
        "a look went ahead while a recall of the record's size was under way"
    );
    {
        let (m, cv) = &*gate;
        *lock(m) = true;
        cv.notify_all();
    }
    first.join().unwrap();
    // The slow client answers Ok (no sizes): what counts is the order.
    assert_eq!(done.recv().unwrap(), lock(&applied).len());
    second.join().unwrap();
    assert!(g.begin_look(&["/f"], None).is_none(), "nothing held or recalled any more");
}
