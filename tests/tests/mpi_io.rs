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

/// Runs the semantics script with 4 ranks of Open MPI's `io` component against
/// `dir` in `inst`: through the preload library, or (`inst` None) plain, in a
/// FUSE mount's directory. The script's output.
fn semantics(inst: Option<&Instance>, io: &str, dir: &str, extra: &[&str]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/mpiio_semantics.py");
    let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
    // Open MPI's session directory (TMPDIR/ompi.HOST.UID) of its own: two runs at
    // once (the test threads) raced to make the same one ("File exists").
    let session = tempfile::tempdir().expect("a session directory for mpirun");
    let mut cmd = Command::new("timeout");
    cmd.env("TMPDIR", session.path());
    cmd.args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4", "--mca", "io", io]);
    if let Some(inst) = inst {
        cmd.arg("-x").arg(format!("LD_PRELOAD={}", lib.display()));
        cmd.arg("-x").arg(format!("GUST_HOSTS_FILE={}", inst.hosts.display()));
    }
    let out =
        cmd.arg("/usr/bin/python3").arg(&script).arg(dir).args(extra).output().expect("mpirun (Debian's openmpi-bin)");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("FAILED") && text.contains("checks ok"), text)
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
