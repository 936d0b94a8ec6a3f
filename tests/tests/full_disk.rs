//! A full disk: daemons whose root directories sit on a small tmpfs. Writes fail with
//! ENOSPC (not EIO, not a crash), everything acknowledged before stays readable, and
//! once files are removed, writes work again. Needs root (it mounts the tmpfs).

use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::gust_bin;
use std::path::PathBuf;
use std::process::Command;

const FILE_BYTES: usize = 4 << 20;
const FILES_MAX: usize = 20;

/// A tmpfs mounted for the test, with an instance on it; both gone on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mnt(&self) -> PathBuf {
        self.dir.path().join("disk")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new(gust_bin()).arg("stop").arg("--rootdir").arg(self.mnt().join("fs")).output();
        let _ = Command::new("umount").arg(self.mnt()).status();
    }
}

fn content(i: usize) -> Vec<u8> {
    (0..FILE_BYTES).map(|j| ((j * 7 + i * 13) % 251) as u8).collect()
}

fn write_file(c: &Client, p: &str, data: &[u8]) -> Result<(), Errno> {
    let fd = c.open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    let r = c.write(fd, data).map(|_| ());
    c.close(fd)?;
    r
}

fn read_file(c: &Client, p: &str, len: usize) -> Vec<u8> {
    let fd = c.open(p, libc::O_RDONLY, 0).unwrap();
    let mut b = vec![0u8; len + 1];
    let n = c.pread(fd, &mut b, 0).unwrap();
    c.close(fd).unwrap();
    b.truncate(n);
    b
}

#[test]
fn full_disk_gives_enospc_and_loses_nothing() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test mounts a tmpfs and needs root");
    let d = SmallDisk { dir: tempfile::Builder::new().prefix("gust-full").tempdir_in("/tmp").unwrap() };
    std::fs::create_dir(d.mnt()).unwrap();
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"]).arg(d.mnt()).status().unwrap();
    assert!(st.success(), "cannot mount a tmpfs");
    let out =
        Command::new(gust_bin()).args(["start", "--local", "2", "--rootdir"]).arg(d.mnt().join("fs")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = Client::open_instance(&d.mnt().join("fs/gust.hosts"), ClientOptions::default()).unwrap();

    let mut written = Vec::new();
    let mut failure = None;
    for i in 0..FILES_MAX {
        let p = format!("/f{i}");
        match write_file(&c, &p, &content(i)) {
            Ok(()) => written.push((i, p)),
            Err(e) => {
                failure = Some((p, e));
                break;
            }
        }
    }
    let (failed_path, e) = failure.expect("24 MiB of disk never filled up");
    assert_eq!(e, Errno(libc::ENOSPC), "a full disk must say so");
    assert!(written.len() >= 2, "only {} files fit", written.len());
    for d in 0..c.daemon_count() {
        c.ping(d).expect("daemon alive after ENOSPC");
    }
    // Nothing acknowledged was lost.
    for (i, p) in &written {
        assert!(read_file(&c, p, FILE_BYTES) == content(*i), "{p} damaged by the full disk");
    }
    // Free space, and writing works again.
    c.unlink(&failed_path).unwrap();
    for (_, p) in written.iter().take(2) {
        c.unlink(p).unwrap();
    }
    let fresh = content(99);
    write_file(&c, "/after", &fresh).expect("write after freeing space");
    assert!(read_file(&c, "/after", FILE_BYTES) == fresh);
    for (i, p) in written.iter().skip(2) {
        assert!(read_file(&c, p, FILE_BYTES) == content(*i), "{p}");
    }
}
