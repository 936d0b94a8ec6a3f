"""Staging against an object store (issue 35): `gust stage in|out` between a real
SeaweedFS S3 gateway and GustFS, against boto3's transfer manager (what `aws s3 cp
--recursive` runs: s3transfer, 10 requests in flight, 8 MiB parts) copying the same
objects between the same store and a local directory, in the same round.

Usage (bench/run_s3_stage.sh sets it up): s3_stage.py ROUNDS LARGE_MIB SMALL_COUNT
Stage-in is measured by the daemons (the default, which asks every object's metadata with
a HEAD), by the daemons with --no-metadata, and through the client (--via client).
JSON lines in bench/results/s3-stage-<date>.json, a markdown table of medians on stdout.
"""

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "s3"))
import gustfs  # noqa: E402
from boto3.s3.transfer import TransferConfig, create_transfer_manager  # noqa: E402
from s3env import KEY, REGION, SECRET, Instance, Weed, boto3_client  # noqa: E402
from stats import results_path  # noqa: E402  (bench/stats.py, beside this file)

MIB = 1 << 20
rounds, large_mib, small_count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = os.environ.get("BENCH_DIR", "/dev/shm")
out = results_path("s3-stage")
os.makedirs("bench/results", exist_ok=True)

# BENCH_STORE_DIR puts the store's volumes elsewhere (a 10 GiB run does not fit three
# copies in /dev/shm), BENCH_VOLUME_MB its volume size (1024 for 10 GiB);
# BENCH_WAYS=default measures the default stage-in alone.
weed = Weed(parent=os.environ.get("BENCH_STORE_DIR", base), volume_mb=int(os.environ.get("BENCH_VOLUME_MB", "64")))
all_ways = os.environ.get("BENCH_WAYS", "all") != "default"
inst = Instance(daemons=2, rootdir_parent=base)
local = tempfile.mkdtemp(prefix="gust-s3-bench-", dir=base)
try:
    gustfs.connect(inst.hosts_file)
    s3 = boto3_client(weed.endpoint, pool=32)
    s3.create_bucket(Bucket="bench")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        GUST_HOSTS_FILE=inst.hosts_file,
        AWS_ENDPOINT_URL=weed.endpoint,
        AWS_ACCESS_KEY_ID=KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_REGION=REGION,
    )
    cfg = TransferConfig(max_concurrency=10, multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)

    # The data sets: large objects of 1 to 256 MiB, and small ones of 4 KiB.
    sizes, total = [], 0
    cycle = [1, 4, 16, 64, 256]
    while total < large_mib:
        s = min(cycle[len(sizes) % len(cycle)], large_mib - total)
        sizes.append(s)
        total += s
    print(f"making the data sets: {len(sizes)} objects, {total} MiB; {small_count} x 4 KiB", file=sys.stderr)
    block = os.urandom(MIB)
    # One payload file per size (uploaded from disk: 10 GiB of objects would
    # otherwise sit in this process's memory beside the copies being measured).
    payloads = {}
    for size in set(sizes):
        payloads[size] = os.path.join(local, f"payload-{size}")
        with open(payloads[size], "wb") as f:
            for _ in range(size):
                f.write(block)
    with create_transfer_manager(s3, cfg) as tm:
        fs = [tm.upload(payloads[s], "bench", f"large/o{i:03d}") for i, s in enumerate(sizes)]
        [f.result() for f in fs]
    del fs
    for path in payloads.values():
        os.unlink(path)
    with ThreadPoolExecutor(32) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket="bench", Key=f"small/{i // 1000:03d}/f{i:06d}", Body=block[i : i + 4096]), range(small_count)))

    def keys(prefix):
        out, tok = [], None
        while True:
            kw = {"Bucket": "bench", "Prefix": prefix}
            if tok:
                kw["ContinuationToken"] = tok
            r = s3.list_objects_v2(**kw)
            out += [o["Key"] for o in r.get("Contents", [])]
            tok = r.get("NextContinuationToken")
            if not tok:
                return out

    def drop(prefix):
        for k in keys(prefix):
            s3.delete_object(Bucket="bench", Key=k)
        # SeaweedFS frees a deleted object's space only when its volume is
        # compacted: without this, three rounds of 10 GiB copies fill the disk.
        master = f"http://127.0.0.1:{weed.ports['master']}/vol/vacuum?garbageThreshold=0.0001"
        urllib.request.urlopen(master, timeout=600).read()

    def boto3_in(prefix, dest):
        shutil.rmtree(dest, ignore_errors=True)
        t = time.monotonic()
        with create_transfer_manager(s3, cfg) as tm:
            fs = []
            for k in keys(prefix + "/"):
                p = os.path.join(dest, k[len(prefix) + 1 :])
                os.makedirs(os.path.dirname(p), exist_ok=True)
                fs.append(tm.download("bench", k, p))
            [f.result() for f in fs]
        return time.monotonic() - t

    def boto3_out(src, prefix):
        t = time.monotonic()
        with create_transfer_manager(s3, cfg) as tm:
            fs = []
            for root, _, files in os.walk(src):
                for name in files:
                    p = os.path.join(root, name)
                    fs.append(tm.upload(p, "bench", prefix + "/" + os.path.relpath(p, src)))
            [f.result() for f in fs]
        return time.monotonic() - t

    def gust(*args):
        t = time.monotonic()
        r = subprocess.run([inst.gust, *args, "--json"], env=env, capture_output=True, text=True)
        dt = time.monotonic() - t
        s = json.loads(r.stdout) if r.stdout else {}
        if r.returncode != 0 or s.get("failures"):
            raise RuntimeError(f"gust {' '.join(args)}: {r.stderr}")
        return dt

    def gust_in(prefix, dest, via, *extra):
        if gustfs.exists(dest):
            gustfs.rmtree(dest)
        return gust("stage", "in", f"s3://bench/{prefix}", dest, "--via", via, *extra)

    results = []
    for r in range(rounds):
        row = {"round": r}
        for name, prefix in (("large", "large"), ("small", "small")):
            # Each copy goes as soon as it was measured, so that at most two copies of
            # a data set besides the store's exist at once.
            row[f"{name}_in_boto3_s"] = boto3_in(prefix, os.path.join(local, name))
            row[f"{name}_out_boto3_s"] = boto3_out(os.path.join(local, name), f"out-boto3-{name}-{r}")
            shutil.rmtree(os.path.join(local, name), ignore_errors=True)
            drop("out-")
            if all_ways:
                row[f"{name}_in_gust-client_s"] = gust_in(prefix, f"/{name}", "client")
                row[f"{name}_in_gust-nometa_s"] = gust_in(prefix, f"/{name}", "daemons", "--no-metadata")
            row[f"{name}_in_gust_s"] = gust_in(prefix, f"/{name}", "daemons")
            row[f"{name}_out_gust_s"] = gust("stage", "out", f"/{name}", f"s3://bench/out-gust-{name}-{r}")
            gustfs.rmtree(f"/{name}")
            drop("out-")
        print(json.dumps(row), file=sys.stderr)
        results.append(row)
    with open(out, "w") as f:
        for row in results:
            f.write(json.dumps(row) + "\n")

    def med(k):
        return statistics.median(row[k] for row in results)

    data = {"large": total * MIB, "small": small_count * 4096}
    print(f"\n{rounds} rounds, medians; large: {len(sizes)} objects of 1-256 MiB, {total} MiB; small: {small_count} x 4 KiB\n")
    print("| data set | direction | boto3 transfer manager | gust stage | ratio (gust / boto3) |")
    print("|---|---|---|---|---|")
    for name in ("large", "small"):
        rate = lambda s: f"{data[name] / s / MIB:.0f} MiB/s" if name == "large" else f"{small_count / s:.0f} objects/s"
        ways = (
            ("in", "gust", "in (daemons, default)"),
            ("in", "gust-nometa", "in (daemons, --no-metadata)"),
            ("in", "gust-client", "in (--via client)"),
            ("out", "gust", "out"),
        )
        for d, way, label in ways:
            if f"{name}_{d}_{way}_s" not in results[0]:
                continue
            b, g = med(f"{name}_{d}_boto3_s"), med(f"{name}_{d}_{way}_s")
            print(f"| {name} | {label} | {b:.2f} s ({rate(b)}) | {g:.2f} s ({rate(g)}) | {b / g:.2f} |")
    print(f"\nrows: {out}")
finally:
    inst.stop()
    weed.stop()
    shutil.rmtree(local, ignore_errors=True)
