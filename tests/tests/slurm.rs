//! GustFS in SLURM jobs, against a real slurmctld and three slurmd (Debian's, with
//! munge), each slurmd on its own test node (network, UTS and mount namespace, own
//! /tmp: tests/cluster/testcluster.sh). Jobs run as an ordinary user (nobody) and use
//! GustFS without any site install: `gust start` (srun launcher), `gust stage`,
//! steps through the preload library, `gust stop` in the batch script. Without
//! --rootdir, each node puts its root directory on the storage `gust probe` finds
//! fastest with room (here /dev/shm: the nodes' own /tmp is a 1 GiB tmpfs).
//! Needs root, iproute2, util-linux, slurmctld, slurmd, slurm-client, munge.

use gust_e2e::cluster::Jobs;
use gust_e2e::wait_until;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const NODES: u32 = 3;

#[test]
fn jobs_use_gustfs_without_site_install() {
    let Some(j) = Jobs::setup(13, NODES, false) else { return };
    let input = gust_e2e::cluster::write_tree(&j.work.join("in"));
    Jobs::chown_nobody(&j.work);

    // 1. Stage in, steps on all three nodes read and write through the preload
    //    library, stage out: byte for byte.
    let files: Vec<&str> = input.iter().map(|f| f.0.as_str()).collect();
    let body = format!(
        r#"set -e
eval "$(gust start)"
gust stage in in /in
srun -N{NODES} --ntasks-per-node=1 gust run -- sh -c 'h=$(hostname); mkdir -p /gustfs/out/$h/sub; for f in {}; do cat /gustfs/in/$f > /gustfs/out/$h/$f; done'
gust stage out /out out
gust stop
echo job-done"#,
        files.join(" ")
    );
    let id = j.submit("stage", &[&format!("-N{NODES}"), "-t", "5"], &body);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("stage");
    assert_eq!(st, "COMPLETED", "stage job: {out}");
    assert!(out.contains("job-done"), "{out}");
    assert!(out.contains("root directories on the fastest local storage with 1 GiB free: /dev/shm/gustfs-"), "{out}");
    for i in 0..NODES {
        for (name, data) in &input {
            let p = j.work.join(format!("out/gnode{i}/{name}"));
            let got = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}\njob output:\n{out}", p.display()));
            assert!(got == *data, "{} differs from in/{name}", p.display());
        }
    }
    j.assert_clean_soon("after a completed job");

    // 2. A stage-in from a missing path fails the job, naming the path.
    let id = j.submit(
        "missing",
        &["-N1", "-t", "5"],
        "eval \"$(gust start)\"\ngust stage in /no/such/dataset /in || { gust stop; exit 3; }\ngust stop",
    );
    let st = j.wait_done(&id, Duration::from_secs(60));
    let out = j.output("missing");
    assert_eq!(st, "FAILED", "{out}");
    assert!(out.contains("/no/such/dataset"), "{out}");
    j.assert_clean_soon("after a failed stage-in");

    // 3. Two jobs at once get two instances; one's secret does not open the other's
    //    daemons.
    let keep = "eval \"$(gust start)\"\ncp $GUST_HOSTS_FILE $GUST_HOSTS_FILE.secret $SLURM_JOB_NAME.copy/\necho started\nsleep 300";
    for n in ["one", "two"] {
        fs::create_dir_all(j.work.join(format!("{n}.copy"))).unwrap();
        Jobs::chown_nobody(&j.work.join(format!("{n}.copy")));
    }
    let one = j.submit("one", &["-N1", "-n1", "-t", "5"], keep);
    let two = j.submit("two", &["-N1", "-n1", "-t", "5"], keep);
    let started = wait_until(Duration::from_secs(60), || {
        j.output("one").contains("started") && j.output("two").contains("started")
    });
    assert!(started, "jobs did not start: {} / {}", j.output("one"), j.output("two"));
    let h1 = gust_hosts::HostsFile::load(&j.work.join("one.copy/gust.hosts")).unwrap();
    let h2 = gust_hosts::HostsFile::load(&j.work.join("two.copy/gust.hosts")).unwrap();
    assert_ne!(h1.instance, h2.instance);
    assert_ne!(h1.daemons[0].tcp_addr(), h2.daemons[0].tcp_addr());
    let s1 = fs::read(j.work.join("one.copy/gust.hosts.secret")).unwrap();
    let s2 = fs::read(j.work.join("two.copy/gust.hosts.secret")).unwrap();
    assert_ne!(s1, s2);
    let opts = gust_client::ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: true };
    let own = gust_client::Client::open_instance(&j.work.join("two.copy/gust.hosts"), opts.clone()).unwrap();
    own.ping(0).expect("job two's daemon with its own secret");
    // Job two's hosts file with job one's secret.
    let mixed = tempfile::tempdir().unwrap();
    fs::copy(j.work.join("two.copy/gust.hosts"), mixed.path().join("gust.hosts")).unwrap();
    fs::write(mixed.path().join("gust.hosts.secret"), &s1).unwrap();
    fs::set_permissions(mixed.path().join("gust.hosts.secret"), fs::Permissions::from_mode(0o600)).unwrap();
    let wrong = gust_client::Client::open_instance(&mixed.path().join("gust.hosts"), opts);
    assert!(wrong.map(|c| c.ping(0).is_err()).unwrap_or(true), "job one's secret opened job two's daemon");

    // 4. A cancelled job leaves nothing behind.
    let r = j.c.slurm("scancel", &[&one]);
    assert!(r.status.success());
    assert_eq!(j.wait_done(&one, Duration::from_secs(60)), "CANCELLED");

    // 5. A job past its time limit leaves nothing behind.
    let r = j.c.slurm("scontrol", &["update", &format!("JobId={two}"), "TimeLimit=0:01"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(j.wait_done(&two, Duration::from_secs(150)), "TIMEOUT");
    j.assert_clean_soon("after a cancelled and a timed-out job");

    // 6. A job that does not use GustFS runs as before.
    let id = j.submit("plain", &[&format!("-N{NODES}"), "-t", "5"], "srun hostname | sort");
    assert_eq!(j.wait_done(&id, Duration::from_secs(60)), "COMPLETED");
    assert_eq!(j.output("plain"), "gnode0\ngnode1\ngnode2\n");
}
