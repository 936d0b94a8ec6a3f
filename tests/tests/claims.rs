//! Claims (docs/DESIGN.md, "Claims"): a process defers its creates in a directory
//! only while it holds the directory's claim, and any other process's request that
//! names the directory recalls the claim, which sends what was deferred first. So
//! another process sees a file from the moment the open that created it returned,
//! claim or not: MPI-IO's collective open and parallel HDF5 rely on it.

mod common;

use gust_client::{Client, ClientOptions};
use gust_e2e::{gust_bin, Instance};
use std::path::Path;
use std::process::Command;

/// `n` names in `dir` whose records live on the daemon of `first`'s.
fn names_with_daemon_of(c: &Client, dir: &str, first: &str, n: usize) -> Vec<String> {
    let d = c.record_holders(first)[0];
    (0..10_000).map(|i| format!("{dir}/f{i}")).filter(|p| p != first && c.record_holders(p)[0] == d).take(n).collect()
}

#[test]
fn a_create_is_seen_by_another_process_while_its_file_is_open() {
    let inst = Instance::start(4);
    let a = inst.claiming_client(ClientOptions::default());
    let b = inst.client();
    a.mkdir("/out", 0o755).unwrap();
    // No claim yet: the open creates the file at once.
    let fd = a.open_deferred("/out/first", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert!(b.stat("/out/first").is_ok(), "another process does not see a file whose open returned");
    a.close(fd).unwrap();
}

#[test]
fn creates_deferred_under_a_claim_are_sent_when_another_process_looks() {
    let inst = Instance::start(4);
    let a = inst.claiming_client(ClientOptions::default());
    let b = &inst.client();
    a.mkdir("/out", 0o755).unwrap();
    let fd = a.open_deferred("/out/first", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    a.close(fd).unwrap();
    assert_eq!(a.claims_held(), 1, "the first create in an empty directory brings its daemon's claim");
    let more = names_with_daemon_of(a, "/out", "/out/first", 8);
    let before = common::daemon_requests(b);
    // Closed small files: queued under the claim.
    for p in &more[..6] {
        let fd = a.open_deferred(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644).unwrap();
        assert_eq!(a.write(fd, p.as_bytes()).unwrap(), p.len());
        a.close(fd).unwrap();
    }
    // One still open, written to.
    let open = &more[6];
    let fd = a.open_deferred(open, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert_eq!(a.write(fd, b"early").unwrap(), 5);
    assert_eq!(common::daemon_requests(b), before, "creates under a claim wait in the process");

    // Another process looks: the claim is recalled, and everything is there.
    let mut names: Vec<String> = b.read_dir("/out").unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    let mut want: Vec<String> =
        std::iter::once("/out/first").chain(more[..7].iter().map(|s| s.as_str())).map(|p| p[5..].to_string()).collect();
    want.sort();
    assert_eq!(names, want, "a listing by another process misses deferred creates");
    assert_eq!(a.claims_held(), 0, "the listing recalled the claim");
    for p in &more[..6] {
        assert_eq!(common::get(b, p), p.as_bytes(), "{p}");
    }
    assert_eq!(common::get(b, open), b"early", "the open file's bytes so far");
    // The descriptor goes on as an ordinary file.
    assert_eq!(a.write(fd, b" and late").unwrap(), 9);
    a.close(fd).unwrap();
    assert_eq!(common::get(b, open), b"early and late");
    // Not claimed any more: the next create is sent at its open.
    let fd = a.open_deferred(&more[7], libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert!(b.stat(&more[7]).is_ok());
    a.close(fd).unwrap();
}

/// Parallel HDF5 (h5py with the mpio driver, 4 ranks of Debian's Open MPI) through
/// the preload library: rank 0 creates the file in MPI_File_open and the others
/// open it next. With creates deferred to close, the others found no file and the
/// job hung in MPI_File_open (issue 32).
#[test]
fn parallel_hdf5_through_the_preload_library() {
    let inst = Instance::start(4);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/h5py_mpio.py");
    let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
    for run in 0..3 {
        let out = Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4", "-x"])
            .arg(format!("LD_PRELOAD={}", lib.display()))
            .arg("-x")
            .arg(format!("GUST_HOSTS_FILE={}", inst.hosts.display()))
            .arg("/usr/bin/python3")
            .arg(&script)
            .arg(format!("/gustfs/run{run}.h5"))
            .output()
            .expect("mpirun (Debian's openmpi-bin)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.matches(" ok").count() == 4,
            "run {run}: {}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
