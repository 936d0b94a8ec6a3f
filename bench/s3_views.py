"""Views of an object store prefix (issue 35, `gust view`) against a real SeaweedFS:

1. Event latency: a view with --events (SeaweedFS's filer metadata subscription) of
   prefix liveR, predicate `-name '*.dat'`; writer processes PUT 1 KiB objects with
   boto3 on a paced schedule (RATE objects/s for SECONDS; every fourth key is a .tmp
   that must not appear). For each matching object: the time from its PUT's
   completion (the writer's clock) to its entry's IN_CREATE in GustFS's event stream
   (`gust events --follow`, the daemon's time of the create). Also the maintainer's
   own lag (`gust view status --json`: applied minus the filer's event time).
2. `ls -l` of a view of N objects in one flat prefix, cold (first listing after a
   fresh mount), through GustFS's FUSE mount and the preload library (`gust run`),
   against s3fs-fuse and rclone mount listing the same prefix, each remounted per
   round.
3. `gust view add` of the N objects (its first resync), a resync of the unchanged
   view (a view polled every second: the status's last_resync_secs after its second
   resync), `gust view rm`, and the store's own listing of the prefix (boto3
   list_objects_v2, 1,000 a page) for where the resync's time goes.

Usage (bench/run_s3_views.sh sets it up): s3_views.py ROUNDS N [RATE] [SECONDS]
(defaults 3 100000 1000 10). BENCH_PHASES=events,list picks phases (default both);
BENCH_LS_TIMEOUT bounds each s3fs and rclone listing (seconds, default 1800).
BENCH_WRITERS x BENCH_THREADS writer processes and threads (default 3 x 16).
JSON lines in bench/results/s3-views-<date>.json (a row per round, as it ends: with
the build's time and the load average), markdown tables of medians on stdout.
GustFS has 2 daemons; the run uses copies of the gust binary and the preload library
(a rebuild during the run does not mix builds). Everything is on loopback; mounts,
the instance and the store are removed at the end, failed or not.
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "s3"))

BUCKET = "bench"
BODY = b"v" * 1024
NS = 1_000_000_000


def live_key(prefix, i):
    """Event phase keys: 16 subdirectories; every fourth object does not match."""
    return f"{prefix}/d{i % 16:02d}/o{i:06d}." + ("tmp" if i % 4 == 3 else "dat")


def flat_key(prefix, i):
    return f"{prefix}/o{i:07d}.dat"


def writer(spec):
    """A writer process (its own GIL): `threads` threads PUT the indices i with
    i % (procs*threads) == its global thread number, each at t0 + i/rate at the
    earliest (rate 0: as fast as they can). Writes [i, start_ns, done_ns] rows."""
    import boto3
    import botocore.config

    s3 = boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region_name=os.environ["AWS_REGION"],
        config=botocore.config.Config(
            retries={"max_attempts": 10, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            max_pool_connections=spec["threads"],
        ),
    )
    key = live_key if spec["kind"] == "live" else flat_key
    stride = spec["procs"] * spec["threads"]
    rows = [[] for _ in range(spec["threads"])]

    def run(j):
        g = spec["proc"] * spec["threads"] + j
        for i in range(g, spec["n"], stride):
            if spec["rate"]:
                wait = (spec["t0_ns"] + i * NS // spec["rate"] - time.time_ns()) / NS
                if wait > 0:
                    time.sleep(wait)
            start = time.time_ns()
            s3.put_object(Bucket=BUCKET, Key=key(spec["prefix"], i), Body=BODY)
            rows[j].append([i, start, time.time_ns()])

    ts = [threading.Thread(target=run, args=(j,)) for j in range(spec["threads"])]
    [t.start() for t in ts]
    [t.join() for t in ts]
    with open(spec["out"], "w") as f:
        json.dump([r for rs in rows for r in rs], f)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--writer":
    writer(json.loads(sys.argv[2]))
    sys.exit(0)

import gustfs  # noqa: E402
import gustfs.testing  # noqa: E402
from s3env import KEY, REGION, SECRET, Instance, Weed, boto3_client  # noqa: E402
from stats import results_path  # noqa: E402  (bench/stats.py, beside this file)

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
n_flat = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
rate = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 10
phases = os.environ.get("BENCH_PHASES", "events,list").split(",")
ls_timeout = float(os.environ.get("BENCH_LS_TIMEOUT", "1800"))
procs, threads = int(os.environ.get("BENCH_WRITERS", "3")), int(os.environ.get("BENCH_THREADS", "16"))
base = os.environ.get("BENCH_DIR", "/dev/shm")
out = results_path("s3-views")
os.makedirs("bench/results", exist_ok=True)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def percentile(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round((len(s) - 1) * p)))]


def cpu_s(pid):
    """User + system CPU seconds of process pid so far (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def machine_ticks():
    """(busy, total) jiffies of all CPUs (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


# SIGTERM (timeout(1), kill) cleans up as an error does.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
work = tempfile.mkdtemp(prefix="gust-views-bench-", dir=base)
weed = inst = None
live = []  # (process, mount point) of mounts still up, for the finally
results = []
try:
    # The run uses a copy of the binary and the preload library: a rebuild meanwhile
    # does not mix builds between rounds.
    built = gustfs.testing.gust_binary()
    build = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(built).st_mtime))
    os.makedirs(os.path.join(work, "bin"))
    for f in ("gust", "libgust_preload.so"):
        if os.path.exists(os.path.join(os.path.dirname(built), f)):
            shutil.copy2(os.path.join(os.path.dirname(built), f), os.path.join(work, "bin", f))
    os.environ["GUST"] = os.path.join(work, "bin", "gust")
    weed = Weed(parent=base)
    inst = Instance(daemons=2, rootdir_parent=base)
    gustfs.connect(inst.hosts_file)
    s3 = boto3_client(weed.endpoint, pool=32)
    s3.create_bucket(Bucket=BUCKET)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    store_env = dict(AWS_ENDPOINT_URL=weed.endpoint, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
    env = dict(clean, GUST_HOSTS_FILE=inst.hosts_file, **store_env)
    events_src = f"seaweedfs://127.0.0.1:{weed.ports['filer'] + 10000}"

    def gust(*args, timeout=3600, check=True):
        t = time.monotonic()
        r = subprocess.run([inst.gust, *args], env=env, capture_output=True, text=True, timeout=timeout)
        dt = time.monotonic() - t
        if check and r.returncode != 0:
            raise RuntimeError(f"gust {' '.join(args)}: {r.stderr.strip()}")
        return dt, r

    def status(name):
        return json.loads(gust("view", "status", name, "--json")[1].stdout)

    def save(row):
        log(json.dumps(row))
        results.append(row)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")

    def context():
        """When, on what build, how loaded the machine was (1-minute load average)."""
        return dict(
            date=time.strftime("%Y-%m-%d %H:%M"),
            gust_mtime=build,
            load1=os.getloadavg()[0],
        )

    def daemon_pids():
        rows = [l.split() for l in gust("status")[1].stdout.splitlines()]
        return [int(r[3]) for r in rows if len(r) > 3 and r[0].isdigit() and r[3].isdigit()]

    def cpu_now(maintainer):
        """CPU seconds so far of the view's maintainer, the daemons and SeaweedFS."""
        return dict(maintainer=cpu_s(maintainer), daemons=sum(cpu_s(p) for p in daemon_pids()), weed=cpu_s(weed.proc.pid))

    def cpu_delta(a, b, tag):
        return {f"{tag}_cpu_{k}_s": b[k] - a[k] for k in a}

    def write(kind, prefix, n, rate):
        """PUTs n objects from `procs` writer processes; returns their rows sorted by index."""
        t0 = time.time_ns() + NS  # the schedule starts once every writer is up
        ps, outs = [], []
        for p in range(procs):
            o = os.path.join(work, f"writer-{prefix}-{p}.json")
            spec = dict(kind=kind, prefix=prefix, n=n, rate=rate, t0_ns=t0, proc=p, procs=procs, threads=threads, out=o)
            ps.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--writer", json.dumps(spec)], env=dict(clean, **store_env)))
            outs.append(o)
        bound = 600 + (n / rate * 3 if rate else n / 50)
        for p in ps:
            if p.wait(timeout=bound) != 0:
                raise RuntimeError("a writer failed")
        rows = []
        for o in outs:
            with open(o) as f:
                rows += json.load(f)
            os.unlink(o)
        rows.sort()
        assert len(rows) == n, (len(rows), n)
        return rows

    # ---- 1. event latency -------------------------------------------------------
    if "events" in phases:
        n_live = int(rate * seconds)
        for r in range(rounds):
            name = prefix = f"live{r}"
            vdir = f"/gustfs/.views/{name}"
            gust("view", "add", name, f"s3://{BUCKET}/{prefix}", "-name", "*.dat", "--events", events_src)
            seen = {}  # path -> (daemon time_ns of the IN_CREATE, when the reader had it)
            ev = subprocess.Popen([inst.gust, "events", "--follow", "--since", "now", vdir], env=env, stdout=subprocess.PIPE, text=True)

            def read(ev=ev, seen=seen):
                for line in ev.stdout:
                    e = json.loads(line)
                    if e["event"] == "IN_CREATE" and "IN_ISDIR" not in e["mask"]:
                        seen.setdefault(e["path"], (e["time_ns"], time.time_ns()))

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            try:
                time.sleep(1)
                pid = status(name)["pid"]
                c0, m0 = cpu_now(pid), machine_ticks()
                log(f"events round {r}: {n_live} PUTs at {rate}/s from {procs}x{threads} writers")
                rows = write("live", prefix, n_live, rate)
                path = lambda i: vdir + "/" + live_key(prefix, i)[len(prefix) + 1 :]
                want = [row for row in rows if row[0] % 4 != 3]
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and any(path(w[0]) not in seen for w in want):
                    time.sleep(0.2)
                time.sleep(1)  # a late non-matching entry would show by now; the status is rewritten
                cpu = cpu_delta(c0, cpu_now(pid), "events")
                m1 = machine_ticks()
                cpu["machine_busy"] = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
                st = status(name)
            finally:
                ev.terminate()
                ev.wait(timeout=30)
            reader.join(timeout=10)
            lat = [(seen[path(i)][0] - done) / 1e6 for i, _, done in want if path(i) in seen]
            lat_start = [(seen[path(i)][0] - start) / 1e6 for i, start, _ in want if path(i) in seen]
            seen_by_reader = [(seen[path(i)][1] - done) / 1e6 for i, _, done in want if path(i) in seen]
            wrong = sum(1 for p in seen if p.endswith(".tmp"))
            listed = [os.path.join(d, f) for d, _, fs in gustfs.walk(f"/.views/{name}") for f in fs]
            span = (max(w[2] for w in rows) - min(w[1] for w in rows)) / NS
            put_ms = [(d - s) / 1e6 for _, s, d in rows]
            row = dict(
                phase="events",
                round=r,
                objects=n_live,
                matching=len(want),
                target_rate=rate,
                achieved_rate=n_live / span,
                put_p50_ms=percentile(put_ms, 0.5),
                put_p99_ms=percentile(put_ms, 0.99),
                appeared=len(lat),
                missing=len(want) - len(lat),
                nonmatching_appeared=wrong,
                listed_at_end=len(listed),
                listed_tmp_at_end=sum(1 for p in listed if p.endswith(".tmp")),
                lat_p50_ms=percentile(lat, 0.5),
                lat_p99_ms=percentile(lat, 0.99),
                lat_max_ms=max(lat) if lat else None,
                lat_from_start_p50_ms=percentile(lat_start, 0.5),
                lat_from_start_p99_ms=percentile(lat_start, 0.99),
                within_1s=sum(1 for x in lat if x <= 1000) / len(want),
                reader_p50_ms=percentile(seen_by_reader, 0.5),
                reader_p99_ms=percentile(seen_by_reader, 0.99),
                view_events=st["events"],
                view_objects=st["objects"],
                view_lag_p50_ms=st["lag_p50_ms"],
                view_lag_p99_ms=st["lag_p99_ms"],
                view_state=st["state"],
                view_error=st.get("error"),
                **cpu,
            )
            row.update(context())
            save(row)
            gust("view", "rm", name)
            for k in range(0, n_live, 1000):  # the store keeps one data set at a time
                s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": live_key(prefix, i)} for i in range(k, min(k + 1000, n_live))], "Quiet": True})

    # ---- 2 and 3. ls -l of N objects; the view's resyncs ------------------------
    if "list" in phases:
        prefix = "flat"
        log(f"putting {n_flat} objects of 1 KiB in s3://{BUCKET}/{prefix}/ ({procs}x{threads} writers)")
        t = time.monotonic()
        write("flat", prefix, n_flat, 0)
        put_s = time.monotonic() - t
        log(f"put {n_flat} in {put_s:.1f} s ({n_flat / put_s:.0f}/s)")
        passwd = os.path.join(work, "s3fs.passwd")
        with open(os.open(passwd, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(f"{KEY}:{SECRET}\n")
        rclone_env = dict(
            clean,
            RCLONE_CONFIG_GBENCH_TYPE="s3",
            RCLONE_CONFIG_GBENCH_PROVIDER="Other",
            RCLONE_CONFIG_GBENCH_ENDPOINT=weed.endpoint,
            RCLONE_CONFIG_GBENCH_ACCESS_KEY_ID=KEY,
            RCLONE_CONFIG_GBENCH_SECRET_ACCESS_KEY=SECRET,
            RCLONE_CONFIG_GBENCH_REGION=REGION,
            RCLONE_CONFIG_GBENCH_FORCE_PATH_STYLE="true",
        )

        def mount(cmd, mp, menv, logname):
            os.makedirs(mp, exist_ok=True)
            lf = open(os.path.join(work, logname), "ab")
            p = subprocess.Popen(cmd, env=menv, stdout=lf, stderr=lf, start_new_session=True)
            live.append((p, mp))
            deadline = time.monotonic() + 60
            while not os.path.ismount(mp):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} did not mount {mp}: see {lf.name}")
                time.sleep(0.05)
            return p

        def unmount(p, mp):
            subprocess.run(["fusermount3", "-u", mp], capture_output=True)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=60)
            if os.path.ismount(mp):
                subprocess.run(["fusermount3", "-uz", mp], capture_output=True)
            live.remove((p, mp))

        def timed_ls(cmd, cenv, timeout):
            """(seconds, entries listed, what happened) of one `ls -l`."""
            t = time.monotonic()
            try:
                r = subprocess.run(cmd, env=cenv, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return time.monotonic() - t, None, f"timed out after {timeout:.0f} s"
            dt = time.monotonic() - t
            lines = r.stdout.count("\n")
            entries = lines - 1 if r.stdout.startswith("total") else lines
            how = "ok" if r.returncode == 0 and entries == n_flat else f"rc {r.returncode}, {entries} entries: {r.stderr.strip()[:200]}"
            return dt, entries, how

        def store_listing():
            t = time.monotonic()
            count, tok = 0, None
            for _ in range(n_flat // 1000 + 10):
                kw = {"Bucket": BUCKET, "Prefix": prefix + "/"}
                if tok:
                    kw["ContinuationToken"] = tok
                page = s3.list_objects_v2(**kw)
                count += len(page.get("Contents", []))
                tok = page.get("NextContinuationToken")
                if not tok:
                    break
            assert count == n_flat, count
            return time.monotonic() - t

        floor = os.path.join(work, "tmpfs-floor")
        os.makedirs(floor)
        for i in range(n_flat):
            os.close(os.open(os.path.join(floor, f"o{i:07d}.dat"), os.O_WRONLY | os.O_CREAT, 0o444))
        for r in range(rounds):
            row = dict(phase="list", round=r, objects=n_flat, put_rate=n_flat / put_s)
            name = "flat"
            # A view polled every second: its first resync (the add), its second
            # (nothing changed: the store's listing and GustFS's find, no creates).
            c0 = cpu_now(0)
            dt, p = gust("view", "add", name, f"s3://{BUCKET}/{prefix}", "--resync", "1")
            st = status(name)
            row.update(cpu_delta(c0, cpu_now(st["pid"]), "add"))  # the maintainer's: its whole life so far
            row["add_polled_s"] = dt
            row["first_resync_s"] = st["last_resync_secs"]
            deadline = time.monotonic() + 1800
            while status(name)["resyncs"] < 2 and time.monotonic() < deadline:
                time.sleep(0.25)
            st = status(name)
            row["unchanged_resync_s"] = st["last_resync_secs"] if st["resyncs"] >= 2 else None
            row["rm_s"] = gust("view", "rm", name)[0]
            row["store_list_s"] = store_listing()
            t = time.monotonic()
            lsf = subprocess.run(["rclone", "lsf", f"gbench:{BUCKET}/{prefix}"], env=rclone_env, capture_output=True, text=True, timeout=600)
            row["store_list_rclone_s"] = time.monotonic() - t
            assert lsf.stdout.count("\n") == n_flat, (lsf.stdout.count("\n"), lsf.stderr[-500:])
            # The view listed: followed by events (the default resync, 600 s).
            dt, p = gust("view", "add", name, f"s3://{BUCKET}/{prefix}", "--events", events_src)
            row["add_events_s"] = dt
            st = status(name)
            assert st["objects"] == n_flat, st
            dt, fr = gust("find", "/.views/" + name, "-type", "f")
            row["gust_find_s"] = dt
            assert fr.stdout.count("\n") == n_flat, fr.stdout.count("\n")
            log(f"list round {r}: view add {row['add_polled_s']:.2f} s, {row['add_events_s']:.2f} s; unchanged resync {row['unchanged_resync_s']}")

            row["tmpfs_s"], _, row["tmpfs_how"] = timed_ls(["ls", "-l", floor], clean, 600)
            mp = os.path.join(work, "mnt-gust")
            p = mount([inst.gust, "mount", mp], mp, env, "gust-mount.log")
            row["gust_fuse_s"], _, row["gust_fuse_how"] = timed_ls(["ls", "-l", mp + "/.views/" + name], clean, 600)
            row["gust_fuse_warm_s"], _, _ = timed_ls(["ls", "-l", mp + "/.views/" + name], clean, 600)
            unmount(p, mp)
            row["gust_preload_s"], _, row["gust_preload_how"] = timed_ls(
                [inst.gust, "run", "--", "ls", "-l", "/gustfs/.views/" + name], env, 600
            )
            log(f"list round {r}: gust fuse {row['gust_fuse_s']:.3f} s, preload {row['gust_preload_s']:.3f} s")

            def s3fs():
                mp = os.path.join(work, "mnt-s3fs")
                cmd = ["s3fs", f"{BUCKET}:/{prefix}", mp, "-f", "-o", f"url={weed.endpoint}", "-o", "use_path_request_style"]
                cmd += ["-o", f"passwd_file={passwd}", "-o", f"endpoint={REGION}"]
                p = mount(cmd, mp, clean, "s3fs.log")
                row["s3fs_s"], row["s3fs_entries"], row["s3fs_how"] = timed_ls(["ls", "-l", mp], clean, ls_timeout)
                unmount(p, mp)
                log(f"list round {r}: s3fs {row['s3fs_s']:.2f} s ({row['s3fs_how']})")

            def rclone(tag, *extra):
                mp = os.path.join(work, "mnt-" + tag)
                cmd = ["rclone", "mount", f"gbench:{BUCKET}/{prefix}", mp, *extra]
                p = mount(cmd, mp, rclone_env, tag + ".log")
                row[tag + "_s"], row[tag + "_entries"], row[tag + "_how"] = timed_ls(["ls", "-l", mp], clean, ls_timeout)
                unmount(p, mp)
                log(f"list round {r}: {tag} {row[tag + '_s']:.2f} s ({row[tag + '_how']})")

            # s3fs and rclone alternate which lists first (a store warmed by the other).
            others = [s3fs, lambda: rclone("rclone")]
            for f in others if r % 2 == 0 else others[::-1]:
                f()
            rclone("rclone_servermtime", "--use-server-modtime")
            gust("view", "rm", name)
            row.update(context())
            save(row)

    def med(rows, k):
        xs = [row[k] for row in rows if row.get(k) is not None]
        return statistics.median(xs) if xs else None

    ev_rows = [row for row in results if row["phase"] == "events"]
    if ev_rows:
        m = lambda k: med(ev_rows, k)
        print(f"\nEvent latency: {len(ev_rows)} rounds, medians; {ev_rows[0]['objects']} PUTs of 1 KiB per round paced at {rate}/s by {procs} processes x {threads} threads; view -name '*.dat' (3 of 4 keys)\n")
        print("| achieved PUT rate | matching appeared / written | non-matching appeared | PUT's completion to GustFS create p50 | p99 | max | within 1 s | PUT's start to create p50 / p99 | maintainer lag p50 | p99 | PUT p50 / p99 |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {m('achieved_rate'):.0f}/s | {m('appeared'):.0f} / {m('matching'):.0f} | {m('nonmatching_appeared'):.0f} "
            f"| {m('lat_p50_ms'):.0f} ms | {m('lat_p99_ms'):.0f} ms | {m('lat_max_ms'):.0f} ms | {100 * m('within_1s'):.2f}% "
            f"| {m('lat_from_start_p50_ms'):.0f} / {m('lat_from_start_p99_ms'):.0f} ms | {m('view_lag_p50_ms'):.0f} ms | {m('view_lag_p99_ms'):.0f} ms | {m('put_p50_ms'):.0f} / {m('put_p99_ms'):.0f} ms |"
        )
        print(
            f"\nCPU during a round's writes: maintainer {m('events_cpu_maintainer_s'):.2f} s, "
            f"GustFS daemons {m('events_cpu_daemons_s'):.2f} s, SeaweedFS {m('events_cpu_weed_s'):.2f} s; "
            f"both cores {100 * m('machine_busy'):.0f}% busy from the writes' start to the last entry's (+1 s)"
        )
        print("\nper round: " + "; ".join(
            f"{r_['achieved_rate']:.0f}/s, {r_['appeared']}/{r_['matching']} appeared, {r_['nonmatching_appeared']} wrong, p50 {r_['lat_p50_ms']:.0f} ms, p99 {r_['lat_p99_ms']:.0f} ms"
            for r_ in ev_rows
        ))
    ls_rows = [row for row in results if row["phase"] == "list"]
    if ls_rows:
        m = lambda k: med(ls_rows, k)
        g, gp = m("gust_fuse_s"), m("gust_preload_s")
        print(f"\n`ls -l` of one flat prefix of {n_flat} objects, cold (fresh mount), {len(ls_rows)} rounds, medians\n")
        print("| lister | time | entries listed | ratio to gust FUSE (cold) | ratio to gust preload |")
        print("|---|---:|---|---:|---:|")
        for label, k in (
            ("a tmpfs directory of as many empty files (the floor: ls -l itself)", "tmpfs"),
            ("gust FUSE mount, cold", "gust_fuse"),
            ("gust FUSE mount, warm (second ls)", "gust_fuse_warm"),
            ("gust run (preload library)", "gust_preload"),
            ("s3fs 1.90 (defaults)", "s3fs"),
            ("rclone 1.60 mount (defaults)", "rclone"),
            ("rclone mount --use-server-modtime", "rclone_servermtime"),
        ):
            t = m(k + "_s")
            hows = sorted({row.get(k + "_how", "ok") for row in ls_rows})
            print(f"| {label} | {t:.3f} s | {', '.join(h for h in hows if h)} | {t / g:.1f} | {t / gp:.1f} |")
        print(f"\nThe view's resyncs, {n_flat} objects ({len(ls_rows)} rounds, medians)\n")
        print("| what | time |")
        print("|---|---:|")
        for label, k in (
            ("`gust view add` (first resync), polled view, the command's wall time", "add_polled_s"),
            ("the same, the maintainer's last_resync_secs", "first_resync_s"),
            ("`gust view add --events` (first resync), the command's wall time", "add_events_s"),
            ("resync of the unchanged view (last_resync_secs of the second)", "unchanged_resync_s"),
            ("`gust view rm`", "rm_s"),
            ("the store's listing alone, boto3 list_objects_v2 (1,000 a page)", "store_list_s"),
            ("the store's listing alone, `rclone lsf` (1,000 a page)", "store_list_rclone_s"),
            ("`gust find` of the view's entries (what a resync compares the listing with)", "gust_find_s"),
        ):
            v = m(k)
            print(f"| {label} | {'-' if v is None else f'{v:.2f} s'} |")
        print(
            f"\nCPU during `gust view add` (polled view): maintainer {m('add_cpu_maintainer_s'):.2f} s, "
            f"daemons {m('add_cpu_daemons_s'):.2f} s, SeaweedFS {m('add_cpu_weed_s'):.2f} s"
        )
        print(f"\nput rate of the data set: {ls_rows[0]['put_rate']:.0f} objects/s")
    if results:
        loads = [row["load1"] for row in results]
        print(f"\nload average at the rounds' ends: {min(loads):.1f}-{max(loads):.1f}; gust binary of {results[0]['gust_mtime']}")
    print(f"\nrows: {out}")
finally:
    for p, mp in list(live):
        subprocess.run(["fusermount3", "-uz", mp], capture_output=True)
        if p.poll() is None:
            p.kill()
            p.wait(timeout=60)
    if inst:
        inst.stop()
    if weed:
        weed.stop()
    shutil.rmtree(work, ignore_errors=True)
