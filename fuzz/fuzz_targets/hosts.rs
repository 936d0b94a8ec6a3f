//! The hosts file, the instance secret and endpoints, as text from the input (invalid
//! UTF-8 replaced, as a reader of a damaged file would see it).
//!
//! Checks: nothing panics; a parsed hosts file renders to text that parses to the same
//! file; a parsed daemon line renders to one that parses the same; a parsed secret is
//! at least 16 bytes and its text was exactly its hex (no signs, no other digits); a
//! parsed endpoint displays as text that parses to the same endpoint.
#![no_main]

use gust_hosts::{hex, parse_secret, DaemonEntry, Endpoint, HostsFile};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("fuzz.hosts");
    if let Ok(h) = HostsFile::parse(path, &text) {
        let again = HostsFile::parse(path, &h.render()).expect("a rendered hosts file parses");
        assert_eq!(again, h);
    }
    for line in text.lines() {
        if let Ok(d) = DaemonEntry::parse(line) {
            assert_eq!(DaemonEntry::parse(&d.render()).expect("a rendered daemon line parses"), d);
        }
    }
    if let Some(s) = parse_secret(&text) {
        assert!(s.len() >= 16);
        assert_eq!(hex(&s), text.trim().to_ascii_lowercase(), "a secret is its hex");
    }
    for word in std::iter::once(&text[..]).chain(text.split_whitespace()) {
        if let Ok(e) = word.parse::<Endpoint>() {
            assert_eq!(e.to_string().parse::<Endpoint>(), Ok(e));
        }
    }
});
