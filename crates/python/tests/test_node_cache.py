"""The node cache through the Python module: what one process read, another
process of the node reads from the holder's shared memory, and a change made
elsewhere is seen at once (docs/DESIGN.md, "The node cache").

This suite's own process does not use the node cache (conftest.py: its tests
count the daemons' requests), so the readers here are child processes started
without GUST_NODE_CACHE=0."""

import os
import subprocess
import sys
import time

import gustfs

READER = r"""
import sys, gustfs
paths = sys.argv[1:]
c = gustfs.Client()
got = [c.read_bytes(p) for p in paths]
print(c.node_cache_hits)
for g in got:
    print(g[:16].decode(), len(g))
"""


def read_in_child(instance, paths):
    env = dict(os.environ)
    env.pop("GUST_NODE_CACHE", None)
    env["GUST_HOSTS_FILE"] = instance.hosts_file
    out = subprocess.run(
        [sys.executable, "-c", READER, *paths], env=env, check=True, capture_output=True, text=True, timeout=120
    ).stdout.split("\n")
    return int(out[0]), [(line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1])) for line in out[1 : 1 + len(paths)]]


def content(path, version):
    return (f"v{version}:{path}:".encode() * 400)[:7000]


def test_another_process_reads_what_one_read_and_sees_a_change(instance, d):
    paths = [f"{d}/f{i}" for i in range(100)]
    for p in paths:
        gustfs.write_bytes(p, content(p, 1))
    # A first process reads them all: it tells the holder, which takes them.
    hits, got = read_in_child(instance, paths)
    assert [g for g, _ in got] == [content(p, 1)[:16].decode() for p in paths]
    # Another process finds most of them there (the first's last few paths wait
    # in it for a message of 32 that never filled up); the holder fills in the
    # background, so a few tries, each a new process, bounded.
    deadline = time.monotonic() + 30
    while True:
        hits, got = read_in_child(instance, paths)
        assert [g for g, _ in got] == [content(p, 1)[:16].decode() for p in paths]
        if hits >= 60 or time.monotonic() > deadline:
            break
    assert hits >= 60, f"{hits} of {len(paths)} from the node cache"
    # Changed by this process (a different client): the holder's grant is recalled
    # before the change returns, so the next process reads the new contents. (A
    # new process looks in the node cache from its 33rd read on: these are past
    # that.)
    changed = paths[40:50]
    for p in changed:
        gustfs.write_bytes(p, content(p, 2) + b"longer")
    hits, got = read_in_child(instance, paths)
    for p, (g, n) in zip(paths, got):
        v = 2 if p in changed else 1
        assert g == content(p, v)[:16].decode(), p
        assert n == len(content(p, v)) + (6 if v == 2 else 0), p
