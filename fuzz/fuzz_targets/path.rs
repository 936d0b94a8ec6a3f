//! The path rules (gust_proto::path) on arbitrary text, split at newlines into up to
//! three paths a, b, c. Checks the rules' stated invariants: what `normalize` makes
//! `validate` accepts and `normalize` leaves alone, and it is never longer than its
//! input; what `validate` accepts `normalize` leaves alone; a valid path below the
//! root is its parent joined with its last name, and lies below that parent;
//! `is_below` is a prefix at a component boundary; `rebase` moves a path below one
//! valid directory to the same place below another and back.
#![no_main]

use gust_proto::path::{check_name, child, is_below, join, normalize, parent, rebase, validate};
use gust_proto::PATH_BYTES_MAX;
use libfuzzer_sys::fuzz_target;

fn one(p: &str) {
    if let Ok(n) = normalize(p) {
        assert_eq!(validate(&n), Ok(()), "normalize({p:?}) = {n:?} validates");
        assert_eq!(normalize(&n).as_deref(), Ok(&n[..]), "normalizing is idempotent");
        assert!(n.len() <= p.len().max(1));
    }
    if validate(p).is_ok() {
        assert_eq!(normalize(p).as_deref(), Ok(p), "a valid path is normalized");
        if p != "/" {
            let dir = parent(p);
            let name = &p[p.rfind('/').unwrap() + 1..];
            assert_eq!(validate(dir), Ok(()));
            assert_eq!(check_name(name), Ok(()));
            assert_eq!(child(dir, name).as_deref(), Ok(p));
            assert!(is_below(p, dir) && !is_below(dir, p));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let a = parts.next().unwrap_or("");
    let b = parts.next().unwrap_or("/");
    let c = parts.next().unwrap_or("/");
    one(a);
    one(b);
    one(c);
    let _ = check_name(a);
    if validate(a).is_ok() && validate(b).is_ok() {
        let prefix = b == "/" || a.starts_with(&format!("{b}/"));
        assert_eq!(is_below(a, b), prefix && a != b, "is_below({a:?}, {b:?})");
        if b != "/" && validate(c).is_ok() && c != "/" {
            let moved = rebase(a, b, c);
            assert_eq!(moved.is_some(), a == b || is_below(a, b));
            if let Some(m) = moved {
                match validate(&m) {
                    Ok(()) => assert_eq!(rebase(&m, c, b).as_deref(), Some(a), "rebase there and back"),
                    Err(e) => assert!(e == libc_enametoolong() && m.len() > PATH_BYTES_MAX),
                }
                assert_eq!(m, if a == b { c.to_string() } else { join(c, &a[b.len() + 1..]) });
            }
        }
    }
});

/// ENAMETOOLONG (Linux numbering, as the path rules return it).
fn libc_enametoolong() -> i32 {
    36
}
