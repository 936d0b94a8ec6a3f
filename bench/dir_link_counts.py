#!/usr/bin/env python3
"""What keeping directory link counts costs (docs/PERFORMANCE.md, "Directory link
counts"): mkdir, rmdir and file create+close at the top of GustFS (the root keeps no
record: no parent update) and one level down (the parent's daemon gets a merge),
in the same run, under the preload library:

    gust start --local 2 --rootdir /tmp/g --mountdir /gustfs
    GUST_HOSTS_FILE=/tmp/g/gust.hosts gust run -- python3 bench/dir_link_counts.py

Prints medians of ROUNDS rounds of N operations each, in microseconds per operation.
"""
import os
import statistics
import time

N = 2000
ROUNDS = 5
MOUNT = os.environ.get("GUST_MOUNTDIR", "/gustfs")


def one(base):
    t0 = time.perf_counter()
    for i in range(N):
        os.mkdir(f"{base}/d{i}")
    t1 = time.perf_counter()
    for i in range(N):
        os.rmdir(f"{base}/d{i}")
    t2 = time.perf_counter()
    for i in range(N):
        os.close(os.open(f"{base}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    t3 = time.perf_counter()
    for i in range(N):
        os.unlink(f"{base}/f{i}")
    return [(t1 - t0) / N * 1e6, (t2 - t1) / N * 1e6, (t3 - t2) / N * 1e6]


os.mkdir(f"{MOUNT}/p")
res = {"top": [], "nested": []}
for _ in range(ROUNDS):
    res["top"].append(one(MOUNT))
    res["nested"].append(one(f"{MOUNT}/p"))
med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in res.items()}
for k, m in med.items():
    print(f"{k:7s} mkdir {m[0]:6.1f} us  rmdir {m[1]:6.1f} us  create {m[2]:6.1f} us  (medians of {ROUNDS} x {N})")
print("nested/top: mkdir {:.2f}  rmdir {:.2f}  create {:.2f}".format(*(med["nested"][j] / med["top"][j] for j in range(3))))
