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

/// Makes `dir` and its first file, `dir/first`, through claiming client `a`: the
/// first create in an empty directory brings the claim of that name's daemon.
fn claim_dir(a: &Client, dir: &str) {
    a.mkdir(dir, 0o755).unwrap();
    let fd = a.open_deferred(&format!("{dir}/first"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    a.close(fd).unwrap();
    assert_eq!(a.claims_held(), 1, "the first create in an empty {dir} brings its daemon's claim");
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
    claim_dir(a, "/out");
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
            out.status.success() && text.contains("4 of 4 ranks ok"),
            "run {run}: {}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Unlinks under a claim (gust-client remove_batch.rs) wait in the process like
/// creates, and another process's look at the directory sends them first: it never
/// sees a file whose unlink returned.
#[test]
fn unlinks_deferred_under_a_claim_are_sent_when_another_process_looks() {
    let inst = Instance::start(4);
    let a = inst.claiming_client(ClientOptions::default());
    let b = &inst.client();
    claim_dir(a, "/out");
    let more = names_with_daemon_of(a, "/out", "/out/first", 8);
    for p in &more {
        let fd = a.open_deferred(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        assert_eq!(a.write(fd, p.as_bytes()).unwrap(), p.len());
        a.close(fd).unwrap();
    }
    // A path operation sends the creates; their batch's reply grants the records.
    a.stat("/out").unwrap();
    assert_eq!(a.claims_held(), 1);
    let open = a.open(&more[7], libc::O_RDONLY, 0).unwrap();
    let before = common::daemon_requests(b);
    for p in &more[..5] {
        a.unlink(p).unwrap();
    }
    assert_eq!(common::errno_of(a.unlink(&more[0])), libc::ENOENT, "a second unlink of a queued path");
    assert_eq!(common::daemon_requests(b), before, "unlinks under a claim wait in the process");
    // A file open in this process is removed at once.
    a.unlink(&more[7]).unwrap();
    assert!(common::daemon_requests(b) > before, "the unlink of an open file was held back");
    a.close(open).unwrap();
    let before = common::daemon_requests(b);
    a.unlink(&more[5]).unwrap();
    assert_eq!(common::daemon_requests(b), before);

    // Another process looks: the claim is recalled, and the unlinks are done.
    let mut names: Vec<String> = b.read_dir("/out").unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    let mut want = vec!["first".to_string(), more[6][5..].to_string()];
    want.sort();
    assert_eq!(names, want, "a listing by another process");
    assert_eq!(a.claims_held(), 0, "the listing recalled the claim");
    let batches: u64 = (0..4).map(|d| common::op_count(b, d, "remove_batch")).sum();
    assert_eq!(batches, 1, "the six queued unlinks went out in one request");
    for p in &more[..6] {
        assert_eq!(common::errno_of(b.stat(p)), libc::ENOENT, "{p}");
    }
    assert_eq!(common::get(b, &more[6]), more[6].as_bytes());
    // Not claimed any more: an unlink is sent at once.
    a.unlink(&more[6]).unwrap();
    assert_eq!(common::errno_of(b.stat(&more[6])), libc::ENOENT);
}

/// A process that unlinks a name and makes it again sees the new file, and so does
/// every other process: the queued unlink goes before the create.
#[test]
fn a_name_unlinked_under_a_claim_can_be_made_again() {
    let inst = Instance::start(2);
    let a = inst.claiming_client(ClientOptions::default());
    let b = &inst.client();
    a.mkdir("/d", 0o755).unwrap();
    for round in 0..3u8 {
        let fd = a.open_deferred("/d/f", libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644).unwrap();
        assert_eq!(a.write(fd, &[round; 3]).unwrap(), 3);
        a.close(fd).unwrap();
        assert_eq!(a.stat("/d/f").unwrap().size, 3, "round {round}");
        a.unlink("/d/f").unwrap();
        assert_eq!(common::errno_of(a.stat("/d/f")), libc::ENOENT, "round {round}: this process's own stat");
    }
    assert_eq!(common::errno_of(b.stat("/d/f")), libc::ENOENT);
    let fd = a.open_deferred("/d/f", libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644).unwrap();
    assert_eq!(a.write(fd, b"last").unwrap(), 4);
    a.close(fd).unwrap();
    assert_eq!(common::get(b, "/d/f"), b"last");
}

/// A real program under the preload library: Python writes 100 small files and
/// removes 80 of them in a directory it claims. The creates and the removes go out
/// in batches, and the next program (ls, forked by the shell after Python exited)
/// sees the 20 left.
#[test]
fn a_program_under_the_preload_library_batches_its_unlinks() {
    let inst = Instance::start(3);
    let c = inst.client();
    let (singles, batches) = (common::op_total(&c, "remove"), common::op_total(&c, "remove_batch"));
    let creates = common::op_total(&c, "create_inline") + common::op_total(&c, "create");
    let script = "set -euo pipefail; mkdir /gustfs/s; \
                  python3 -c 'import os\nfor i in range(100):\n  open(\"/gustfs/s/f%d\" % i, \"w\").write(\"x\" * i)\n\
                  for i in range(80):\n  os.remove(\"/gustfs/s/f%d\" % i)'; \
                  ls /gustfs/s | wc -l";
    let out = inst.gust(&["run", "--", "bash", "-c", script]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "20");
    let sent = common::op_total(&c, "remove_batch") - batches;
    // 80 unlinks on 3 daemons, 64 to a flush: at most 2 flushes of 3 requests (a
    // full queue, and Python's exit), more if a flush came due by time.
    assert!((1..=12).contains(&sent), "{sent} batch requests for 80 unlinks");
    let singles = common::op_total(&c, "remove") - singles;
    assert!(singles < 10, "unlinks went one by one: {singles} removes, {sent} batches");
    // Python's open makes an fstat and an lseek on the new descriptor: answered in
    // the process, they leave the create deferred (one create per daemon brought
    // the claim, plus the directory).
    let creates = common::op_total(&c, "create_inline") + common::op_total(&c, "create") - creates;
    assert!(creates < 10, "creates went one by one: {creates}");
    let mut left = common::names(&c, "/s");
    left.sort();
    let mut want: Vec<String> = (80..100).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(left, want);
    assert_eq!(common::get(&c, "/s/f99"), vec![b'x'; 99]);
}

/// `gust status` counts claims (held, given, recalled) and recalls, from the
/// daemons' counters.
#[test]
fn status_counts_claims_and_their_recalls() {
    let inst = Instance::start(2);
    let a = inst.claiming_client(ClientOptions::default());
    let b = inst.client();
    // (held, given, recalled) of claims, and recalls, as `gust status` says them.
    let counts = || -> ([u64; 3], u64) {
        let out = inst.gust(&["status"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{text}");
        let line = text.lines().find(|l| l.starts_with("grants: ")).unwrap_or_else(|| panic!("no grants line: {text}"));
        let number_before = |word: &str, after: &str| -> u64 {
            let rest = &line[line.find(after).unwrap_or_else(|| panic!("{after} in {line}")) + after.len()..];
            let at = rest.find(word).unwrap_or_else(|| panic!("{word} in {line}"));
            rest[..at].trim().rsplit([' ', ',', '(']).next().unwrap().parse().unwrap()
        };
        let claims = "claims on directories:";
        (
            [number_before(" held", claims), number_before(" given", claims), number_before(" recalled", claims)],
            number_before(" recalls", "grants:"),
        )
    };
    let ([_, given0, recalled0], recalls0) = counts();
    claim_dir(a, "/out");
    let ([held, given, recalled], _) = counts();
    assert!(given > given0 && held >= 1 && recalled == recalled0, "after a claimed create: {held} {given} {recalled}");
    b.read_dir("/out").unwrap();
    assert_eq!(a.claims_held(), 0, "the listing recalled the claims in /out");
    let ([held2, given2, recalled2], recalls2) = counts();
    assert!(recalled2 > recalled0 && held2 < held && given2 == given, "after the recall: {held2} {given2} {recalled2}");
    assert!(recalls2 > recalls0, "the claim's recall counts among the recalls");
}

/// A daemon paused past a lease (SIGSTOP; a VM pause) still recalls a claim when it
/// runs again: its lease clock did not count the pause (gust-daemon grants/clock.rs).
/// Counted on a wall clock, the holder's lease had run out, the claim went without
/// a recall, and another process was told that a file whose create had returned
/// did not exist.
#[test]
fn a_daemon_paused_past_a_lease_still_recalls_a_claim() {
    let inst = Instance::start(1);
    let a = inst.claiming_client(ClientOptions::default());
    let b = inst.client();
    claim_dir(a, "/d");
    // Queued under the claim; the process then does nothing more.
    let fd = a.open_deferred("/d/second", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert_eq!(a.write(fd, b"queued").unwrap(), 6);
    a.close(fd).unwrap();
    let pid = inst.daemon_pid(0) as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The pause itself: past a lease (2 s) and its margin.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert_eq!(common::get(&b, "/d/second"), b"queued", "a file whose create returned before the pause");
}

/// Kills daemon `d`, makes a path operation of `a` (which sends what `a` deferred)
/// while it is down, and starts it again once `a` tried to send.
fn kill_while_deferred(inst: &Instance, a: &'static Client, d: u32) {
    let tried_before = a.deferred_resends();
    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(inst.daemon_pid(d) as i32, libc::SIGKILL) };
    assert!(gust_e2e::wait_until(std::time::Duration::from_secs(10), || inst.daemon_gone(d)));
    let looker = std::thread::spawn(move || a.stat("/").map(|_| ()));
    let tried = gust_e2e::wait_until(std::time::Duration::from_secs(20), || a.deferred_resends() > tried_before);
    assert!(tried, "the next path operation sent the queue to the daemon that is down, and sends it again");
    inst.restart_daemon(d);
    looker.join().unwrap().expect("the stat after the queue");
    // A failed deferred change would be reported by the next close.
    let fd = a.open("/", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    assert_eq!(a.close(fd).map_err(|e| e.0), Ok(()), "nothing deferred failed");
}

/// What a process deferred under a claim reaches the claim's daemon after it was
/// killed and started again: queued unlinks, then queued creates, sent at the
/// process's next path operation while the daemon is down, go again until it
/// answers (deferred.rs). Before, they failed at once: the process's own stat
/// found the files it had unlinked, and missed those it had made.
#[test]
fn what_was_deferred_reaches_a_daemon_killed_and_started_again() {
    let inst = Instance::start(2);
    let a = inst.claiming_client(ClientOptions::default());
    let b = &inst.client();
    claim_dir(a, "/k");
    let d = a.record_holders("/k/first")[0];
    let more = names_with_daemon_of(a, "/k", "/k/first", 3);
    for p in &more {
        let fd = a.open_deferred(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        a.close(fd).unwrap();
    }
    // Sends those creates; their batch's reply grants the records.
    a.stat("/k").unwrap();
    let before = common::daemon_requests(b);
    for p in &more {
        a.unlink(p).unwrap();
    }
    assert_eq!(common::daemon_requests(b), before, "the unlinks wait in the process");
    kill_while_deferred(&inst, a, d);
    for p in &more {
        assert_eq!(common::errno_of(a.stat(p)), libc::ENOENT, "{p}: this process's own stat after its unlink");
        assert_eq!(common::errno_of(b.stat(p)), libc::ENOENT, "{p}: another process's stat");
    }

    claim_dir(a, "/m");
    let d = a.record_holders("/m/first")[0];
    let made = names_with_daemon_of(a, "/m", "/m/first", 3);
    let before = common::daemon_requests(b);
    for p in &made {
        let fd = a.open_deferred(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        assert_eq!(a.write(fd, p.as_bytes()).unwrap(), p.len());
        a.close(fd).unwrap();
    }
    assert_eq!(common::daemon_requests(b), before, "the creates wait in the process");
    kill_while_deferred(&inst, a, d);
    for p in &made {
        assert_eq!(common::get(b, p), p.as_bytes(), "{p}");
    }
}
