#!/usr/bin/env python3
"""A data-loader workload: many files of log-normal sizes (like an image data set),
read whole, in a new random order every epoch, by worker processes, the way a
PyTorch DataLoader with shuffling reads an ImageFolder.

    loader.py make --files N --local DIR --gust /PATH     # the same data set in both
    loader.py read --target gust:/PATH  [--workers 4 --epochs 2 --verify]
    loader.py read --target posix:DIR   (the local copy, or /gustfs/PATH under gust run)
    loader.py read ... --api read_bytes  (gustfs.read_bytes / pathlib's read_bytes per file)
    loader.py read ... --api read_many --batch 32  (gustfs.read_many per batch of 32
                        files, as a loader's __getitems__ fetches a batch; local:
                        Python's open per file, there being no batch read there)

`make` writes DIR/manifest.json (relative path, size, crc32 of every file); `read`
takes the file list from it, as a loader takes it from an index built once. `read`
prints one JSON line: files, bytes and seconds of each epoch.

Targets: `gust:/PATH` opens with gustfs.open (the Python module over the client
core); `posix:DIR` opens with Python's own open, which is the local file system, or
GustFS through the preload library when run under `gust run` with DIR under the
mount directory. Workers are forked once and kept over the epochs (persistent
workers); each epoch hands every worker an interleaved share of a fresh
permutation (as a DataLoader deals out batches), and is timed from dispatch to the
last worker's answer.
"""

import argparse
import json
import math
import multiprocessing
import os
import random
import sys
import time
import zlib

SIZE_MEAN_BYTES = 100 << 10  # around 100 KiB, like the JPEGs of an image data set
SIZE_SIGMA = 0.5  # log-normal spread: median 88 KiB, 99th percentile ~280 KiB
SIZE_MIN_BYTES = 1 << 10
SIZE_MAX_BYTES = 8 << 20
FILES_PER_DIR = 200  # "class" directories of an ImageFolder


def sizes(n, seed):
    rng = random.Random(seed)
    mu = math.log(SIZE_MEAN_BYTES) - SIZE_SIGMA**2 / 2  # so that the mean is SIZE_MEAN_BYTES
    return [min(SIZE_MAX_BYTES, max(SIZE_MIN_BYTES, int(rng.lognormvariate(mu, SIZE_SIGMA)))) for _ in range(n)]


def make(args):
    import gustfs

    # Contents: slices of one pseudo-random pool, the same for the same seed, so that
    # a second copy in GustFS (--gust-only) matches the local copy's manifest.
    pool = random.Random(args.seed).randbytes(SIZE_MAX_BYTES * 2)
    entries = []
    t0 = time.perf_counter()
    for i, size in enumerate(sizes(args.files, args.seed)):
        rel = f"class{i // FILES_PER_DIR:04d}/img{i:06d}.bin"
        off = (i * 7919) % SIZE_MAX_BYTES
        data = memoryview(pool)[off : off + size]
        if i % FILES_PER_DIR == 0:
            if not args.gust_only:
                os.makedirs(os.path.join(args.local, os.path.dirname(rel)), exist_ok=True)
            gustfs.makedirs(f"{args.gust}/{os.path.dirname(rel)}", exist_ok=True)
        if not args.gust_only:
            with open(os.path.join(args.local, rel), "wb") as f:
                f.write(data)
        gustfs.write_bytes(f"{args.gust}/{rel}", data)
        entries.append([rel, size, zlib.crc32(data)])
    manifest = {"files": entries, "bytes": sum(e[1] for e in entries)}
    if not args.gust_only:
        with open(os.path.join(args.local, "manifest.json"), "w") as f:
            json.dump(manifest, f)
    print(
        f"made {len(entries)} files, {manifest['bytes'] / 2**20:.0f} MiB, in {args.local} and gust:{args.gust} "
        f"({time.perf_counter() - t0:.1f} s)",
        file=sys.stderr,
    )


def worker(target, api, batch, root, entries, conn):
    if target == "gust":
        import gustfs

        opener, read_bytes, read_many = gustfs.open, gustfs.read_bytes, gustfs.read_many
    else:
        import pathlib

        def read_many(paths):
            out = []
            for p in paths:
                with open(p, "rb") as f:
                    out.append(f.read())
            return out

        opener, read_bytes = open, lambda p: pathlib.Path(p).read_bytes()
    while True:
        job = conn.recv()
        if job is None:
            return
        indices, verify = job
        n = nbytes = 0
        bad = []
        if api == "read_many":
            batches = [indices[k : k + batch] for k in range(0, len(indices), batch)]
        else:
            batches = [[i] for i in indices]
        for b in batches:
            if api == "read_many":
                datas = read_many([root + "/" + entries[i][0] for i in b])
            elif api == "read_bytes":
                datas = [read_bytes(root + "/" + entries[b[0]][0])]
            else:
                with opener(root + "/" + entries[b[0]][0], "rb") as f:
                    datas = [f.read()]
            for i, data in zip(b, datas):
                rel, size, crc = entries[i]
                n += 1
                nbytes += len(data)
                if len(data) != size or (verify and zlib.crc32(data) != crc):
                    bad.append(rel)
        conn.send((n, nbytes, bad))


def read(args):
    target, _, root = args.target.partition(":")
    if target not in ("gust", "posix") or not root:
        sys.exit(f"loader: --target must be gust:/PATH or posix:DIR, not {args.target!r}")
    with open(os.path.join(args.manifest_dir, "manifest.json")) as f:
        manifest = json.load(f)
    entries = manifest["files"]
    if target == "gust":
        import gustfs

        gustfs.client()  # connected before the fork: workers inherit it
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(args.workers):
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(target, args.api, args.batch, root.rstrip("/"), entries, b), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    epochs = []
    for epoch in range(args.epochs):
        order = list(range(len(entries)))
        random.Random(args.seed * 1000 + epoch).shuffle(order)
        t0 = time.perf_counter()
        for w, conn in enumerate(pipes):
            conn.send((order[w :: args.workers], args.verify))
        results = [conn.recv() for conn in pipes]
        seconds = time.perf_counter() - t0
        files = sum(r[0] for r in results)
        nbytes = sum(r[1] for r in results)
        bad = [x for r in results for x in r[2]]
        if bad or files != len(entries) or nbytes != manifest["bytes"]:
            sys.exit(f"loader: epoch {epoch}: {len(bad)} files read wrong (first: {bad[:3]}), {files} files, {nbytes} bytes")
        epochs.append({"files": files, "bytes": nbytes, "seconds": seconds})
    for conn in pipes:
        conn.send(None)
    for p in procs:
        p.join()
    files = sum(e["files"] for e in epochs)
    seconds = sum(e["seconds"] for e in epochs)
    out = {
        "target": args.target,
        "api": args.api,
        "batch": args.batch if args.api == "read_many" else 1,
        "workers": args.workers,
        "epochs": epochs,
        "files_per_s": files / seconds,
        "mib_per_s": sum(e["bytes"] for e in epochs) / seconds / 2**20,
    }
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="create the data set locally and in GustFS")
    m.add_argument("--files", type=int, default=20_000)
    m.add_argument("--local", required=True, help="local directory (also gets manifest.json)")
    m.add_argument("--gust", required=True, help="directory inside GustFS")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--gust-only", action="store_true", help="another GustFS copy of the same data set")
    r = sub.add_parser("read", help="read the data set with worker processes")
    r.add_argument("--target", required=True, help="gust:/PATH or posix:DIR")
    r.add_argument("--manifest-dir", required=True, help="where make wrote manifest.json")
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--epochs", type=int, default=2)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--verify", action="store_true", help="check every file's crc32 too")
    r.add_argument(
        "--api",
        choices=("open", "read_bytes", "read_many"),
        default="open",
        help="open: `with open(p, 'rb') as f: f.read()`; read_bytes: gustfs.read_bytes(p), "
        "or pathlib.Path(p).read_bytes() for posix targets; read_many: gustfs.read_many of a "
        "batch of --batch files (posix targets: open per file)",
    )
    r.add_argument("--batch", type=int, default=32, help="files per read_many call (a loader's batch size)")
    args = ap.parse_args()
    make(args) if args.cmd == "make" else read(args)


if __name__ == "__main__":
    main()
