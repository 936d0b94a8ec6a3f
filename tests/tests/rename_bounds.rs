//! Directory rename at its bounds: subtrees whose records do not fit one frame,
//! and subtrees past the bound on how many records one rename moves.

mod common;

use common::*;
use gust_e2e::Instance;
use std::time::Instant;

/// A directory of long paths (about 1 KiB each) with more records than fit one
/// 1 MiB frame: the scan pages and record batches of the rename must be cut by
/// bytes, not only by count.
#[test]
fn rename_of_a_directory_of_long_paths() {
    let inst = Instance::start(1);
    let c = inst.client();
    let long = |i: u32| format!("{i}{}", "x".repeat(240));
    let mut dir = String::from("/src");
    c.mkdir(&dir, 0o755).unwrap();
    for i in 0..3 {
        dir = format!("{dir}/{}", long(i));
        c.mkdir(&dir, 0o755).unwrap();
    }
    let t = Instant::now();
    let files = 1_500u32;
    for i in 0..files {
        let fd = c.open(&format!("{dir}/{}", long(i)), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    }
    eprintln!("created {files} files in {:?}", t.elapsed());
    put(&c, &format!("{dir}/data"), b"payload");
    c.rename("/src", "/dst").unwrap();
    assert_err!(c.stat("/src"), libc::ENOENT);
    let moved = dir.replacen("/src", "/dst", 1);
    assert_eq!(names(&c, &moved).len(), files as usize + 1);
    assert_eq!(get(&c, &format!("{moved}/data")), b"payload");
}

/// A directory with more descendants than RENAME_DIR_RECORDS_MAX is refused with
/// EXDEV (what mv answers by copying) and nothing changes; at the bound it moves.
#[test]
fn rename_of_a_directory_past_the_bound_is_exdev() {
    let inst = Instance::start(2);
    let c = inst.client();
    let max = gust_client::RENAME_DIR_RECORDS_MAX;
    c.mkdir("/big", 0o755).unwrap();
    c.mkdir("/big/sub", 0o755).unwrap();
    let t = Instant::now();
    // One directory and max files under it: max + 1 descendants.
    for i in 0..max {
        let fd = c.open(&format!("/big/sub/{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    }
    eprintln!("created {max} files in {:?}", t.elapsed());
    assert_err!(c.rename("/big", "/moved"), libc::EXDEV);
    assert_err!(c.stat("/moved"), libc::ENOENT);
    assert_eq!(names(&c, "/big/sub").len(), max, "a refused rename changes nothing");
    // A file renamed alone is one record, whatever the size of its directory.
    c.rename("/big/sub/0", "/zero").unwrap();
    let t = Instant::now();
    c.rename("/big", "/moved").unwrap();
    eprintln!("renamed {max} records in {:?}", t.elapsed());
    assert_err!(c.stat("/big"), libc::ENOENT);
    assert_eq!(names(&c, "/moved/sub").len(), max - 1);
}
