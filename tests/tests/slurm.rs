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
    let opts =
        gust_client::ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: true, ..Default::default() };
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

/// A replicated instance in a job (issue 27, part 6): a node's daemon killed with
/// SIGKILL is repaired from inside the job (`srun --overlap -w NODE gust repair`),
/// and the repaired daemon belongs to the job's daemon step: a job that ends
/// without `gust stop` leaves nothing. `gust stop` with a dead daemon on its own
/// node and one on another says so, exits non-zero, and removes both nodes' files.
/// Options of a local start work here too: --events-cap, --metrics 0.0.0.0:PORT.
#[test]
fn replicated_instance_loses_a_node() {
    let Some(j) = Jobs::setup(15, NODES, false) else { return };
    // Kills daemon ID of the instance on the node it runs on (its pid from that
    // node's hosts file).
    let kill = j.work.join("kill.sh");
    fs::write(
        &kill,
        "#!/bin/sh\npid=$(awk -v id=\"$1\" '$1==\"daemon\" && $2==id {print $4}' \"$GUST_HOSTS_FILE\")\n\
         kill -9 \"$pid\" && echo \"killed daemon $1 (pid $pid) on $(hostname)\"\n",
    )
    .unwrap();
    fs::set_permissions(&kill, fs::Permissions::from_mode(0o755)).unwrap();
    Jobs::chown_nobody(&j.work);
    let start = r#"eval "$(gust start --replicas 2 --events-cap 1MiB --metrics 0.0.0.0:0)" || exit 9
gust run -- sh -c 'mkdir /gustfs/r && for i in 1 2 3 4 5 6 7 8; do echo data$i > /gustfs/r/f$i; done' || exit 8
srun --overlap -w gnode1 -N1 -n1 ./kill.sh 1 || exit 7
for i in 1 2 3 4 5 6 7 8; do gust cat /r/f$i; done | tr '\n' ' '; echo
gust status > $SLURM_JOB_NAME.down 2>&1; echo "status-down-exit=$?"
srun --overlap -w gnode1 -N1 -n1 gust repair --id 1; echo "repair-exit=$?"
gust status > $SLURM_JOB_NAME.repaired 2>&1; echo "status-repaired-exit=$?"
"#;

    // 1. Repaired, and the job ends without `gust stop`: no daemon outlives it.
    let id = j.submit("nostop", &[&format!("-N{NODES}"), "-t", "5"], start);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("nostop");
    assert_eq!(st, "COMPLETED", "{out}");
    assert!(out.contains("data1 data2 data3 data4 data5 data6 data7 data8"), "{out}");
    assert!(out.contains("repair-exit=0") && out.contains("status-repaired-exit=0"), "{out}");
    let down = fs::read_to_string(j.work.join("nostop.down")).unwrap_or_default();
    assert!(down.contains("DEGRADED: daemon 1 down"), "{down}");
    let repaired = fs::read_to_string(j.work.join("nostop.repaired")).unwrap_or_default();
    assert!(repaired.contains("all daemons serving"), "{repaired}");
    assert!(repaired.contains("http://10.78.15."), "metrics on the daemons' own addresses: {repaired}");
    j.assert_clean_soon("after a job that repaired a daemon and skipped gust stop");

    // 2. Daemon 0 (this node's) and daemon 1 dead at `gust stop`.
    let body = format!(
        "{start}srun --overlap -w gnode1 -N1 -n1 ./kill.sh 1\n./kill.sh 0\n\
         gust stop; echo \"stop-exit=$?\"\n\
         srun --overlap -N{NODES} -n{NODES} --ntasks-per-node=1 sh -c \
         'for i in $(seq 100); do [ -z \"$(ls /tmp /dev/shm | grep gustfs)\" ] && break; sleep 0.1; done; \
         echo \"left on $(hostname):\" $(ls /tmp /dev/shm | grep gustfs)'"
    );
    let id = j.submit("deadstop", &[&format!("-N{NODES}"), "-t", "5"], &body);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("deadstop");
    assert_eq!(st, "COMPLETED", "{out}");
    assert!(out.contains("repair-exit=0"), "{out}");
    assert!(out.contains("daemon 0 on gnode0 was not running"), "{out}");
    assert!(out.contains("daemon 1 on gnode1 did not answer"), "{out}");
    assert!(out.contains("daemon 1 on gnode1: files removed"), "{out}");
    assert!(out.contains("stop-exit=1"), "{out}");
    for i in 0..NODES {
        assert!(out.contains(&format!("left on gnode{i}:\n")), "gnode{i} kept files after gust stop: {out}");
    }
    j.assert_clean_soon("after gust stop with dead daemons");
}

/// Options of `gust start` that were once `--local` only work through srun too
/// (issue 27, part 3): cache mode of a shared directory (read through, written back
/// by `gust flush`), one declared capacity for every daemon, daemon tracepoints
/// from the start into a directory, and `--force` over a stale hosts file.
#[test]
fn start_options_on_many_nodes() {
    let Some(j) = Jobs::setup(16, NODES, false) else { return };
    fs::create_dir_all(j.work.join("shared")).unwrap();
    fs::write(j.work.join("shared/in.txt"), "from the shared file system\n").unwrap();
    fs::create_dir_all(j.work.join("trace")).unwrap();
    Jobs::chown_nobody(&j.work);
    let body = r#"set -e
eval "$(gust start --cache-of shared --declare-capacity 64MiB --trace md --trace-dir $PWD/trace)"
gust status | grep -c ' up ' | sed 's/^/daemons up: /'
gust run -- sh -c 'cat /gustfs/in.txt; echo written in GustFS > /gustfs/out.txt'
gust flush
gust stop --keep
eval "$(gust start --force)"
gust stop
echo options-done"#;
    let id = j.submit("options", &[&format!("-N{NODES}"), "-t", "5"], body);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("options");
    assert_eq!(st, "COMPLETED", "{out}");
    assert!(out.contains("daemons up: 3") && out.contains("from the shared file system"), "{out}");
    assert!(out.contains("options-done"), "{out}");
    let back = fs::read_to_string(j.work.join("shared/out.txt")).unwrap_or_default();
    assert_eq!(back, "written in GustFS\n", "{out}");
    let traces = fs::read_dir(j.work.join("trace")).unwrap().filter(|e| e.is_ok()).count();
    assert_eq!(traces, NODES as usize, "one trace file per daemon: {out}");
    j.assert_clean_soon("after a job with cache mode, traces and a forced start");
}

/// A job's instance shrinks before a node is given back (`gust shrink`) and grows
/// onto a node of the allocation (`gust expand --nodes`, srun): its files read
/// back on every node after both, through each node's own copy of the hosts file.
#[test]
fn an_instance_shrinks_and_grows_inside_a_job() {
    let Some(j) = Jobs::setup(18, NODES, false) else { return };
    Jobs::chown_nobody(&j.work);
    let body = r#"set -e
eval "$(gust start)"
gust run -- sh -c 'for i in 1 2 3 4 5 6; do head -c 3000000 /dev/urandom > /gustfs/f$i; done; md5sum /gustfs/f* > /gustfs/sums'
gust shrink --count 1 > shrink.json
third=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 3p)
base=$(dirname "$GUST_HOSTS_FILE")
# The node that left is clean (its agent removes the instance's files) before it joins again.
for i in $(seq 200); do srun -N1 -w "$third" --overlap sh -c "test ! -e $base" && break; done
gust expand --nodes "$third" > expand.json
gust status | grep -c ' up ' | sed 's/^/daemons up: /'
srun -N3 --ntasks-per-node=1 gust run -- sh -c 'cd /gustfs && md5sum -c --quiet sums && echo "$(hostname) sums ok"'
gust stop
echo grow-done"#;
    let id = j.submit("grow", &[&format!("-N{NODES}"), "-t", "5"], body);
    let st = j.wait_done(&id, Duration::from_secs(180));
    let out = j.output("grow");
    assert_eq!(st, "COMPLETED", "{out}");
    let summary = |f: &str| -> serde_json::Value {
        serde_json::from_str(&fs::read_to_string(j.work.join(f)).unwrap_or_default()).unwrap_or_default()
    };
    assert_eq!(summary("shrink.json")["daemons"], 2, "{out}");
    assert_eq!(summary("expand.json")["daemons"], 3, "{out}");
    assert!(summary("expand.json")["chunks_moved"].as_u64().unwrap_or(0) > 0, "{out}");
    assert!(out.contains("daemons up: 3"), "{out}");
    assert_eq!(out.matches("sums ok").count(), NODES as usize, "every node reads every file back: {out}");
    assert!(out.contains("grow-done"), "{out}");
    eprintln!("{out}");
    j.assert_clean_soon("after a job that shrank and grew its instance");
}

/// `gust start --ec 2+1` inside a job (srun): every node's hosts file says the
/// code, and a file written on one node reads back on all three.
#[test]
fn an_erasure_coded_instance_in_a_job() {
    let Some(j) = Jobs::setup(20, NODES, false) else { return };
    Jobs::chown_nobody(&j.work);
    let body = r#"set -e
eval "$(gust start --ec 2+1)"
srun -N3 --ntasks-per-node=1 sh -c 'grep -qx "ec 2+1" "$GUST_HOSTS_FILE" && echo "$(hostname) coded"'
gust run -- sh -c 'head -c 3000000 /dev/urandom > /gustfs/f; md5sum /gustfs/f > /gustfs/sum'
srun -N3 --ntasks-per-node=1 gust run -- sh -c 'cd /gustfs && md5sum -c --quiet sum && echo "$(hostname) sum ok"'
gust stop
echo ec-done"#;
    let id = j.submit("ec", &[&format!("-N{NODES}"), "-t", "5"], body);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("ec");
    assert_eq!(st, "COMPLETED", "{out}");
    assert_eq!(out.matches(" coded").count(), NODES as usize, "{out}");
    assert_eq!(out.matches(" sum ok").count(), NODES as usize, "{out}");
    assert!(out.contains("ec-done"), "{out}");
    j.assert_clean_soon("after a job with an erasure-coded instance");
}
