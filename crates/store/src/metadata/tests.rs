//! Tests of the metadata store: record layouts, merges, keys, pages.

use super::*;
use crate::record::{daemon_owner, VALUE_FORMAT, VALUE_FORMAT_1, VALUE_FORMAT_XATTRS};

fn rec(kind: FileKind) -> Record {
    Record {
        kind,
        mode: 0o644,
        size: 0,
        file_id: 7,
        nlink: 1,
        ctime_ns: 1,
        mtime_ns: 1,
        atime_ns: 1,
        target: String::new(),
        uid: 1000,
        gid: 100,
        xattrs: Vec::new(),
    }
}

#[test]
fn record_encoding_roundtrip_and_rejects_garbage() {
    let mut r = rec(FileKind::Symlink);
    r.target = "../x/y".into();
    assert_eq!(decode_record(&encode_record(&r)), Some(r));
    assert_eq!(decode_record(&[1, 2, 3]), None);
    let mut bad = encode_record(&rec(FileKind::File));
    bad[0] = 9;
    assert_eq!(decode_record(&bad), None);
    for kind in [FileKind::Fifo, FileKind::Socket, FileKind::BlockDevice, FileKind::CharDevice] {
        assert_eq!(decode_record(&encode_record(&rec(kind))), Some(rec(kind)));
    }
}

/// A format-1 value (written before owners were stored) reads as the daemon
/// user's, and is rewritten as format 2 by the next change.
#[test]
fn format_1_values_still_read() {
    let mut r = rec(FileKind::Symlink);
    r.target = "t".into();
    let v2 = encode_record(&r);
    let mut v1 = vec![VALUE_FORMAT_1];
    v1.extend_from_slice(&v2[1..58]);
    v1.extend_from_slice(&v2[66..]);
    let (uid, gid) = daemon_owner();
    assert_eq!(decode_record(&v1), Some(Record { uid, gid, ..r }));
    assert_eq!(decode_record(&v1[..v1.len() - 1]), None);
}

#[test]
fn dir_changed_counts_subdirectories_and_moves_times() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let mut dir = rec(FileKind::Dir);
    dir.nlink = 2;
    s.create("/d", &dir, true).unwrap();
    s.create("/f", &rec(FileKind::File), true).unwrap();
    for t in 0..5 {
        s.dir_changed("/d", 1, 10 + t).unwrap();
    }
    // An older time never moves the times back.
    s.dir_changed("/d", -1, 3).unwrap();
    let r = s.get("/d").unwrap().unwrap();
    assert_eq!((r.nlink, r.mtime_ns, r.ctime_ns), (6, 14, 14));
    for _ in 0..10 {
        s.dir_changed("/d", -1, 20).unwrap();
    }
    assert_eq!(s.get("/d").unwrap().unwrap().nlink, 2, "never below 2");
    s.db.flush().unwrap();
    s.dir_changed("/d", 1, 21).unwrap();
    assert_eq!(s.get("/d").unwrap().unwrap().nlink, 3);
    assert_eq!(s.dir_changed("/f", 1, 1), Err(libc::ENOTDIR));
    assert_eq!(s.dir_changed("/nope", 1, 1), Err(libc::ENOENT));
    assert_eq!(s.dir_changed("/", 1, 1), Ok(()));
    // Removed between the check and the merge: stays removed.
    s.remove("/d", true).unwrap();
    s.db.merge(key_of("/d"), dir_operand(1, 5)).unwrap();
    assert_eq!(s.get("/d").unwrap(), None);
}

#[test]
fn set_owner_clears_set_id_bits_of_files_only() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let mut f = rec(FileKind::File);
    f.mode = 0o6755;
    s.create("/f", &f, true).unwrap();
    let mut lock = rec(FileKind::File);
    lock.mode = 0o2644; // S_ISGID without group execute: kept
    s.create("/l", &lock, true).unwrap();
    let mut dir = rec(FileKind::Dir);
    dir.mode = 0o2775;
    s.create("/d", &dir, true).unwrap();
    let r = s.set_owner("/f", Some(5), None, 9).unwrap();
    assert_eq!((r.uid, r.gid, r.mode, r.ctime_ns), (5, 100, 0o755, 9));
    assert_eq!(s.set_owner("/l", None, Some(6), 9).unwrap().mode, 0o2644);
    assert_eq!(s.set_owner("/d", Some(5), Some(6), 9).unwrap().mode, 0o2775);
    assert_eq!(s.get("/f").unwrap().unwrap().uid, 5);
    assert_eq!(s.set_owner("/nope", Some(1), None, 9), Err(libc::ENOENT));
}

#[test]
fn mutated_values_never_panic_the_decoder() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut r = rec(FileKind::Symlink);
    r.target = "target".into();
    let mut x = rec(FileKind::File);
    x.xattrs = vec![("user.a".into(), b"1".to_vec()), ("user.b".into(), b"22".to_vec())];
    let encs = [encode_record(&r), encode_record(&x)];
    for i in 0..100_000 {
        let mut m = encs[i % 2].clone();
        match rng.gen_range(0..3) {
            0 => {
                let i = rng.gen_range(0..m.len());
                m[i] = rng.gen();
            }
            1 => m.truncate(rng.gen_range(0..m.len())),
            _ => m.push(rng.gen()),
        }
        if let Some(d) = decode_record(&m) {
            // Whatever decodes in the current format must re-encode to the same
            // bytes (a format-1 value re-encodes as format 2).
            if m[0] == VALUE_FORMAT || m[0] == VALUE_FORMAT_XATTRS {
                assert_eq!(encode_record(&d), m);
            }
        }
    }
}

#[test]
fn keys_group_children_and_roundtrip() {
    assert_eq!(key_of("/a"), b"/\0a");
    assert_eq!(key_of("/a/b"), b"/a\0b");
    assert_eq!(path_of(&key_of("/a/b/c")).unwrap(), "/a/b/c");
    assert_eq!(path_of(&key_of("/x")).unwrap(), "/x");
}

#[test]
fn merge_grows_size_and_never_resurrects() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/f", &rec(FileKind::File), true).unwrap();
    s.update_size("/f", 7, 100, None, 5).unwrap();
    s.update_size("/f", 7, 50, None, 6).unwrap();
    assert_eq!(s.get("/f").unwrap().unwrap().size, 100);
    assert_eq!(s.update_size("/f", 7, 0, Some(10), 7).unwrap(), 100);
    assert_eq!(s.get("/f").unwrap().unwrap().size, 110);
    assert_eq!(s.update_size("/f", 8, 500, None, 8), Err(libc::ESTALE));
    s.remove("/f", false).unwrap();
    assert_eq!(s.update_size("/f", 7, 500, None, 8), Err(libc::ENOENT));
    // A merge racing the removal (checked before, merged after) leaves a
    // tombstone, never a resurrected record.
    s.db.merge(key_of("/f"), grow_operand(500, 9)).unwrap();
    assert_eq!(s.get("/f").unwrap(), None);
    // A new file at the same path starts clean.
    s.create("/f", &rec(FileKind::File), true).unwrap();
    assert_eq!(s.get("/f").unwrap().unwrap().size, 0);
}

/// The cost of a lookup must not grow with the number of writes before it: a stat
/// after 10,000 size updates applies at most MERGE_OPERANDS_PER_KEY_MAX operands,
/// whether the record is still in the memtable or was flushed before the writes.
#[test]
fn lookups_apply_a_bounded_number_of_size_operands() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let writes = 10_000u64;
    for (path, flush_first) in [("/hot", false), ("/flushed", true)] {
        s.create(path, &rec(FileKind::File), true).unwrap();
        if flush_first {
            s.db.flush().unwrap();
        }
        for i in 0..writes {
            s.update_size(path, 7, (i + 1) * 100, None, i as i64).unwrap();
        }
        for _ in 0..3 {
            let before = s.merge_operands_applied();
            let r = s.get(path).unwrap().unwrap();
            let applied = s.merge_operands_applied() - before;
            assert_eq!(r.size, writes * 100, "{path}");
            assert_eq!(r.mtime_ns, writes as i64 - 1, "{path}");
            assert!(
                applied <= MERGE_OPERANDS_PER_KEY_MAX as u64,
                "{path}: a lookup applied {applied} operands after {writes} writes"
            );
        }
    }
    // Folding must not break the size semantics: max of all ends, truncate exact.
    s.update_size("/hot", 7, 5, None, 1).unwrap();
    assert_eq!(s.get("/hot").unwrap().unwrap().size, writes * 100);
    s.truncate("/hot", 10, 2).unwrap();
    for i in 0..100 {
        s.update_size("/hot", 7, 3 + i % 5, None, 3).unwrap();
    }
    assert_eq!(s.get("/hot").unwrap().unwrap().size, 10);
}

#[test]
fn readdir_pages_and_scan_tree() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/d", &rec(FileKind::Dir), true).unwrap();
    for i in 0..25 {
        s.create(&format!("/d/f{i:02}"), &rec(FileKind::File), true).unwrap();
    }
    s.create("/d/f00/deep", &rec(FileKind::File), true).unwrap();
    s.create("/dd", &rec(FileKind::File), true).unwrap();
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, done) = s.read_dir("/d", after.as_deref(), 10, usize::MAX).unwrap();
        after = page.last().map(|e| e.0.clone());
        all.extend(page);
        if done {
            break;
        }
    }
    assert_eq!(all.len(), 25);
    let mut tree = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, last, done) = s.scan_tree("/d", after.as_deref(), 7).unwrap();
        tree.extend(page.into_iter().map(|p| p.0));
        after = last.or(after);
        if done {
            break;
        }
    }
    assert_eq!(tree.len(), 26);
    assert!(tree.contains(&"/d/f00/deep".to_string()));
    assert!(!tree.contains(&"/dd".to_string()));
    assert!(s.has_children("/d").unwrap());
    assert!(!s.has_children("/dd").unwrap());
}

/// A selective scan (find) stops after `max_keys` keys examined, matching or not,
/// and goes on from the last key examined: the pages stitched together hold exactly
/// the records whose name and record pass, across both key ranges (children, then
/// deeper descendants), each once.
#[test]
fn scan_tree_where_pages_by_keys_examined() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/d", &rec(FileKind::Dir), true).unwrap();
    s.create("/d/sub", &rec(FileKind::Dir), true).unwrap();
    for i in 0..40 {
        s.create(&format!("/d/f{i:02}"), &rec(FileKind::File), true).unwrap();
        s.create(&format!("/d/sub/f{i:02}"), &rec(FileKind::File), true).unwrap();
    }
    s.create("/d/sub/x1", &rec(FileKind::Dir), true).unwrap();
    let (mut found, mut pages) = (Vec::new(), 0);
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, last, done) = s
            .scan_tree_where(
                "/d",
                after.as_deref(),
                100,
                7,
                NameFilter { prefix: b"", keep: |n| n.ends_with(b"1") },
                |r| r.kind == FileKind::File,
            )
            .unwrap();
        assert!(page.len() <= 7);
        found.extend(page.into_iter().map(|p| p.0));
        pages += 1;
        if done {
            break;
        }
        assert!(last > after, "a page that is not the last moves on");
        after = last;
    }
    found.sort();
    let mut want: Vec<String> =
        (0..40).filter(|i| i % 10 == 1).flat_map(|i| [format!("/d/f{i:02}"), format!("/d/sub/f{i:02}")]).collect();
    want.sort();
    assert_eq!(found, want);
    assert!(pages >= 82 / 7, "pages end by keys examined ({pages} pages)");

    // With the glob's literal prefix the scan seeks past names without it: the same
    // records, from far fewer keys examined (pages end after 3 keys each).
    let scan = |prefix: &[u8]| {
        let (mut found, mut pages, mut after) = (Vec::new(), 0, None::<Vec<u8>>);
        loop {
            let (page, last, done) = s
                .scan_tree_where(
                    "/d",
                    after.as_deref(),
                    100,
                    3,
                    NameFilter { prefix, keep: |n| n.starts_with(b"f1") },
                    |_| true,
                )
                .unwrap();
            found.extend(page.into_iter().map(|p| p.0));
            pages += 1;
            if done {
                return (found, pages);
            }
            after = last;
        }
    };
    let (with, pages_with) = scan(b"f1");
    let (without, pages_without) = scan(b"");
    let want: Vec<String> =
        (10..20).map(|i| format!("/d/f{i}")).chain((10..20).map(|i| format!("/d/sub/f{i}"))).collect();
    assert_eq!(with, want);
    assert_eq!(without, want);
    assert!(pages_with * 2 < pages_without, "seeks save steps: {pages_with} pages against {pages_without}");
}

/// Listing pages with records stop at their byte bound too: a page of 4096 long
/// names with records fits one reply body; every entry comes once, with its record.
#[test]
fn read_dir_plus_pages_are_bounded_and_complete() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/d", &rec(FileKind::Dir), true).unwrap();
    let n = 3_000;
    for i in 0..n {
        let mut r = rec(FileKind::File);
        r.size = i;
        s.create(&format!("/d/{i:04}{}", "x".repeat(250)), &r, true).unwrap();
    }
    let (mut seen, mut pages) = (0u64, 0);
    let mut after: Option<String> = None;
    loop {
        let max = gust_proto::READDIR_PAGE_ENTRIES_MAX as usize;
        let (page, done) =
            s.read_dir_plus("/d", after.as_deref(), max, gust_proto::READDIR_PAGE_BYTES_MAX, true).unwrap();
        let reply: gust_proto::Reply = Ok(gust_proto::Response::DirPagePlus { entries: page.clone(), done });
        assert!(gust_proto::encode(&reply).len() <= gust_proto::BODY_BYTES_MAX as usize);
        for (name, r) in &page {
            assert_eq!(r.size, name[..4].parse::<u64>().unwrap(), "{name}: its own record");
        }
        seen += page.len() as u64;
        pages += 1;
        after = page.last().map(|e| e.0.clone());
        if done {
            break;
        }
    }
    assert_eq!(seen, n);
    assert!(pages > 1, "{n} entries of ~350 counted bytes take more than one page");
}

/// Scan pages of long paths stop at their byte bound, so each page fits a frame
/// (a page of 4096 paths of 1 KiB would be 4 MiB).
#[test]
fn scan_tree_pages_are_bounded_in_bytes() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let dir = format!("/{}", "d".repeat(250));
    s.create(&dir, &rec(FileKind::Dir), true).unwrap();
    let n = 1_200;
    for i in 0..n {
        s.create(&format!("{dir}/{i:04}{}", "x".repeat(240)), &rec(FileKind::File), true).unwrap();
    }
    let (mut seen, mut pages) = (0, 0);
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, last, done) =
            s.scan_tree(&dir, after.as_deref(), gust_proto::SCAN_PAGE_ENTRIES_MAX as usize).unwrap();
        let bytes: usize = page.iter().map(|(p, r)| p.len() + r.payload_bytes() + RECORD_OVERHEAD_BYTES).sum();
        let longest = page.iter().map(|(p, r)| p.len() + r.payload_bytes() + RECORD_OVERHEAD_BYTES).max();
        assert!(bytes < SCAN_PAGE_BYTES_MAX + longest.unwrap_or(0), "page of {bytes} bytes");
        assert!(gust_proto::encode(&page).len() <= gust_proto::BODY_BYTES_MAX as usize);
        seen += page.len();
        pages += 1;
        after = last.or(after);
        if done {
            break;
        }
    }
    assert_eq!(seen, n);
    assert!(pages > 1, "{n} records of ~600 bytes take more than one page");
}

/// Hard links: a name marked as linked refuses changes of attributes (EREMOTE, the
/// client's cue to use the link path), the attributes record counts names and goes
/// at 0, and each step checks the file id so a replaced name is never touched.
#[test]
fn linked_names_refuse_attribute_changes_and_counts_end_at_zero() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let link = gust_proto::path::link_path(7);
    s.create("/a", &rec(FileKind::File), true).unwrap();
    s.create(&link, &Record { nlink: 2, ..rec(FileKind::File) }, true).unwrap();
    assert_eq!(s.mark_linked("/a", 8, &link), Err(libc::ESTALE), "another file's id");
    assert_eq!(s.mark_linked("/a", 7, "/not-a-link-path"), Err(libc::EINVAL));
    let before = s.mark_linked("/a", 7, &link).unwrap();
    assert_eq!(before.linked_to(), None);
    assert_eq!(s.get("/a").unwrap().unwrap().linked_to(), Some(link.as_str()));
    assert_eq!(s.mark_linked("/a", 7, &link).unwrap().linked_to(), Some(link.as_str()), "idempotent");
    assert_eq!(s.update_size("/a", 7, 10, None, 5), Err(libc::EREMOTE));
    assert_eq!(s.update_size("/a", 7, 0, Some(3), 5), Err(libc::EREMOTE));
    assert_eq!(s.truncate("/a", 0, 5).map(|_| ()), Err(libc::EREMOTE));
    assert_eq!(s.set_attr("/a", Some(0o600), None, None, 5).map(|_| ()), Err(libc::EREMOTE));
    assert_eq!(s.set_owner("/a", Some(1), None, 5).map(|_| ()), Err(libc::EREMOTE));
    // The attributes record takes them.
    s.update_size(&link, 7, 10, None, 5).unwrap();
    assert_eq!(s.get(&link).unwrap().unwrap().size, 10);
    assert_eq!(s.link_count(&link, 8, 1, 9), Err(libc::ESTALE));
    assert_eq!(s.link_count("/a", 7, 1, 9), Err(libc::EINVAL), "only link paths are counted");
    match s.link_count(&link, 7, 1, 9).unwrap() {
        LinkCount::Counted(r) => assert_eq!((r.nlink, r.ctime_ns), (3, 9)),
        other => panic!("{other:?}"),
    }
    for n in [2, 1] {
        assert!(matches!(s.link_count(&link, 7, -1, 9).unwrap(), LinkCount::Counted(r) if r.nlink == n));
    }
    match s.link_count(&link, 7, -1, 9).unwrap() {
        LinkCount::Removed(r) => assert_eq!(r.size, 10),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.get(&link).unwrap(), None);
    // Directories and symlinks are never names of a linked file.
    s.create("/d", &rec(FileKind::Dir), true).unwrap();
    assert_eq!(s.mark_linked("/d", 7, &link), Err(libc::EPERM));
}

/// No directory lists the attributes records of linked files: their keys are
/// outside every directory's children range, the root's included.
#[test]
fn link_paths_are_in_no_listing() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create(&gust_proto::path::link_path(7), &rec(FileKind::File), true).unwrap();
    s.create("/a", &rec(FileKind::File), true).unwrap();
    let (names, _) = s.read_dir("/", None, 100, 1 << 20).unwrap();
    assert_eq!(names.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["a"]);
}

/// A batch of creates in one write: each entry its own outcome, as `create_inline`
/// alone would give it, and a path twice in one batch is made once.
#[test]
fn create_inline_many_gives_each_entry_its_outcome() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/old", &rec(FileKind::File), true).unwrap();
    let file = |size: u64, id: u128| Record { size, file_id: id, ..rec(FileKind::File) };
    let (a, b, dir) = (file(3, 1), file(0, 2), rec(FileKind::Dir));
    let out = s.create_inline_many(&[
        ("/a", &a, b"abc"),
        ("/old", &b, b""),
        ("/a", &b, b""),
        ("/b", &b, b""),
        ("/d", &dir, b""),
        ("/short", &a, b"ab"),
    ]);
    assert_eq!(out, vec![Ok(()), Err(libc::EEXIST), Err(libc::EEXIST), Ok(()), Err(libc::EINVAL), Err(libc::EINVAL)]);
    assert_eq!(s.get_with_data("/a").unwrap(), Some((a, Some(b"abc".to_vec()))));
    assert_eq!(s.get("/b").unwrap(), Some(b));
    assert_eq!(s.get("/old").unwrap().unwrap().file_id, 7, "an existing record is left alone");
    assert_eq!(s.get("/d").unwrap(), None);
}

/// A batch of removes in one write: each path its own outcome, as `remove` alone
/// would give it, and a path twice in one batch is removed once.
#[test]
fn remove_many_gives_each_path_its_outcome() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let inline = Record { size: 2, file_id: 1, ..rec(FileKind::File) };
    s.create_inline("/i", &inline, b"hi").unwrap();
    s.create("/e", &rec(FileKind::File), true).unwrap();
    s.create("/d", &rec(FileKind::Dir), true).unwrap();
    let out = s.remove_many(&["/i", "/e", "/i", "/d", "/missing", "/"]);
    assert_eq!(
        out,
        vec![
            Ok((inline, true)),
            Ok((rec(FileKind::File), false)),
            Err(libc::ENOENT),
            Err(libc::EISDIR),
            Err(libc::ENOENT),
            Err(libc::EBUSY)
        ]
    );
    assert_eq!(s.get("/i").unwrap(), None);
    assert_eq!(s.get_with_data("/i").unwrap(), None);
    assert_eq!(s.get("/e").unwrap(), None);
    assert!(s.get("/d").unwrap().is_some(), "a directory stays");
}

/// Small files' data does not pin the write-ahead log: once past `WAL_BYTES_MAX`,
/// RocksDB flushes the records' family too, and the old logs go. Without the bound
/// 200 MB of inline data left 200 MB of logs behind.
#[test]
fn inline_data_does_not_pin_the_write_ahead_log() {
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    let data = vec![7u8; 200 << 10];
    for i in 0..1000u128 {
        let r = Record { size: data.len() as u64, file_id: i + 1, ..rec(FileKind::File) };
        s.create_inline(&format!("/f{i}"), &r, &data).unwrap();
    }
    let logs = || -> u64 {
        std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    // Flushes run in the background: wait for the logs to shrink (bounded).
    let bound = WAL_BYTES_MAX + (64 << 20);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while logs() > bound && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(logs() <= bound, "{} bytes of write-ahead log after 200 MB of inline data", logs());
}

/// Records leave a store in key order with their inline data and arrive in
/// another as they were (merged sizes included); deleted, they are gone with
/// their data. Garbage is refused.
#[test]
fn records_move_between_stores_as_stored() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = MetadataStore::open(a_dir.path()).unwrap();
    let b = MetadataStore::open(b_dir.path()).unwrap();
    a.create("/d", &rec(FileKind::Dir), true).unwrap();
    a.create("/d/f", &rec(FileKind::File), true).unwrap();
    a.update_size("/d/f", 7, 4096, None, 5).unwrap();
    let mut small = rec(FileKind::File);
    small.size = 3;
    a.create_inline("/d/s", &small, b"abc").unwrap();
    let first = a.raw_page(None, 2).unwrap();
    let rest = a.raw_page(Some(&first[1].0), 10).unwrap();
    let all: Vec<_> = first.into_iter().chain(rest).collect();
    assert_eq!(all.len(), 3);
    let refs: Vec<_> = all.iter().map(|(k, v, d)| (k.as_slice(), v.as_slice(), d.as_deref())).collect();
    b.put_raw(&refs).unwrap();
    assert_eq!(b.get("/d/f").unwrap().unwrap().size, 4096, "the merged size came along");
    assert_eq!(b.get_with_data("/d/s").unwrap().unwrap().1.as_deref(), Some(&b"abc"[..]));
    assert_eq!(b.get("/d").unwrap().unwrap().kind, FileKind::Dir);
    a.delete_raw(&all.iter().map(|r| r.0.clone()).collect::<Vec<_>>()).unwrap();
    assert!(a.get("/d/s").unwrap().is_none() && a.raw_page(None, 10).unwrap().is_empty());
    let bad = key_of("/d/x");
    assert_eq!(b.put_raw(&[(&bad[..], &[1u8, 2, 3][..], None)]), Err(libc::EIO));
    assert_eq!(b.put_raw(&[(&b"no separator"[..], &all[0].1[..], None)]), Err(libc::EINVAL));
}

/// Extended attributes live in the record (format 3 only when it has some): set,
/// replaced and removed under setxattr's flags, kept by every other change of the
/// record (attributes, a size merge, a rename's put), and taken from a name of a
/// linked file when it is marked linked.
#[test]
fn xattrs_are_kept_by_every_change_of_the_record() {
    use gust_proto::xattr::{XATTR_CREATE, XATTR_REPLACE};
    let d = tempfile::tempdir().unwrap();
    let s = MetadataStore::open(d.path()).unwrap();
    s.create("/f", &rec(FileKind::File), true).unwrap();
    assert_eq!(s.get_key(&key_of("/f")).unwrap().unwrap().xattrs, vec![]);
    let raw = |p: &str| s.db.get(key_of(p)).unwrap().unwrap();
    assert_eq!(raw("/f")[0], VALUE_FORMAT);
    let r = s.set_xattr("/f", "user.k", Some(b"v1"), XATTR_CREATE, 50).unwrap();
    assert_eq!((r.xattrs.clone(), r.ctime_ns), (vec![("user.k".to_string(), b"v1".to_vec())], 50));
    assert_eq!(raw("/f")[0], VALUE_FORMAT_XATTRS);
    assert_eq!(s.set_xattr("/f", "user.k", Some(b"x"), XATTR_CREATE, 51), Err(libc::EEXIST));
    assert_eq!(s.set_xattr("/f", "user.n", Some(b"x"), XATTR_REPLACE, 51), Err(libc::ENODATA));
    assert_eq!(s.set_xattr("/f", "security.k", Some(b"x"), 0, 51), Err(libc::EOPNOTSUPP));
    assert_eq!(s.set_xattr("/", "user.k", Some(b"x"), 0, 51), Err(libc::EOPNOTSUPP));
    assert_eq!(s.set_xattr("/nope", "user.k", Some(b"x"), 0, 51), Err(libc::ENOENT));
    s.set_xattr("/f", "user.k", Some(b"v2"), XATTR_REPLACE, 52).unwrap();
    s.set_attr("/f", Some(0o600), None, None, 53).unwrap();
    s.set_owner("/f", Some(5), None, 54).unwrap();
    s.update_size("/f", 7, 100, None, 55).unwrap();
    let after = s.get("/f").unwrap().unwrap();
    assert_eq!((after.size, after.mode, after.uid), (100, 0o600, 5));
    assert_eq!(after.xattrs, vec![("user.k".to_string(), b"v2".to_vec())]);
    // A rename puts the record as the client read it.
    s.put_record("/g", &after, false).unwrap();
    assert_eq!(s.get("/g").unwrap().unwrap().xattrs, after.xattrs);
    // Symlinks and FIFOs have none (Linux: EPERM for user.* on them).
    s.create("/p", &rec(FileKind::Fifo), true).unwrap();
    assert_eq!(s.set_xattr("/p", "user.k", Some(b"x"), 0, 56), Err(libc::EPERM));
    // A name of a linked file refuses (the client goes to the link path) and
    // keeps none of its own.
    let link = gust_proto::path::link_path(7);
    s.mark_linked("/g", 7, &link).unwrap();
    let named = s.get("/g").unwrap().unwrap();
    assert!(named.xattrs.is_empty() && named.linked_to() == Some(link.as_str()));
    assert_eq!(s.set_xattr("/g", "user.k", None, 0, 57), Err(libc::EREMOTE));
    s.set_xattr("/f", "user.k", None, 0, 58).unwrap();
    assert_eq!(s.set_xattr("/f", "user.k", None, 0, 59), Err(libc::ENODATA));
    assert_eq!(raw("/f")[0], VALUE_FORMAT, "no attributes left: format 2 again");
}
