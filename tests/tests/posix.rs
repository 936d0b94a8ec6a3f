//! POSIX semantics of every client operation, on 1, 3 and 8 daemons.

mod common;

use common::*;
use gust_client::{Client, ClientOptions, Kind};
use gust_e2e::Instance;
use libc::{O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
use std::collections::HashSet;
use std::sync::Arc;

const SMALL_CHUNKS: &[&str] = &["--chunk-size", "4k"];

#[test]
fn open_flags_and_their_errors() {
    each_size(SMALL_CHUNKS, |_, c| {
        assert_err!(c.open("/nope", O_RDONLY, 0), libc::ENOENT);
        assert_err!(c.open("/nope", O_RDWR, 0), libc::ENOENT);
        let fd = c.open("/f", O_CREAT | O_EXCL | O_RDWR, 0o640).unwrap();
        assert_eq!(c.stat("/f").unwrap().mode, 0o640);
        assert_eq!(c.stat("/f").unwrap().kind, Kind::File);
        assert_eq!(c.write(fd, b"hello world").unwrap(), 11);
        c.close(fd).unwrap();
        assert_err!(c.open("/f", O_CREAT | O_EXCL | O_RDWR, 0o644), libc::EEXIST);
        assert_err!(c.open("/f", O_CREAT | O_EXCL | O_RDONLY, 0o644), libc::EEXIST);

        // O_CREAT without O_EXCL opens the existing file and keeps its data and mode.
        let fd = c.open("/f", O_CREAT | O_RDONLY, 0o600).unwrap();
        let mut b = [0u8; 32];
        assert_eq!(c.read(fd, &mut b).unwrap(), 11);
        assert_eq!(&b[..11], b"hello world");
        assert_eq!(c.fstat(fd).unwrap().mode, 0o640);
        // O_RDONLY: no writing, no ftruncate.
        assert_err!(c.write(fd, b"x"), libc::EBADF);
        assert_err!(c.pwrite(fd, b"x", 0), libc::EBADF);
        assert_err!(c.ftruncate(fd, 0), libc::EINVAL);
        c.close(fd).unwrap();

        // O_WRONLY: no reading.
        let fd = c.open("/f", O_WRONLY, 0).unwrap();
        assert_err!(c.read(fd, &mut b), libc::EBADF);
        assert_err!(c.pread(fd, &mut b, 0), libc::EBADF);
        assert_eq!(c.write(fd, b"J").unwrap(), 1);
        c.close(fd).unwrap();
        assert_eq!(get(c, "/f"), b"Jello world");

        // O_TRUNC empties a file opened for writing.
        let fd = c.open("/f", O_TRUNC | O_RDWR, 0).unwrap();
        assert_eq!(c.fstat(fd).unwrap().size, 0);
        assert_eq!(c.read(fd, &mut b).unwrap(), 0);
        c.close(fd).unwrap();
        assert_eq!(c.stat("/f").unwrap().size, 0);
        // O_CREAT | O_TRUNC on an existing multi-chunk file: old chunks are gone.
        put(c, "/f", &pattern(1, 20_000));
        let fd = c.open("/f", O_CREAT | O_TRUNC | O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
        c.truncate("/f", 20_000).unwrap();
        assert_eq!(get(c, "/f"), vec![0u8; 20_000], "data before O_TRUNC reappeared");

        // O_APPEND: every write goes to the end, whatever the offset says.
        put(c, "/a", b"0123");
        let fd = c.open("/a", O_APPEND | O_WRONLY, 0).unwrap();
        c.lseek(fd, 0, libc::SEEK_SET).unwrap();
        assert_eq!(c.write(fd, b"ab").unwrap(), 2);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 6, "offset after an append is the new end");
        assert_eq!(c.pwrite(fd, b"cd", 0).unwrap(), 2);
        c.close(fd).unwrap();
        assert_eq!(get(c, "/a"), b"0123abcd");

        // Directories.
        c.mkdir("/d", 0o755).unwrap();
        assert_err!(c.open("/d", O_WRONLY, 0), libc::EISDIR);
        assert_err!(c.open("/d", O_RDWR, 0), libc::EISDIR);
        assert_err!(c.open("/d", O_CREAT | O_RDWR, 0o644), libc::EISDIR);
        assert_err!(c.open("/d", O_CREAT | O_RDONLY, 0o644), libc::EISDIR);
        assert_err!(c.open("/d", O_CREAT | O_EXCL | O_RDONLY, 0o644), libc::EEXIST);
        assert_err!(c.open("/", O_CREAT | O_EXCL | O_RDWR, 0o644), libc::EEXIST);
        let dfd = c.open("/d", O_RDONLY | O_DIRECTORY, 0).unwrap();
        assert_err!(c.read(dfd, &mut b), libc::EISDIR);
        assert_err!(c.write(dfd, b"x"), libc::EBADF);
        assert_eq!(c.fstat(dfd).unwrap().kind, Kind::Dir);
        c.close(dfd).unwrap();
        assert_err!(c.open("/a", O_RDONLY | O_DIRECTORY, 0), libc::ENOTDIR);

        // Bad descriptors.
        assert_err!(c.close(dfd), libc::EBADF);
        assert_err!(c.read(dfd, &mut b), libc::EBADF);
        assert_err!(c.write(dfd, b"x"), libc::EBADF);
        assert_err!(c.lseek(dfd, 0, libc::SEEK_SET), libc::EBADF);
        assert_err!(c.fstat(dfd), libc::EBADF);
        assert_err!(c.fsync(dfd), libc::EBADF);
        assert_err!(c.ftruncate(dfd, 0), libc::EBADF);
        assert_err!(c.close(9999), libc::EBADF);

        // Relative paths are the front end's business: the core refuses them.
        assert_err!(c.open("f", O_RDONLY, 0), libc::EINVAL);
        assert_err!(c.stat("f"), libc::EINVAL);
        assert_err!(c.mkdir("d2", 0o755), libc::EINVAL);
    });
}

#[test]
fn namespace_errors() {
    each_size(&[], |_, c| {
        c.mkdir("/d", 0o755).unwrap();
        put(c, "/d/f", b"x");
        assert_err!(c.mkdir("/d", 0o755), libc::EEXIST);
        assert_err!(c.mkdir("/d/f", 0o755), libc::EEXIST);
        assert_err!(c.mkdir("/", 0o755), libc::EEXIST);
        assert_err!(c.unlink("/d"), libc::EISDIR);
        assert_err!(c.unlink("/nope"), libc::ENOENT);
        assert_err!(c.rmdir("/d/f"), libc::ENOTDIR);
        assert_err!(c.rmdir("/nope"), libc::ENOENT);
        assert_err!(c.rmdir("/d"), libc::ENOTEMPTY);
        assert_err!(c.opendir("/d/f").map(|_| ()), libc::ENOTDIR);
        assert_err!(c.opendir("/nope").map(|_| ()), libc::ENOENT);
        assert_err!(c.stat("/nope"), libc::ENOENT);
        assert_err!(c.lstat("/nope"), libc::ENOENT);
        assert_err!(c.truncate("/d", 0), libc::EISDIR);
        assert_err!(c.truncate("/nope", 0), libc::ENOENT);
        assert_err!(c.chmod("/nope", 0o644), libc::ENOENT);
        assert_err!(c.utimens("/nope", Some(1), Some(1), true), libc::ENOENT);
        assert_err!(c.readlink("/d/f"), libc::EINVAL);
        assert_err!(c.readlink("/nope"), libc::ENOENT);
        assert_err!(c.access("/nope", libc::F_OK), libc::ENOENT);
        c.access("/d/f", libc::F_OK).unwrap();
        c.chmod("/d/f", 0o644).unwrap();
        assert_err!(c.access("/d/f", libc::X_OK), libc::EACCES);
        c.access("/d/f", libc::R_OK | libc::W_OK).unwrap();
        c.chmod("/d/f", 0o755).unwrap();
        c.access("/d/f", libc::X_OK).unwrap();
        // Emptying the directory makes rmdir succeed, and the name is free again.
        c.unlink("/d/f").unwrap();
        assert_err!(c.stat("/d/f"), libc::ENOENT);
        c.rmdir("/d").unwrap();
        assert_err!(c.stat("/d"), libc::ENOENT);
        assert_err!(c.rmdir("/"), libc::EBUSY);
        c.mkdir("/d", 0o700).unwrap();
        assert_eq!(c.stat("/d").unwrap().mode, 0o700);
    });
}

#[test]
fn rmdir_sees_children_on_every_daemon() {
    each_size(&[], |_, c| {
        c.mkdir("/d", 0o755).unwrap();
        for i in 0..24 {
            put(c, &format!("/d/f{i}"), b"");
        }
        // Whichever daemon holds the last child, the directory is not empty.
        for i in 0..23 {
            c.unlink(&format!("/d/f{i}")).unwrap();
            assert_err!(c.rmdir("/d"), libc::ENOTEMPTY);
        }
        assert_eq!(names(c, "/d"), vec!["f23".to_string()]);
        c.unlink("/d/f23").unwrap();
        assert!(names(c, "/d").is_empty());
        c.rmdir("/d").unwrap();
        // A subdirectory counts as a child too.
        c.mkdir("/e", 0o755).unwrap();
        c.mkdir("/e/sub", 0o755).unwrap();
        assert_err!(c.rmdir("/e"), libc::ENOTEMPTY);
        c.rmdir("/e/sub").unwrap();
        c.rmdir("/e").unwrap();
    });
}

#[test]
fn read_write_and_offsets() {
    each_size(SMALL_CHUNKS, |_, c| {
        let data = pattern(2, 30_000);
        let fd = c.open("/f", O_CREAT | O_RDWR, 0o644).unwrap();
        assert_eq!(c.write(fd, &data[..10_000]).unwrap(), 10_000);
        assert_eq!(c.write(fd, &data[10_000..]).unwrap(), 20_000);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 30_000);
        assert_eq!(c.fstat(fd).unwrap().size, 30_000);
        // read advances the offset; pread does not.
        c.lseek(fd, 0, libc::SEEK_SET).unwrap();
        let mut b = vec![0u8; 7_000];
        assert_eq!(c.read(fd, &mut b).unwrap(), 7_000);
        assert_eq!(&b[..], &data[..7_000]);
        assert_eq!(c.pread(fd, &mut b, 20_000).unwrap(), 7_000);
        assert_eq!(&b[..], &data[20_000..27_000]);
        assert_eq!(c.read(fd, &mut b).unwrap(), 7_000);
        assert_eq!(&b[..], &data[7_000..14_000]);
        // A read across the end is short; at the end it returns 0.
        assert_eq!(c.pread(fd, &mut b, 27_000).unwrap(), 3_000);
        assert_eq!(&b[..3_000], &data[27_000..]);
        assert_eq!(c.pread(fd, &mut b, 30_000).unwrap(), 0);
        assert_eq!(c.pread(fd, &mut b, 1 << 40).unwrap(), 0);
        assert_eq!(c.read(fd, &mut []).unwrap(), 0);
        // pwrite overwrites in place, across a chunk boundary, without moving the offset.
        let pos = c.lseek(fd, 0, libc::SEEK_CUR).unwrap();
        assert_eq!(c.pwrite(fd, b"XYZW", 4094).unwrap(), 4);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), pos);
        assert_eq!(c.fstat(fd).unwrap().size, 30_000);
        c.close(fd).unwrap();
        let mut want = data.clone();
        want[4094..4098].copy_from_slice(b"XYZW");
        assert_eq!(get(c, "/f"), want);
        // A second descriptor sees the first one's writes at once.
        let a = c.open("/f", O_RDWR, 0).unwrap();
        let r = c.open("/f", O_RDONLY, 0).unwrap();
        c.pwrite(a, b"late", 29_998).unwrap();
        assert_eq!(c.fstat(r).unwrap().size, 30_002);
        let mut t = [0u8; 4];
        assert_eq!(c.pread(r, &mut t, 29_998).unwrap(), 4);
        assert_eq!(&t, b"late");
        c.fsync(a).unwrap();
        c.close(a).unwrap();
        c.close(r).unwrap();
    });
}

#[test]
fn sparse_files_read_holes_as_zeros() {
    for extra in [SMALL_CHUNKS, &[][..]] {
        each_size(extra, |_, c| {
            let off: u64 = (3 << 20) + 12_345;
            let fd = c.open("/sparse", O_CREAT | O_RDWR, 0o644).unwrap();
            assert_eq!(c.pwrite(fd, b"head", 0).unwrap(), 4);
            assert_eq!(c.pwrite(fd, b"tail-bytes", off).unwrap(), 10);
            assert_eq!(c.fstat(fd).unwrap().size, off + 10);
            let mut b = vec![0xAAu8; (off + 100) as usize];
            assert_eq!(c.pread(fd, &mut b, 0).unwrap(), (off + 10) as usize);
            assert_eq!(&b[..4], b"head");
            assert!(b[4..off as usize].iter().all(|&x| x == 0), "hole does not read as zeros");
            assert_eq!(&b[off as usize..off as usize + 10], b"tail-bytes");
            // A read wholly inside the hole, far from any written chunk.
            let mut h = vec![0xAAu8; 10_000];
            assert_eq!(c.pread(fd, &mut h, 1 << 20).unwrap(), 10_000);
            assert!(h.iter().all(|&x| x == 0));
            // Seek past the end and write: the gap is a hole too.
            c.lseek(fd, 1 << 30, libc::SEEK_SET).unwrap();
            assert_eq!(c.write(fd, b"!").unwrap(), 1);
            assert_eq!(c.stat("/sparse").unwrap().size, (1 << 30) + 1);
            let mut e = [0xAAu8; 8];
            assert_eq!(c.pread(fd, &mut e, (1 << 30) - 7).unwrap(), 8);
            assert_eq!(&e, b"\0\0\0\0\0\0\0!");
            c.close(fd).unwrap();
            c.unlink("/sparse").unwrap();
        });
    }
}

#[test]
fn truncate_shrinks_and_grows() {
    each_size(SMALL_CHUNKS, |_, c| {
        let data = pattern(3, 50_000);
        put(c, "/t", &data);
        c.truncate("/t", 10_001).unwrap();
        assert_eq!(c.stat("/t").unwrap().size, 10_001);
        assert_eq!(get(c, "/t"), &data[..10_001]);
        // Grow again: nothing of the old data past 10_001 may come back.
        c.truncate("/t", 60_000).unwrap();
        let back = get(c, "/t");
        assert_eq!(back.len(), 60_000);
        assert_eq!(&back[..10_001], &data[..10_001]);
        assert!(back[10_001..].iter().all(|&x| x == 0), "data past the shrunk end reappeared after growing");
        // ftruncate on a descriptor, to zero and up again.
        let fd = c.open("/t", O_RDWR, 0).unwrap();
        c.ftruncate(fd, 0).unwrap();
        assert_eq!(c.fstat(fd).unwrap().size, 0);
        c.ftruncate(fd, 9_000).unwrap();
        let mut b = vec![0xAAu8; 9_100];
        assert_eq!(c.pread(fd, &mut b, 0).unwrap(), 9_000);
        assert!(b[..9_000].iter().all(|&x| x == 0));
        // Writing after a shrink past the end leaves zeros in between.
        c.ftruncate(fd, 100).unwrap();
        c.pwrite(fd, b"end", 20_000).unwrap();
        let back = get(c, "/t");
        assert_eq!(back.len(), 20_003);
        assert!(back[..20_000].iter().all(|&x| x == 0));
        assert_eq!(&back[20_000..], b"end");
        c.close(fd).unwrap();
        // Truncating an empty file up gives zeros; truncate through a symlink.
        put(c, "/e", b"");
        c.symlink("e", "/e.link").unwrap();
        c.truncate("/e.link", 5_000).unwrap();
        assert_eq!(get(c, "/e"), vec![0u8; 5_000]);
    });
}

#[test]
fn lseek_whences() {
    each_size(SMALL_CHUNKS, |_, c| {
        let fd = c.open("/s", O_CREAT | O_RDWR, 0o644).unwrap();
        c.write(fd, &pattern(4, 10_000)).unwrap();
        assert_eq!(c.lseek(fd, 100, libc::SEEK_SET).unwrap(), 100);
        assert_eq!(c.lseek(fd, 50, libc::SEEK_CUR).unwrap(), 150);
        assert_eq!(c.lseek(fd, -30, libc::SEEK_CUR).unwrap(), 120);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_END).unwrap(), 10_000);
        assert_eq!(c.lseek(fd, -1_000, libc::SEEK_END).unwrap(), 9_000);
        assert_eq!(c.lseek(fd, 5_000, libc::SEEK_END).unwrap(), 15_000);
        let mut b = [0u8; 4];
        assert_eq!(c.read(fd, &mut b).unwrap(), 0, "read past the end");
        assert_err!(c.lseek(fd, -1, libc::SEEK_SET), libc::EINVAL);
        assert_err!(c.lseek(fd, -20_000, libc::SEEK_END), libc::EINVAL);
        assert_err!(c.lseek(fd, 0, 99), libc::EINVAL);
        // A failed seek leaves the offset alone.
        assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 15_000);
        // SEEK_DATA / SEEK_HOLE: data everywhere inside the file, a hole at its end.
        assert_eq!(c.lseek(fd, 0, libc::SEEK_DATA).unwrap(), 0);
        assert_eq!(c.lseek(fd, 4_321, libc::SEEK_DATA).unwrap(), 4_321);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_HOLE).unwrap(), 10_000);
        assert_eq!(c.lseek(fd, 9_999, libc::SEEK_HOLE).unwrap(), 10_000);
        assert_err!(c.lseek(fd, 10_000, libc::SEEK_DATA), libc::ENXIO);
        assert_err!(c.lseek(fd, 10_000, libc::SEEK_HOLE), libc::ENXIO);
        assert_err!(c.lseek(fd, -1, libc::SEEK_DATA), libc::ENXIO);
        // SEEK_END follows writes made through another descriptor.
        let g = c.open("/s", O_WRONLY, 0).unwrap();
        c.pwrite(g, b"more", 10_000).unwrap();
        assert_eq!(c.lseek(fd, 0, libc::SEEK_END).unwrap(), 10_004);
        // Seek then write/read goes to the new offset.
        c.lseek(fd, 2, libc::SEEK_SET).unwrap();
        c.write(fd, b"ZZ").unwrap();
        c.lseek(fd, 0, libc::SEEK_SET).unwrap();
        c.read(fd, &mut b).unwrap();
        let p = pattern(4, 2);
        assert_eq!(&b, &[p[0], p[1], b'Z', b'Z']);
        c.close(g).unwrap();
        c.close(fd).unwrap();
        // An empty file has neither data nor a hole at 0.
        let fd = c.open("/empty", O_CREAT | O_RDWR, 0o644).unwrap();
        assert_err!(c.lseek(fd, 0, libc::SEEK_DATA), libc::ENXIO);
        assert_eq!(c.lseek(fd, 0, libc::SEEK_END).unwrap(), 0);
        c.close(fd).unwrap();
    });
}

/// Fixed-size record: "<client>:<thread>:<seq>" padded with a byte derived from them,
/// so a torn or overlapped record is detectable.
const RECORD_BYTES: usize = 100;

fn record(client: usize, thread: usize, seq: usize) -> Vec<u8> {
    let mut r = format!("[{client}:{thread}:{seq}:").into_bytes();
    let fill = b'a' + ((client * 7 + thread * 3 + seq) % 26) as u8;
    r.resize(RECORD_BYTES - 1, fill);
    r.push(b'\n');
    r
}

#[test]
fn append_from_two_clients() {
    const THREADS: usize = 3;
    const RECORDS: usize = 150;
    each_size(SMALL_CHUNKS, |inst, c| {
        put(c, "/log", b"");
        let clients: Vec<Arc<Client>> = (0..2).map(|_| Arc::new(inst.client())).collect();
        let mut handles = Vec::new();
        for (ci, cl) in clients.iter().enumerate() {
            for t in 0..THREADS {
                let cl = cl.clone();
                handles.push(std::thread::spawn(move || {
                    let fd = cl.open("/log", O_WRONLY | O_APPEND, 0).unwrap();
                    for s in 0..RECORDS {
                        assert_eq!(cl.write(fd, &record(ci, t, s)).unwrap(), RECORD_BYTES);
                    }
                    cl.close(fd).unwrap();
                }));
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        let log = get(c, "/log");
        assert_eq!(log.len(), 2 * THREADS * RECORDS * RECORD_BYTES);
        let mut seen = HashSet::new();
        let mut last_seq = vec![vec![None::<usize>; THREADS]; 2];
        for (i, rec) in log.chunks(RECORD_BYTES).enumerate() {
            let head = String::from_utf8_lossy(&rec[..20]).to_string();
            let parts: Vec<usize> =
                head.trim_start_matches('[').split(':').take(3).map(|x| x.parse().unwrap_or(usize::MAX)).collect();
            let (ci, t, s) = (parts[0], parts[1], parts[2]);
            assert!(ci < 2 && t < THREADS && s < RECORDS, "record {i} is torn: {head:?}");
            assert_eq!(rec, &record(ci, t, s)[..], "record {i} is torn or overlapped");
            assert!(seen.insert((ci, t, s)), "record {ci}:{t}:{s} appears twice");
            // One thread's appends land in the order it made them.
            assert!(last_seq[ci][t].is_none_or(|p| p < s), "record {ci}:{t}:{s} out of order");
            last_seq[ci][t] = Some(s);
        }
        assert_eq!(seen.len(), 2 * THREADS * RECORDS);
    });
}

#[test]
fn large_file_spans_many_chunks_and_daemons() {
    const SIZE: usize = 40 << 20;
    each_size(&["--chunk-size", "64k"], |_, c| {
        let n = c.daemon_count();
        let before: Vec<u64> = (0..n).map(|d| c.daemon_stats(d).unwrap().bytes_written).collect();
        let data = pattern(5, SIZE);
        let fd = c.open("/big", O_CREAT | O_RDWR, 0o644).unwrap();
        // Start off a chunk boundary so every chunk span is split unevenly.
        assert_eq!(c.pwrite(fd, &data[..1000], 0).unwrap(), 1000);
        assert_eq!(c.pwrite(fd, &data[1000..], 1000).unwrap(), SIZE - 1000);
        assert_eq!(c.fstat(fd).unwrap().size, SIZE as u64);
        let after: Vec<u64> = (0..n).map(|d| c.daemon_stats(d).unwrap().bytes_written).collect();
        let per: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(per.iter().sum::<u64>(), SIZE as u64, "bytes written per daemon: {per:?}");
        // 640 chunks hashed over n daemons: every daemon holds a fair share.
        let chunks = (SIZE / (64 << 10)) as u64;
        for (d, b) in per.iter().enumerate() {
            assert!(*b >= (chunks / n as u64 / 2) * (64 << 10), "daemon {d} got only {b} bytes: {per:?}");
        }
        let mut back = vec![0u8; SIZE];
        assert_eq!(c.pread(fd, &mut back, 0).unwrap(), SIZE);
        assert!(back == data, "40 MiB file read back differs");
        // Odd ranges straddling chunk boundaries.
        for (off, len) in [(65_535usize, 3usize), (1 << 20, 200_000), (SIZE - 70_000, 100_000), (7, 1)] {
            let mut b = vec![0u8; len];
            let got = c.pread(fd, &mut b, off as u64).unwrap();
            let want = &data[off..(off + len).min(SIZE)];
            assert_eq!(&b[..got], want, "range {off}+{len}");
        }
        c.close(fd).unwrap();
        // Unlinking removes the chunks everywhere: a new file at the same path is empty.
        c.unlink("/big").unwrap();
        assert_err!(c.stat("/big"), libc::ENOENT);
    });
}

#[test]
fn deep_directory_tree() {
    const DEPTH: usize = 50;
    each_size(&[], |_, c| {
        let mut p = String::new();
        let mut levels = Vec::new();
        for i in 0..DEPTH {
            p.push_str(&format!("/lvl{i}"));
            c.mkdir(&p, 0o755).unwrap();
            levels.push(p.clone());
        }
        let leaf = format!("{p}/leaf");
        put(c, &leaf, b"deep data");
        for (i, l) in levels.iter().enumerate() {
            assert_eq!(c.stat(l).unwrap().kind, Kind::Dir);
            let want = if i + 1 < DEPTH { format!("lvl{}", i + 1) } else { "leaf".into() };
            assert_eq!(names(c, l), vec![want], "listing of {l}");
        }
        assert_eq!(get(c, &leaf), b"deep data");
        // Rename a directory near the top: all 48 levels below move with it.
        c.rename("/lvl0/lvl1", "/lvl0/moved").unwrap();
        let new_leaf = leaf.replacen("/lvl0/lvl1", "/lvl0/moved", 1);
        assert_eq!(get(c, &new_leaf), b"deep data");
        assert_err!(c.stat(&leaf), libc::ENOENT);
        assert_err!(c.stat("/lvl0/lvl1"), libc::ENOENT);
        // Tear down bottom-up; every level refuses while it has a child.
        let mut levels: Vec<String> = levels.iter().map(|l| l.replacen("/lvl0/lvl1", "/lvl0/moved", 1)).collect();
        assert_err!(c.rmdir(&levels[0]), libc::ENOTEMPTY);
        c.unlink(&new_leaf).unwrap();
        while let Some(l) = levels.pop() {
            c.rmdir(&l).unwrap();
        }
        assert!(names(c, "/").is_empty());
    });
}

#[test]
fn directory_listings_on_every_size() {
    each_size(&[], |_, c| {
        c.mkdir("/d", 0o755).unwrap();
        let mut want = Vec::new();
        for i in 0..300 {
            let n = format!("entry-{i:04}");
            if i % 10 == 0 {
                c.mkdir(&format!("/d/{n}"), 0o755).unwrap();
            } else if i % 10 == 1 {
                c.symlink("target", &format!("/d/{n}")).unwrap();
            } else {
                put(c, &format!("/d/{n}"), b"");
            }
            want.push(n);
        }
        // Grandchildren and siblings with a common prefix must not show up.
        put(c, "/d/entry-0000/grandchild", b"");
        put(c, "/d.sibling", b"");
        c.mkdir("/dd", 0o755).unwrap();
        put(c, "/dd/other", b"");
        let entries = c.read_dir("/d").unwrap();
        let mut got: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
        got.sort();
        assert_eq!(got, want);
        for e in &entries {
            let i: usize = e.name[6..].parse().unwrap();
            let kind = match i % 10 {
                0 => Kind::Dir,
                1 => Kind::Symlink,
                _ => Kind::File,
            };
            assert_eq!(e.kind, kind, "{}", e.name);
        }
        assert_eq!(names(c, "/"), vec!["d", "d.sibling", "dd"]);
        assert!(names(c, "/d/entry-0010").is_empty());
    });
}

#[test]
fn huge_directory_is_listed_completely() {
    const ENTRIES: usize = 100_000;
    const THREADS: usize = 4;
    let inst = Instance::start(3);
    let c = Arc::new(inst.client());
    c.mkdir("/big", 0o755).unwrap();
    let t0 = std::time::Instant::now();
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in (t..ENTRIES).step_by(THREADS) {
                    let fd = c.open(&format!("/big/file-{i:06}"), O_CREAT | O_EXCL | O_WRONLY, 0o644).unwrap();
                    c.close(fd).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    eprintln!("created {ENTRIES} files in {:?}", t0.elapsed());
    let t1 = std::time::Instant::now();
    let mut seen = vec![false; ENTRIES];
    let mut count = 0;
    for e in c.opendir("/big").unwrap() {
        let e = e.unwrap();
        let i: usize = e
            .name
            .strip_prefix("file-")
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("stray entry {:?}", e.name));
        assert!(!seen[i], "{} listed twice", e.name);
        seen[i] = true;
        count += 1;
        assert!(count <= ENTRIES);
    }
    eprintln!("listed {count} entries in {:?}", t1.elapsed());
    assert_eq!(count, ENTRIES, "first missing: {:?}", seen.iter().position(|x| !x));
}

#[test]
fn rename_files() {
    each_size(SMALL_CHUNKS, |_, c| {
        let data = pattern(6, 25_000);
        put(c, "/a", &data);
        let ino = c.stat("/a").unwrap().ino;
        c.rename("/a", "/b").unwrap();
        assert_err!(c.stat("/a"), libc::ENOENT);
        assert_eq!(get(c, "/b"), data);
        assert_eq!(c.stat("/b").unwrap().ino, ino, "rename keeps the file's identity");
        // Into another directory.
        c.mkdir("/dir", 0o755).unwrap();
        c.rename("/b", "/dir/c").unwrap();
        assert_eq!(get(c, "/dir/c"), data);
        assert_eq!(names(c, "/"), vec!["dir"]);
        assert_eq!(names(c, "/dir"), vec!["c"]);
        // Replacing an existing file: the target's old data is gone for good.
        let other = pattern(7, 40_000);
        put(c, "/victim", &other);
        c.rename("/dir/c", "/victim").unwrap();
        assert_eq!(get(c, "/victim"), data);
        assert_err!(c.stat("/dir/c"), libc::ENOENT);
        c.truncate("/victim", 40_000).unwrap();
        assert!(get(c, "/victim")[25_000..].iter().all(|&x| x == 0), "replaced file's chunks survived");
        // An open descriptor of the old name keeps working on the renamed file's data.
        put(c, "/x", b"xdata");
        c.rename("/x", "/x").unwrap();
        assert_eq!(get(c, "/x"), b"xdata");
        assert_err!(c.rename("/nope", "/y"), libc::ENOENT);
        assert_err!(c.rename("/x", "/dir"), libc::EISDIR);
        assert_eq!(get(c, "/x"), b"xdata", "a failed rename changed the source");
        assert_err!(c.rename("/", "/y"), libc::EBUSY);
        // A symlink is renamed as itself, not its target.
        c.symlink("x", "/l").unwrap();
        c.rename("/l", "/l2").unwrap();
        assert_eq!(c.readlink("/l2").unwrap(), "x");
        assert_eq!(get(c, "/l2"), b"xdata");
        assert_eq!(get(c, "/x"), b"xdata");
    });
}

#[test]
fn rename_directories_with_descendants() {
    each_size(SMALL_CHUNKS, |_, c| {
        c.mkdir("/src", 0o755).unwrap();
        let mut files = Vec::new();
        for a in 0..4 {
            c.mkdir(&format!("/src/d{a}"), 0o750).unwrap();
            for b in 0..3 {
                c.mkdir(&format!("/src/d{a}/e{b}"), 0o755).unwrap();
                for f in 0..3 {
                    let p = format!("d{a}/e{b}/f{f}");
                    put(c, &format!("/src/{p}"), &pattern((a * 100 + b * 10 + f) as u64, 5_000 + f * 3_000));
                    files.push(p);
                }
            }
        }
        put(c, "/src/top", b"top");
        c.symlink("top", "/src/link").unwrap();
        put(c, "/srcx", b"not a descendant");
        c.mkdir("/srcx.d", 0o755).unwrap();
        put(c, "/srcx.d/inner", b"not a descendant either");

        assert_err!(c.rename("/src", "/src/d0/inside"), libc::EINVAL);
        assert_err!(c.rename("/src", "/src/d0"), libc::EINVAL);
        c.mkdir("/full", 0o755).unwrap();
        put(c, "/full/x", b"");
        assert_err!(c.rename("/src", "/full"), libc::ENOTEMPTY);
        assert_err!(c.rename("/src", "/srcx"), libc::ENOTDIR);
        // Nothing moved after the refusals.
        assert_eq!(get(c, "/src/d3/e2/f2"), pattern(322, 11_000));

        c.mkdir("/dst", 0o755).unwrap();
        c.rename("/src", "/dst/moved").unwrap();
        assert_err!(c.stat("/src"), libc::ENOENT);
        for p in &files {
            assert_err!(c.stat(&format!("/src/{p}")), libc::ENOENT);
            let parts: Vec<usize> = p.split('/').map(|x| x[1..].parse().unwrap()).collect();
            let want = pattern((parts[0] * 100 + parts[1] * 10 + parts[2]) as u64, 5_000 + parts[2] * 3_000);
            assert_eq!(get(c, &format!("/dst/moved/{p}")), want, "{p}");
        }
        assert_eq!(c.stat("/dst/moved/d1").unwrap().mode, 0o750);
        assert_eq!(names(c, "/dst/moved"), vec!["d0", "d1", "d2", "d3", "link", "top"]);
        assert_eq!(names(c, "/dst/moved/d2/e1"), vec!["f0", "f1", "f2"]);
        assert_eq!(get(c, "/dst/moved/link"), b"top");
        assert_eq!(names(c, "/"), vec!["dst", "full", "srcx", "srcx.d"]);
        assert_eq!(get(c, "/srcx.d/inner"), b"not a descendant either");
        // Files keep working after the move: write, truncate, unlink.
        put(c, "/dst/moved/d0/e0/f0", b"rewritten");
        assert_eq!(get(c, "/dst/moved/d0/e0/f0"), b"rewritten");
        // Onto an existing empty directory: it is replaced.
        c.mkdir("/empty", 0o755).unwrap();
        c.rename("/dst/moved/d1", "/empty").unwrap();
        assert_eq!(names(c, "/empty"), vec!["e0", "e1", "e2"]);
        assert_eq!(names(c, "/empty/e0"), vec!["f0", "f1", "f2"]);
        assert_err!(c.stat("/dst/moved/d1"), libc::ENOENT);
        // And back up to the root, then remove the whole tree bottom-up.
        c.rename("/dst/moved", "/back").unwrap();
        assert_eq!(names(c, "/dst"), Vec::<String>::new());
        assert_eq!(names(c, "/back"), vec!["d0", "d2", "d3", "link", "top"]);
    });
}

#[test]
fn symlinks_and_lstat() {
    each_size(&[], |_, c| {
        c.mkdir("/dir", 0o755).unwrap();
        put(c, "/dir/file", b"through the link");
        c.symlink("file", "/dir/rel").unwrap();
        c.symlink("/gustfs/dir/file", "/abs").unwrap();
        c.symlink("dir", "/dirlink").unwrap();
        c.symlink("rel", "/dir/chain").unwrap();
        assert_eq!(c.readlink("/dir/rel").unwrap(), "file");
        assert_eq!(c.readlink("/abs").unwrap(), "/gustfs/dir/file");
        for l in ["/dir/rel", "/abs", "/dir/chain"] {
            let st = c.stat(l).unwrap();
            assert_eq!(st.kind, Kind::File, "{l}");
            assert_eq!(st.size, 16, "{l}");
            let lst = c.lstat(l).unwrap();
            assert_eq!(lst.kind, Kind::Symlink, "{l}");
            assert_eq!(lst.size, c.readlink(l).unwrap().len() as u64, "{l}");
            assert_eq!(lst.st_mode() & libc::S_IFMT, libc::S_IFLNK);
            assert_eq!(get(c, l), b"through the link");
        }
        // Writing through a link writes the target.
        let fd = c.open("/abs", O_WRONLY | O_APPEND, 0).unwrap();
        c.write(fd, b"!").unwrap();
        c.close(fd).unwrap();
        assert_eq!(get(c, "/dir/file"), b"through the link!");
        assert_err!(c.open("/abs", O_RDONLY | O_NOFOLLOW, 0), libc::ELOOP);
        // A link to a directory lists the directory.
        assert_eq!(c.stat("/dirlink").unwrap().kind, Kind::Dir);
        assert_eq!(names(c, "/dirlink"), vec!["chain", "file", "rel"]);
        // Dangling links: lstat works, stat and open do not.
        c.symlink("missing", "/dangling").unwrap();
        assert_eq!(c.lstat("/dangling").unwrap().kind, Kind::Symlink);
        assert_err!(c.stat("/dangling"), libc::ENOENT);
        assert_err!(c.open("/dangling", O_RDONLY, 0), libc::ENOENT);
        // open(O_CREAT) through a dangling link creates the target.
        let fd = c.open("/dangling", O_CREAT | O_WRONLY, 0o644).unwrap();
        c.write(fd, b"made").unwrap();
        c.close(fd).unwrap();
        assert_eq!(get(c, "/missing"), b"made");
        // Loops.
        c.symlink("loop-b", "/loop-a").unwrap();
        c.symlink("loop-a", "/loop-b").unwrap();
        assert_err!(c.stat("/loop-a"), libc::ELOOP);
        assert_err!(c.open("/loop-a", O_RDONLY, 0), libc::ELOOP);
        assert_eq!(c.lstat("/loop-a").unwrap().kind, Kind::Symlink);
        // Names are exclusive; unlinking a link leaves its target.
        assert_err!(c.symlink("x", "/dir/file"), libc::EEXIST);
        assert_err!(c.symlink("x", "/dir"), libc::EEXIST);
        assert_err!(c.symlink("", "/empty-target"), libc::ENOENT);
        c.unlink("/dir/rel").unwrap();
        assert_err!(c.lstat("/dir/rel"), libc::ENOENT);
        assert_eq!(get(c, "/dir/file"), b"through the link!");
        assert_err!(c.stat("/dir/chain"), libc::ENOENT);
    });
}

#[test]
fn chmod_and_utimens_show_in_stat() {
    each_size(&[], |_, c| {
        put(c, "/f", b"x");
        c.mkdir("/d", 0o755).unwrap();
        c.chmod("/f", 0o600).unwrap();
        let st = c.stat("/f").unwrap();
        assert_eq!(st.mode, 0o600);
        assert_eq!(st.st_mode(), libc::S_IFREG | 0o600);
        c.chmod("/d", 0o1777).unwrap();
        assert_eq!(c.stat("/d").unwrap().st_mode(), libc::S_IFDIR | 0o1777);
        // chmod follows symlinks.
        c.symlink("f", "/l").unwrap();
        c.chmod("/l", 0o444).unwrap();
        assert_eq!(c.stat("/f").unwrap().mode, 0o444);
        assert_eq!(c.lstat("/l").unwrap().kind, Kind::Symlink);

        let (a, m) = (1_000_000_000_123_456_789i64, 1_200_000_000_987_654_321i64);
        let ctime_before = c.stat("/f").unwrap().ctime_ns;
        c.utimens("/f", Some(a), Some(m), true).unwrap();
        let st = c.stat("/f").unwrap();
        assert_eq!((st.atime_ns, st.mtime_ns), (a, m));
        assert!(st.ctime_ns >= ctime_before);
        // None leaves a time alone.
        c.utimens("/f", None, Some(m + 5), true).unwrap();
        let st = c.stat("/f").unwrap();
        assert_eq!((st.atime_ns, st.mtime_ns), (a, m + 5));
        c.utimens("/f", Some(a + 7), None, true).unwrap();
        let st = c.stat("/f").unwrap();
        assert_eq!((st.atime_ns, st.mtime_ns), (a + 7, m + 5));
        // Following and not following a link.
        c.utimens("/l", Some(11), Some(12), false).unwrap();
        let ls = c.lstat("/l").unwrap();
        assert_eq!((ls.atime_ns, ls.mtime_ns), (11, 12));
        assert_eq!(c.stat("/f").unwrap().mtime_ns, m + 5, "utimens without follow changed the target");
        c.utimens("/l", Some(21), Some(22), true).unwrap();
        let st = c.stat("/f").unwrap();
        assert_eq!((st.atime_ns, st.mtime_ns), (21, 22));
        // A write moves mtime forward to about now.
        let fd = c.open("/f", O_WRONLY, 0).unwrap();
        c.write(fd, b"y").unwrap();
        c.close(fd).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
        let mt = c.stat("/f").unwrap().mtime_ns;
        assert!((now - mt).abs() < 60_000_000_000, "mtime after write is {mt}, now {now}");
    });
}

#[test]
fn statfs_sums_the_daemons() {
    each_size(&[], |_, c| {
        let s = c.statfs().unwrap();
        let n = c.daemon_count();
        assert_eq!(s.daemons, n);
        let per: Vec<_> = (0..n).map(|d| c.daemon_statfs(d).unwrap()).collect();
        assert_eq!(s.total_bytes, per.iter().map(|p| p.total_bytes).sum::<u64>());
        assert!(s.total_bytes > 0 && s.free_bytes <= s.total_bytes && s.avail_bytes <= s.free_bytes);
        // Every daemon's root directory here is on the same local file system, so the
        // instance reports n times its size.
        assert_eq!(s.total_bytes, per[0].total_bytes * n as u64);
        assert_eq!(s.chunk_size_bytes, 512 * 1024);
    });
}

#[test]
fn check_parent_option() {
    each_size(&["--check-parent"], |_, c| {
        assert!(c.hosts().check_parent);
        assert_err!(c.open("/missing/f", O_CREAT | O_WRONLY, 0o644), libc::ENOENT);
        assert_err!(c.mkdir("/missing/d", 0o755), libc::ENOENT);
        assert_err!(c.symlink("x", "/missing/l"), libc::ENOENT);
        put(c, "/file", b"");
        assert_err!(c.open("/file/f", O_CREAT | O_WRONLY, 0o644), libc::ENOTDIR);
        assert_err!(c.mkdir("/file/d", 0o755), libc::ENOTDIR);
        assert_err!(c.rename("/file", "/missing/file"), libc::ENOENT);
        c.mkdir("/dir", 0o755).unwrap();
        assert_err!(c.rename("/dir", "/missing/dir"), libc::ENOENT);
        assert_eq!(names(c, "/"), vec!["dir", "file"]);
        put(c, "/dir/inner", b"ok");
        assert_eq!(get(c, "/dir/inner"), b"ok");
        c.mkdir("/dir/sub", 0o755).unwrap();
        c.rename("/dir/inner", "/dir/sub/inner").unwrap();
        assert_eq!(names(c, "/dir/sub"), vec!["inner"]);
    });
    // Without the option, a create does not look at the parent (one RPC).
    let inst = Instance::start(1);
    let c = inst.client();
    assert!(!c.hosts().check_parent);
    put(&c, "/missing/f", b"orphan");
    assert_eq!(get(&c, "/missing/f"), b"orphan");
}

#[test]
fn tcp_transport_behaves_like_unix_sockets() {
    let inst = Instance::start_with(3, SMALL_CHUNKS);
    let c = inst.client_with(ClientOptions { force_tcp: true, ..Default::default() });
    let data = pattern(8, 100_000);
    put(&c, "/over-tcp", &data);
    assert_eq!(get(&inst.client(), "/over-tcp"), data);
    assert_eq!(get(&c, "/over-tcp"), data);
}

/// Every descriptor, from open or dup, counts against OPEN_FILES_MAX: a full table
/// refuses both with EMFILE, and closing one makes room again. A dup shares the
/// offset of its original.
#[test]
fn open_and_dup_share_one_descriptor_bound() {
    let inst = Instance::start(1);
    let c = inst.client();
    put(&c, "/f", b"0123456789");
    let fd = c.open("/f", O_RDONLY, 0).unwrap();
    let dup = c.dup(fd).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(c.read(fd, &mut b).unwrap(), 4);
    assert_eq!(c.read(dup, &mut b).unwrap(), 4);
    assert_eq!(&b, b"4567", "a dup shares the offset");
    let mut fds = vec![fd, dup];
    while fds.len() < gust_client::OPEN_FILES_MAX {
        fds.push(c.dup(fd).unwrap());
    }
    assert_err!(c.dup(fd), libc::EMFILE);
    assert_err!(c.open("/f", O_RDONLY, 0), libc::EMFILE);
    c.close(fds.pop().unwrap()).unwrap();
    let again = c.dup(fd).unwrap();
    assert_err!(c.open("/f", O_RDONLY, 0), libc::EMFILE);
    c.close(again).unwrap();
    c.open("/f", O_RDONLY, 0).unwrap();
}
