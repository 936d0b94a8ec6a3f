//! scripts/install.sh: what a site copies to every node is small, works, and keeps
//! its debug information in separate files that gdb (and perf) find.

use gust_e2e::{gust_bin, Instance};
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

fn size_of(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).len()
}

/// gdb's answer to `info line FUNCTION` on `file` (which finds the debug
/// information through the file's debuglink).
fn gdb_line(file: &Path, function: &str) -> String {
    let out = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", &format!("info line {function}")])
        .arg(file)
        .output()
        .expect("gdb (scripts/setup.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_ships_small_binaries_with_separate_debug_information() {
    let release = gust_bin().parent().unwrap().to_path_buf();
    let prefix = tempfile::Builder::new().prefix("gust-install").tempdir_in("/tmp").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install.sh");
    let out = Command::new(&script)
        .arg(prefix.path())
        .env("CARGO_TARGET_DIR", release.parent().unwrap())
        .output()
        .expect("run scripts/install.sh");
    assert!(out.status.success(), "install failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let bin = prefix.path().join("bin");
    let (gust, preload, capi) =
        (bin.join("gust"), bin.join("libgust_preload.so"), prefix.path().join("lib/libgust.so"));
    // The build they come from carries its debug information inside.
    assert!(size_of(&release.join("gust")) > 100 * MIB, "the release build has no debug information to split");
    assert!(size_of(&gust) < 40 * MIB, "installed gust is {} MiB", size_of(&gust) / MIB);
    // The client core links an S3 client since views fetch objects on first open
    // (HTTP and TLS: about 1.5 MiB of the libraries' 9); the bound still catches
    // debug information, which is over 300 MiB.
    assert!(size_of(&preload) < 12 * MIB, "installed preload library is {} MiB", size_of(&preload) / MIB);
    assert!(size_of(&capi) < 12 * MIB, "installed libgust.so is {} MiB", size_of(&capi) / MIB);
    assert!(prefix.path().join("include/gust.h").exists());

    // The installed copies work: a daemon of an instance is not needed for
    // --version; `gust run` finds the installed preload library next to it.
    let inst = Instance::start(2);
    let run = Command::new(&gust)
        .args(["run", "--", "bash", "-c", "echo installed > /gustfs/f && cat /gustfs/f"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout), "installed\n");

    // Symbols and lines for profiling: gdb finds them in .debug/, for the Rust code
    // and for RocksDB's C++; without .debug/ it finds no line information.
    let rust = gdb_line(&preload, "gust_preload::exit::exit_now");
    assert!(rust.contains("crates/preload/src/exit.rs"), "gdb on the preload library: {rust}");
    let cpp = gdb_line(&gust, "rocksdb::DB::Open");
    assert!(cpp.contains("db_impl_open.cc"), "gdb on gust: {cpp}");
    std::fs::rename(bin.join(".debug"), bin.join("away")).unwrap();
    let bare = gdb_line(&preload, "gust_preload::exit::exit_now");
    assert!(!bare.contains("exit.rs"), "the stripped library still has line information: {bare}");
}
