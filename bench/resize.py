# Growing and shrinking a running instance (docs/DESIGN.md, "Growing and shrinking"):
# what moves, how long it takes, and what clients get meanwhile.
#
# Usage (bench/run_resize.sh runs it): GUST=... GUST_HOSTS_FILE=... python3 bench/resize.py \
#     FILES BIG_FILES ADD LOAD_PROCS OUT.json
# Through the preload library (LD_PRELOAD set by the caller). Fills /gustfs/r with FILES
# files of 4 KiB (in 100 directories) and BIG_FILES files of 8 MiB, then runs LOAD_PROCS
# processes that stat and read random small files, counting operations per 50 ms, while
# `gust expand --local ADD` and then `gust shrink --count ADD` run. Prints one JSON object:
# per move its summary (records, chunks, bytes, seconds), the moved fractions against the
# ideal (ADD/(N+ADD) for the expansion, ADD/(N+ADD) of the larger instance for the shrink),
# and the clients' operations a second before, during and after each move.
import json, os, random, subprocess, sys, time, multiprocessing as mp

files, big, add, procs, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
gust = os.environ["GUST"]
root = "/gustfs/r"
small = b"s" * 4096
chunk = 512 << 10
piece = bytes(random.Random(1).getrandbits(8) for _ in range(1 << 16)) * 16  # 1 MiB


def fill():
    os.makedirs(root, exist_ok=True)
    for d in range(100):
        os.makedirs(f"{root}/d{d}", exist_ok=True)
    for i in range(files):
        with open(f"{root}/d{i % 100}/f{i}", "wb") as f:
            f.write(small)
    for i in range(big):
        with open(f"{root}/big{i}", "wb") as f:
            for _ in range(8):
                f.write(piece)


def load(seed, stop, q):
    rnd = random.Random(seed)
    counts = []
    window, n = time.monotonic(), 0
    while not stop.is_set():
        i = rnd.randrange(files)
        p = f"{root}/d{i % 100}/f{i}"
        os.stat(p)
        with open(p, "rb") as f:
            if f.read() != small:
                q.put(("bad", p))
                return
        n += 2
        now = time.monotonic()
        if now - window >= 0.05:
            counts.append((window, now, n))
            window, n = now, 0
    q.put(("ok", counts))


def move(args):
    t0 = time.monotonic()
    r = subprocess.run([gust] + args, capture_output=True, text=True)
    t1 = time.monotonic()
    if r.returncode != 0:
        sys.exit(f"gust {' '.join(args)} failed: {r.stderr}")
    return t0, t1, json.loads(r.stdout)


def capacities(hosts):
    """The capacity each daemon of the hosts file registered (0 where none), by id."""
    caps = {}
    for line in open(hosts):
        f = line.split()
        if f and f[0] == "daemon":
            cap = [int(t[len("capacity:"):]) for t in f[5:] if t.startswith("capacity:")]
            caps[int(f[1])] = cap[0] if cap else 0
    return [caps[i] for i in sorted(caps)]


def rate(windows, a, b):
    ops = sum(n for (s, e, n) in windows if s >= a and e <= b)
    return ops / max(b - a, 1e-9)


t = time.monotonic()
fill()
fill_s = time.monotonic() - t
stop = mp.Event()
q = mp.Queue()
ps = [mp.Process(target=load, args=(k, stop, q)) for k in range(procs)]
for p in ps:
    p.start()
time.sleep(3)
e0, e1, grown = move(["expand", "--local", str(add)])
caps = capacities(os.environ["GUST_HOSTS_FILE"])
time.sleep(3)
s0, s1, shrunk = move(["shrink", "--count", str(add)])
time.sleep(3)
stop.set()
windows = []
for _ in ps:
    kind, v = q.get()
    if kind == "bad":
        sys.exit(f"a client read other bytes than written from {v}")
    windows.extend(v)
for p in ps:
    p.join()
records = files + big + 101
chunks = big * 16  # 4 KiB files are inline: no chunks
daemons_after = grown["daemons"]
ideal = add / daemons_after
# Capacity placement: the new daemons' share of the registered capacities.
ideal_chunks = sum(caps[-add:]) / sum(caps) if len(caps) == daemons_after and all(caps) else ideal
print(json.dumps({
    "files": files, "big_files": big, "bytes": files * 4096 + big * (8 << 20), "fill_seconds": fill_s,
    "load_processes": procs, "daemons": [daemons_after - add, daemons_after],
    "expand": grown, "shrink": shrunk,
    "ideal_fraction": ideal,
    "ideal_chunks_fraction": ideal_chunks,
    "expand_records_fraction": grown["records_moved"] / records,
    "expand_chunks_fraction": grown["chunks_moved"] / chunks,
    "expand_bytes_fraction": grown["bytes_moved"] / (big * (8 << 20)),
    "shrink_records_fraction": shrunk["records_moved"] / records,
    "shrink_chunks_fraction": shrunk["chunks_moved"] / chunks,
    "shrink_bytes_fraction": shrunk["bytes_moved"] / (big * (8 << 20)),
    "ops_per_s_before": rate(windows, e0 - 2.5, e0),
    "ops_per_s_during_expand": rate(windows, e0, e1),
    "ops_per_s_between": rate(windows, e1 + 0.5, s0),
    "ops_per_s_during_shrink": rate(windows, s0, s1),
    "ops_per_s_after": rate(windows, s1 + 0.5, s1 + 2.5),
}))
