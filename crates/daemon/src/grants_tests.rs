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
            lock(&seen).extend(paths);
            (Ok(Response::Ok), Vec::new())
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
