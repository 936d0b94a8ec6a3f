//! GustFS's SLURM site integration (slurm/: burst_buffer.lua for the directives,
//! TaskProlog, TaskEpilog and Epilog), installed with slurm/install.sh into a real
//! SLURM (slurmctld, three slurmd on test nodes with their own /tmp, munge; jobs as
//! user nobody): directives in the batch script give a job GustFS on all its nodes
//! with stage-in before the script and stage-out after it; bad directives are
//! refused at submission; a missing stage-in source fails the job naming it; a
//! failed stage-out keeps the data for the grace period, says where, and gives the
//! job a non-zero derived exit code; a later job on the same nodes brings the kept
//! instance back (`gust start --restart`), stages it out and stops it; cancelled and
//! timed-out jobs leave nothing and get no stage-out (nor a message about one); jobs
//! without directives are untouched.
//! Needs root, iproute2, util-linux, slurmctld, slurmd, slurm-client, munge.

use gust_e2e::cluster::Jobs;
use std::fs;
use std::time::Duration;

const NODES: u32 = 3;

fn directives(j: &Jobs, stage_in: &[(&str, &str)], stage_out: &[(&str, &str)]) -> String {
    let mut s = String::from("#BB_LUA gustfs\n");
    for (a, b) in stage_in {
        s.push_str(&format!("#BB_LUA gustfs_stage_in {} {b}\n", j.work.join(a).display()));
    }
    for (a, b) in stage_out {
        s.push_str(&format!("#BB_LUA gustfs_stage_out {a} {}\n", j.work.join(b).display()));
    }
    s
}

#[test]
fn site_integration_with_directives() {
    let Some(j) = Jobs::setup(14, NODES, true) else { return };
    let input = gust_e2e::cluster::write_tree(&j.work.join("in"));
    Jobs::chown_nobody(&j.work);

    // Stage in before the script, steps on all nodes through the preload library,
    // stage out after the script: byte for byte.
    let files: Vec<&str> = input.iter().map(|f| f.0.as_str()).collect();
    let body = format!(
        "{}echo GUST_HOSTS_FILE=$GUST_HOSTS_FILE\n\
         srun -N{NODES} --ntasks-per-node=1 gust run -- sh -c 'h=$(hostname); mkdir -p /gustfs/out/$h/sub; for f in {}; do cat /gustfs/in/$f > /gustfs/out/$h/$f; done'",
        directives(&j, &[("in", "/in")], &[("/out", "out")]),
        files.join(" ")
    );
    let id = j.submit("stage", &[&format!("-N{NODES}"), "-t", "5"], &body);
    let st = j.wait_done(&id, Duration::from_secs(120));
    let out = j.output("stage");
    assert_eq!(st, "COMPLETED", "{out}");
    assert!(out.contains("gust: GustFS up on 3 node(s)") && out.contains("gust: staged out"), "{out}");
    for i in 0..NODES {
        for (name, data) in &input {
            let p = j.work.join(format!("out/gnode{i}/{name}"));
            let got = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}\njob output:\n{out}", p.display()));
            assert!(got == *data, "{} differs from in/{name}", p.display());
        }
    }
    j.assert_clean_soon("after a job with directives");

    // A directive with a mistake is refused at submission, with the line.
    let script = j.work.join("bad.sh");
    fs::write(&script, "#!/bin/bash\n#BB_LUA gustfs rootdir=/home\ntrue\n").unwrap();
    let r = j.c.slurm("sbatch", &["--uid=nobody", "--gid=nogroup", "-N1", script.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("line 2") && err.contains("rootdir=/home"), "{err}");

    // A missing stage-in source fails the job, naming the path.
    let body = format!("{}echo script-ran", directives(&j, &[("no/such/dataset", "/in")], &[]));
    let id = j.submit("missing", &["-N2", "-t", "5"], &body);
    let st = j.wait_done(&id, Duration::from_secs(60));
    let out = j.output("missing");
    assert_eq!(st, "FAILED", "{out}");
    assert!(out.contains(&format!("{}/no/such/dataset", j.work.display())) && !out.contains("script-ran"), "{out}");
    j.assert_clean_soon("after a failed stage-in");

    // A stage-out that fails keeps the data on the nodes and says where.
    let body = format!(
        "{}gust run -- sh -c 'mkdir /gustfs/res && echo precious > /gustfs/res/f'",
        directives(&j, &[], &[("/res", "in/a/res")])
    );
    let id = j.submit("keep", &["-N2", "-w", "gnode[0-1]", "-t", "5"], &body);
    j.wait_done(&id, Duration::from_secs(60));
    let out = j.output("keep");
    assert!(out.contains("stage-out failed: /res") && out.contains("kept for 1 h on nodes gnode[0-1]"), "{out}");
    // The job's record says so too: its derived exit code (the highest of its steps').
    let show = j.c.slurm("scontrol", &["-d", "show", "job", &id]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("DerivedExitCode=1:0"), "{show}");
    let dir = format!("/tmp/gustfs-nobody-job{id}");
    for i in 0..2 {
        let ls = j.c.on_node(i, &format!("ls {dir}/d{i}/metadata >/dev/null && cat {dir}/keep-until"));
        assert!(ls.status.success(), "gnode{i}: kept data missing: {}", String::from_utf8_lossy(&ls.stderr));
    }

    // A later job on the same nodes brings the kept instance back, stages it out
    // where it can be written, and stops it: nothing is left.
    let body = format!(
        r#"set -e
eval "$(gust start --restart --rootdir {dir})"
gust stage out /res reused
gust stop
echo reuse-done"#
    );
    let reuse = j.submit("reuse", &["-N2", "-w", "gnode[0-1]", "-t", "5"], &body);
    let st = j.wait_done(&reuse, Duration::from_secs(90));
    let out = j.output("reuse");
    assert_eq!(st, "COMPLETED", "{out}");
    assert!(out.contains("up again with its data") && out.contains("reuse-done"), "{out}");
    assert_eq!(fs::read_to_string(j.work.join("reused/f")).unwrap_or_default(), "precious\n", "{out}");
    j.assert_clean_soon("after the kept instance was restarted, staged out and stopped");

    // A job cancelled while its instance's files are still on the nodes (here its
    // script stopped it with --keep; so it is when the daemons outlive the batch
    // shell) gets no stage-out and no message about one: the TaskEpilog asks the
    // controller whether the job was cancelled.
    let body = format!("{}gust stop --keep\necho started\nsleep 300", directives(&j, &[], &[("/res", "never")]));
    let kc = j.submit("cancel-kept", &["-N2", "-w", "gnode[0-1]", "-t", "5"], &body);
    let started = gust_e2e::wait_until(Duration::from_secs(60), || j.output("cancel-kept").contains("started"));
    assert!(started, "{}", j.output("cancel-kept"));
    assert!(j.c.slurm("scancel", &[&kc]).status.success());
    assert_eq!(j.wait_done(&kc, Duration::from_secs(60)), "CANCELLED");
    let out = j.output("cancel-kept");
    assert!(!out.contains("stage-out") && !out.contains("staged out"), "{out}");
    for i in 0..2 {
        // Kept by its script: past its deadline now, for the next Epilog.
        let dir = format!("/tmp/gustfs-nobody-job{kc}");
        assert!(j.c.on_node(i, &format!("[ ! -d {dir} ] || echo 0 > {dir}/keep-until")).status.success());
    }

    // Kept data past its deadline: the next job's Epilog removes it.
    for i in 0..2 {
        let fake = "/tmp/gustfs-nobody-job999999";
        let made = j.c.on_node(i, &format!("mkdir -p {fake}/d{i} && echo 0 > {fake}/keep-until"));
        assert!(made.status.success());
    }

    // A job without directives is untouched (and its Epilog sweeps expired data).
    let id = j.submit(
        "plain",
        &[&format!("-N{NODES}"), "-t", "5"],
        "srun sh -c 'echo $(hostname) ${GUST_HOSTS_FILE:-none}' | sort",
    );
    assert_eq!(j.wait_done(&id, Duration::from_secs(60)), "COMPLETED");
    assert_eq!(j.output("plain"), "gnode0 none\ngnode1 none\ngnode2 none\n");
    j.assert_clean_soon("expired kept data after the grace period");

    // Cancelled and timed out: nothing left.
    let body = format!("{}echo started\nsleep 300", directives(&j, &[("in", "/in")], &[("/in", "never")]));
    let a = j.submit("cancel", &[&format!("-N{NODES}"), "-t", "5"], &body);
    let b = j.submit("timeout", &["-N1", "-t", "5"], &body);
    let started = gust_e2e::wait_until(Duration::from_secs(60), || {
        j.output("cancel").contains("started") && j.output("timeout").contains("started")
    });
    assert!(started, "{} / {}", j.output("cancel"), j.output("timeout"));
    assert!(j.c.slurm("scancel", &[&a]).status.success());
    let r = j.c.slurm("scontrol", &["update", &format!("JobId={b}"), "TimeLimit=0:01"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(j.wait_done(&a, Duration::from_secs(60)), "CANCELLED");
    assert_eq!(j.wait_done(&b, Duration::from_secs(150)), "TIMEOUT");
    j.assert_clean_soon("after a cancelled and a timed-out job");
    // Neither was staged out, nor told that a stage-out failed.
    for name in ["cancel", "timeout"] {
        let out = j.output(name);
        assert!(!out.contains("stage-out") && !out.contains("staged out"), "{name}: {out}");
    }
    assert!(!j.work.join("never").exists(), "a cancelled or timed-out job was staged out");
}
