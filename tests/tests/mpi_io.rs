//! MPI-IO through the preload library (issue 32), with Debian's Open MPI and both
//! its MPI-IO components (ROMIO and OMPIO): tests/mpi/mpiio_semantics.py checks
//! N-to-1 strided writes collective and independent (ROMIO's data sieving under
//! byte-range locks), shared file pointers, set_size, preallocate and atomic mode
//! across 4 ranks. Preallocate is rank 0 writing the file out, a barrier, and every
//! rank asking the size: with sizes batched in the writer and nothing to take them
//! back, 4 runs in 10 saw the old size (docs/DESIGN.md, "Size holds").

use gust_e2e::mount::Mount;
use gust_e2e::{gust_bin, Instance};
use std::path::Path;
use std::process::Command;

/// Runs `argv` on `np` ranks of Open MPI with its `io` component: through the
/// preload library against `inst`, or (`inst` None) plain. Whether it exited 0, and
/// its output.
fn mpirun(inst: Option<&Instance>, io: &str, np: u32, argv: &[&str]) -> (bool, String) {
    let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
    // Open MPI's session directory (TMPDIR/ompi.HOST.UID) of its own: two runs at
    // once (the test threads) raced to make the same one ("File exists").
    let session = tempfile::tempdir().expect("a session directory for mpirun");
    let mut cmd = Command::new("timeout");
    cmd.env("TMPDIR", session.path());
    cmd.args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", &np.to_string(), "--mca", "io", io]);
    if let Some(inst) = inst {
        cmd.arg("-x").arg(format!("LD_PRELOAD={}", lib.display()));
        cmd.arg("-x").arg(format!("GUST_HOSTS_FILE={}", inst.hosts.display()));
    }
    let out = cmd.args(argv).output().expect("mpirun (Debian's openmpi-bin)");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs the semantics script with 4 ranks of Open MPI's `io` component against
/// `dir` in `inst`: through the preload library, or (`inst` None) plain, in a
/// FUSE mount's directory. The script's output.
fn semantics(inst: Option<&Instance>, io: &str, dir: &str, extra: &[&str]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/mpiio_semantics.py");
    let mut argv = vec!["/usr/bin/python3", script.to_str().unwrap(), dir];
    argv.extend_from_slice(extra);
    let (ok, text) = mpirun(inst, io, 4, &argv);
    (ok && !text.contains("FAILED") && text.contains("checks ok"), text)
}

/// ROMIO's test suite (MPICH's src/mpi/romio/test, built by scripts/romio.sh into
/// the directory `GUST_ROMIO` names), as its `runtests` runs each test: ranks,
/// arguments, and " No Errors" on success. Each test gets its own file under `dir`.
/// The names of the tests that failed, with their output.
fn romio_suite(inst: Option<&Instance>, io: &str, bin: &Path, dir: &str) -> Vec<String> {
    // (test, ranks, how the file is named: "-fname F", "-h -f F" or "F"). Not here:
    // `error`, which checks MPICH's own error strings (it fails with Open MPI on
    // tmpfs too).
    const SUITE: &[(&str, u32, &str)] = &[
        ("simple", 4, "-fname"),
        ("async", 4, "-fname"),
        ("async-multiple", 4, "-fname"),
        ("atomicity", 4, "-fname"),
        ("coll_test", 4, "-fname"),
        ("excl", 4, "-fname"),
        ("file_info", 4, "-fname"),
        ("aggregation1", 4, "-h -f"),
        ("aggregation2", 4, ""),
        ("hindexed", 4, ""),
        ("shared_fp", 4, "-fname"),
        ("ordered_fp", 4, "-fname"),
        ("split_coll", 4, "-fname"),
        ("psimple", 4, "-fname"),
        ("status", 1, "-fname"),
        ("types_with_zeros", 2, ""),
        ("darray_read", 4, ""),
    ];
    let mut failed = Vec::new();
    for (test, np, flag) in SUITE {
        if *test == "atomicity" && io == "ompio" {
            // OMPIO does not do atomic mode, on tmpfs either (docs/SEMANTICS.md).
            continue;
        }
        let program = bin.join(test);
        let file = format!("{dir}/{test}.dat");
        let mut argv = vec![program.to_str().unwrap()];
        argv.extend(flag.split_whitespace());
        argv.push(&file);
        let (ok, text) = mpirun(inst, io, *np, &argv);
        if !ok || !text.contains("No Errors") {
            failed.push(format!("{test} ({io}):\n{text}"));
        }
    }
    failed
}

/// The directory of ROMIO's built tests, if scripts/romio.sh built them
/// (scripts/test.sh sets `GUST_ROMIO`).
fn romio_bin() -> Option<std::path::PathBuf> {
    let Ok(d) = std::env::var("GUST_ROMIO") else {
        eprintln!("skipped: ROMIO's tests are not built (scripts/romio.sh prints their directory into GUST_ROMIO)");
        return None;
    };
    Some(d.into())
}

/// ROMIO's own tests through the preload library, with both of Open MPI's MPI-IO
/// components.
#[test]
fn romio_test_suite_through_the_preload_library() {
    let Some(bin) = romio_bin() else { return };
    let inst = Instance::start(4);
    let c = inst.client();
    let mut failed = Vec::new();
    for io in ["romio321", "ompio"] {
        c.mkdir(&format!("/{io}"), 0o755).unwrap();
        failed.extend(romio_suite(Some(&inst), io, &bin, &format!("/gustfs/{io}")));
    }
    assert!(failed.is_empty(), "{} of ROMIO's tests failed:\n{}", failed.len(), failed.join("\n"));
}

/// The same through the FUSE mount, with both components.
#[test]
fn romio_test_suite_through_fuse() {
    let Some(bin) = romio_bin() else { return };
    let inst = Instance::start(4);
    let m = Mount::new(&inst, &[]);
    let mut failed = Vec::new();
    for io in ["romio321", "ompio"] {
        let dir = m.p(io);
        std::fs::create_dir(&dir).unwrap();
        failed.extend(romio_suite(None, io, &bin, dir.to_str().unwrap()));
    }
    assert!(
        failed.is_empty(),
        "{} of ROMIO's tests failed:\n{}\nmount log:\n{}",
        failed.len(),
        failed.join("\n"),
        m.log()
    );
}

#[test]
fn mpi_io_semantics_with_romio() {
    let inst = Instance::start(4);
    for run in 0..3 {
        let (ok, text) = semantics(Some(&inst), "romio321", &format!("/gustfs/romio{run}"), &[]);
        assert!(ok, "run {run}:\n{text}");
    }
}

#[test]
fn mpi_io_semantics_with_ompio() {
    let inst = Instance::start(4);
    for run in 0..3 {
        let (ok, text) = semantics(Some(&inst), "ompio", &format!("/gustfs/ompio{run}"), &["--no-atomic"]);
        assert!(ok, "run {run}:\n{text}");
    }
}

/// The same through the FUSE mount (ROMIO; the kernel's page cache and
/// attribute cache live under the mount's grants: docs/DESIGN.md, "Grants").
#[test]
fn mpi_io_semantics_through_fuse() {
    let inst = Instance::start(4);
    let m = Mount::new(&inst, &[]);
    for run in 0..2 {
        let dir = m.p(&format!("romio{run}"));
        let (ok, text) = semantics(None, "romio321", dir.to_str().unwrap(), &[]);
        assert!(ok, "run {run}:\n{text}\nmount log:\n{}", m.log());
    }
}
