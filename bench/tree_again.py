"""What a process finds in a tree it already looked at (issue 29's FUSE goal): a
tree of small files is made, looked at once (`ls -lR`, a stat and a read of every
file), then timed: `ls -lR` again, a stat of every file, an open+read+close of
every file. Prints JSON: seconds per pass and operations per second, medians of
`runs` passes.
Usage: python3 bench/tree_again.py DIR [dirs] [files_per_dir] [runs]"""
import json, os, statistics, subprocess, sys, time

root = sys.argv[1]
dirs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
per = int(sys.argv[3]) if len(sys.argv) > 3 else 100
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
data = b"x" * 4096
paths = []
for d in range(dirs):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for f in range(per):
        p = f"{root}/d{d}/f{f}"
        with open(p, "wb") as fh:
            fh.write(data)
        paths.append(p)


def ls():
    subprocess.run(["ls", "-lR", root], stdout=subprocess.DEVNULL, check=True)


def stat_all():
    for p in paths:
        os.stat(p)


def read_all():
    for p in paths:
        with open(p, "rb") as fh:
            fh.read()


ls(), stat_all(), read_all()  # looked at once
out = {"files": len(paths)}
for name, fn in [("ls_lR", ls), ("stat", stat_all), ("read", read_all)]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    s = statistics.median(times)
    out[name] = {"seconds": s, "per_s": len(paths) / s}
print(json.dumps(out))
