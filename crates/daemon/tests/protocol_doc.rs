//! docs/PROTOCOL.md against the code: its version, its request and response tables,
//! the unassigned op codes, `RemoveKind` and the limits it states. A row changed by
//! hand, or a request added without its row, fails here.

use gust_proto::{
    Copies, RemoveKind, WhileRecovering, BODY_BYTES_MAX, BULK_BYTES_MAX, CREATE_BATCH_ENTRIES_MAX, INLINE_BYTES_MAX,
    NAME_BYTES_MAX, OPS, OP_MAX, PATH_BYTES_MAX, PROTOCOL_VERSION, READ_MANY_ENTRIES_MAX, REQUEST_FACTS, RESPONSES,
    SPANS_PER_REQUEST_MAX,
};
use std::collections::BTreeMap;

fn doc() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The rows of the table whose header line starts with `header`: cells trimmed,
/// the outer pipes dropped.
fn table(doc: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "docs/PROTOCOL.md has no table headed {header:?}");
    lines
        .skip(1) // the | --- | line
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect())
        .collect()
}

fn unquote(cell: &str) -> &str {
    cell.trim_matches('`')
}

#[test]
fn version_matches_the_code() {
    let d = doc();
    let title = d.lines().next().unwrap();
    assert_eq!(title, format!("# GustFS wire protocol (version {PROTOCOL_VERSION})"));
    assert!(d.contains(&format!("     4    2 version     {PROTOCOL_VERSION} (PROTOCOL_VERSION)")), "frame diagram");
    // The hex examples carry the version too.
    assert!(d.contains(&format!("47555354 {:02x}00 ", PROTOCOL_VERSION)), "hex examples of version {PROTOCOL_VERSION}");
}

#[test]
fn request_table_matches_the_request_list() {
    let d = doc();
    let rows = table(&d, "| op | name |");
    let documented: BTreeMap<u16, &Vec<String>> =
        rows.iter().map(|r| (r[0].parse::<u16>().unwrap_or_else(|_| panic!("op cell {:?}", r[0])), r)).collect();
    assert_eq!(documented.len(), rows.len(), "an op code appears twice in the table");
    let code: Vec<u16> = REQUEST_FACTS.iter().map(|f| f.op).collect();
    let doc_ops: Vec<u16> = documented.keys().copied().collect();
    assert_eq!(doc_ops, code, "op codes in docs/PROTOCOL.md vs requests!");
    for f in REQUEST_FACTS {
        let r = documented[&f.op];
        assert_eq!(r.len(), 7, "op {}: {} cells", f.op, r.len());
        assert_eq!(unquote(&r[1]), f.name, "op {}", f.op);
        let resend = match f.resend {
            "true" => Some("yes"),
            "false" => Some("no"),
            _ => None,
        };
        match resend {
            Some(want) => assert_eq!(r[3], want, "op {} ({}): resend", f.op, f.name),
            // A condition: the doc says it in words, never a bare yes or no.
            None => assert!(r[3] != "yes" && r[3] != "no", "op {} ({}): resend is {}", f.op, f.name, f.resend),
        }
        let copies = match f.copies {
            Copies::All => "all",
            Copies::First => "first",
            Copies::Addressed => "addressed",
        };
        assert_eq!(r[4], copies, "op {} ({}): copies", f.op, f.name);
        let recovering = match f.while_recovering {
            WhileRecovering::Serves => "serves",
            WhileRecovering::Refuses => "EHOSTDOWN",
        };
        assert_eq!(r[5], recovering, "op {} ({}): recovering", f.op, f.name);
    }
    // The sentence that lists the free codes.
    let unassigned: Vec<String> =
        (1..=OP_MAX).filter(|op| !OPS.iter().any(|(o, _)| o == op)).map(|o| o.to_string()).collect();
    let want = format!("Op codes not assigned in this version: {}.", unassigned.join(", "));
    assert!(d.contains(&want), "docs/PROTOCOL.md should say: {want}");
}

#[test]
fn response_table_matches_the_response_list() {
    let rows = table(&doc(), "| tag | response |");
    let documented: Vec<(u32, String)> =
        rows.iter().map(|r| (r[0].parse().unwrap(), unquote(&r[1]).to_string())).collect();
    let code: Vec<(u32, String)> = RESPONSES.iter().map(|(t, n)| (*t, n.to_string())).collect();
    assert_eq!(documented, code);
}

#[test]
fn remove_kinds_are_all_documented() {
    // Exhaustive: a new kind does not compile until it is named here.
    fn name(k: RemoveKind) -> &'static str {
        match k {
            RemoveKind::NotDir => "NotDir",
            RemoveKind::Dir => "Dir",
            RemoveKind::Moved => "Moved",
        }
    }
    let d = doc();
    let row = d.lines().find(|l| l.starts_with("| `RemoveKind` |")).expect("RemoveKind row");
    for k in [RemoveKind::NotDir, RemoveKind::Dir, RemoveKind::Moved] {
        let tag = u32::from_le_bytes(gust_proto::encode(&k)[..4].try_into().unwrap());
        assert!(row.contains(&format!("{tag} `{}`", name(k))), "RemoveKind {} is tag {tag}: {row}", name(k));
    }
}

#[test]
fn stated_limits_match_the_code() {
    let d = doc();
    let mib = |b: u64| b >> 20;
    let stated = [
        format!("is at its connection limit, {})", thousands(gust_daemon::server::CONNECTIONS_MAX)),
        format!("<= {} MiB     (BODY_BYTES_MAX)", mib(BODY_BYTES_MAX as u64)),
        format!("<= {} MiB    (BULK_BYTES_MAX)", mib(BULK_BYTES_MAX as u64)),
        format!("at most {PATH_BYTES_MAX} bytes, components at most {NAME_BYTES_MAX}"),
        format!("`INLINE_BYTES_MAX` = {} KiB", INLINE_BYTES_MAX >> 10),
        format!("`CREATE_BATCH_ENTRIES_MAX` = {CREATE_BATCH_ENTRIES_MAX}"),
        format!("`READ_MANY_ENTRIES_MAX` = {READ_MANY_ENTRIES_MAX}"),
        format!("at most {SPANS_PER_REQUEST_MAX} spans per"),
        format!(
            "at most {} locks and waits per daemon, {} per client",
            thousands(gust_daemon::locks::ENTRIES_MAX as u64),
            thousands(gust_daemon::locks::CLIENT_ENTRIES_MAX as u64)
        ),
    ];
    // Spacing aside: the frame diagram aligns its columns.
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let d = squash(&d);
    for s in &stated {
        assert!(d.contains(&squash(s)), "docs/PROTOCOL.md should say {s:?}");
    }
}

/// 65536 as "65,536".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
