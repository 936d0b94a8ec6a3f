//! Cache mode (`gust start --cache-of DIR`): GustFS's namespace mirrors a directory
//! of the shared file system. Listing and stat come from there without fetching;
//! the first open fetches the whole file (the daemons copy its chunks); writes stay
//! in GustFS until `gust flush` or `gust stop` writes them back; `gust stop
//! --discard` drops them. Real programs (ls, cat, cmp, sh) through the preload
//! library.

use gust_e2e::gust_bin;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn gust(hosts: &Path, args: &[&str]) -> Output {
    Command::new(gust_bin()).args(args).env("GUST_HOSTS_FILE", hosts).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Paths GustFS itself holds (records), one fan-out over the daemons.
fn held(hosts: &Path) -> Vec<String> {
    let mut v: Vec<String> = ok(&gust(hosts, &["find", "/"])).lines().map(String::from).filter(|l| l != "/").collect();
    v.sort();
    v
}

struct Cached {
    dir: tempfile::TempDir,
    hosts: std::path::PathBuf,
}

impl Cached {
    fn start(pfs: &Path) -> Cached {
        let dir = tempfile::Builder::new().prefix("gust-cache").tempdir_in("/tmp").unwrap();
        let out = Command::new(gust_bin())
            .args(["start", "--local", "3", "--rootdir"])
            .arg(dir.path())
            .arg("--cache-of")
            .arg(pfs)
            .output()
            .unwrap();
        ok(&out);
        let hosts = dir.path().join("gust.hosts");
        Cached { dir, hosts }
    }
    fn run(&self, script: &str) -> String {
        ok(&gust(&self.hosts, &["run", "--", "sh", "-c", script]))
    }
}

impl Drop for Cached {
    fn drop(&mut self) {
        let _ = gust(&self.hosts, &["stop", "--discard"]);
        let _ = &self.dir;
    }
}

fn pfs_tree() -> tempfile::TempDir {
    let pfs = tempfile::tempdir().unwrap();
    fs::create_dir_all(pfs.path().join("data/deep")).unwrap();
    fs::write(pfs.path().join("data/small.txt"), b"small file\n").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(pfs.path().join("data/deep/big.bin"), &big).unwrap();
    std::os::unix::fs::symlink("small.txt", pfs.path().join("data/link")).unwrap();
    pfs
}

#[test]
fn listing_and_stat_come_from_the_shared_file_system_and_open_fetches() {
    let pfs = pfs_tree();
    let inst = Cached::start(pfs.path());
    // ls -l and stat see the shared tree, and nothing is fetched for it.
    let ls = inst.run("ls -l /gustfs/data /gustfs/data/deep");
    assert!(ls.contains("small.txt") && ls.contains("big.bin") && ls.contains("link -> small.txt"), "{ls}");
    assert!(ls.contains("3000000"), "sizes from the shared file system: {ls}");
    assert_eq!(held(&inst.hosts), Vec::<String>::new(), "a listing fetches nothing");
    // Opening fetches the whole file (and a symlink's target through it); the
    // bytes are the shared file's.
    inst.run(&format!("cmp /gustfs/data/deep/big.bin {}/data/deep/big.bin", pfs.path().display()));
    assert_eq!(inst.run("cat /gustfs/data/link"), "small file\n");
    assert_eq!(held(&inst.hosts), vec!["/data/deep/big.bin", "/data/link", "/data/small.txt"]);
    // Once fetched, GustFS's copy is the file: the shared file changing is not seen.
    fs::write(pfs.path().join("data/small.txt"), b"changed underneath\n").unwrap();
    assert_eq!(inst.run("cat /gustfs/data/small.txt"), "small file\n");
}

#[test]
fn writes_are_written_back_at_flush_and_at_stop_unless_discarded() {
    let pfs = pfs_tree();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(pfs.path(), fs::Permissions::from_mode(0o750)).unwrap();
    let inst = Cached::start(pfs.path());
    inst.run("echo new > /gustfs/data/new.txt; echo more >> /gustfs/data/small.txt; mkdir /gustfs/out; echo r > /gustfs/out/r");
    // Not yet: written back after it is closed, asynchronously; flush waits.
    ok(&gust(&inst.hosts, &["flush"]));
    assert_eq!(fs::read_to_string(pfs.path().join("data/new.txt")).unwrap(), "new\n");
    assert_eq!(fs::read_to_string(pfs.path().join("data/small.txt")).unwrap(), "small file\nmore\n");
    assert_eq!(fs::read_to_string(pfs.path().join("out/r")).unwrap(), "r\n");
    // The root of the shared directory keeps its own mode.
    let mode = fs::metadata(pfs.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750, "its own mode, not GustFS's root's: {mode:o}");

    // Written after the last flush: gust stop writes it back before stopping.
    inst.run("echo last > /gustfs/data/last.txt");
    let out = gust(&inst.hosts, &["stop"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("written back"));
    assert_eq!(fs::read_to_string(pfs.path().join("data/last.txt")).unwrap(), "last\n");

    // --discard drops what was not written back.
    let inst = Cached::start(pfs.path());
    // The follower's first pass (it starts with the instance) is over before the
    // write: else it may copy the file before the stop can discard it. (A later
    // pass, once a second, still may: the window is the few ms to the stop.)
    ok(&gust(&inst.hosts, &["flush"]));
    inst.run("echo lost > /gustfs/data/lost.txt");
    ok(&gust(&inst.hosts, &["stop", "--discard"]));
    assert!(!pfs.path().join("data/lost.txt").exists());
    // Bad input: flush of an instance that is not a cache, --cache-of a file.
    let plain = gust_e2e::Instance::start(1);
    let out = plain.gust(&["flush"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no write-back is running"));
    let out = Command::new(gust_bin())
        .args(["start", "--local", "1", "--rootdir", "/tmp/gust-cache-bad", "--cache-of"])
        .arg(pfs.path().join("data/small.txt"))
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    let _ = fs::remove_dir_all("/tmp/gust-cache-bad");
}
