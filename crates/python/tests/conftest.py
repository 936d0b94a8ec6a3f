"""Fixtures: one real GustFS instance (3 daemons on loopback) for the whole run,
started with the `gust` binary of this build ($GUST, as scripts/env.sh sets it) and
stopped at the end; a fresh directory in it per test."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

import gustfs


def gust_bin():
    g = os.environ.get("GUST")
    if not g:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gustfs-target"))
        g = os.path.join(target, "release", "gust")
    if not os.access(g, os.X_OK):
        pytest.exit(f"{g}: no gust binary; build the workspace first (cargo build --release)", returncode=2)
    return g


class Instance:
    def __init__(self, daemons=3, extra=()):
        self.gust = gust_bin()
        self.rootdir = tempfile.mkdtemp(prefix="gust-py-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.hosts_file = os.path.join(self.rootdir, "gust.hosts")
        subprocess.run(
            [self.gust, "start", "--local", str(daemons), "--rootdir", self.rootdir, "--mountdir", "/gustfs", *extra],
            check=True,
            capture_output=True,
        )

    def stop(self):
        subprocess.run([self.gust, "stop", "--hosts-file", self.hosts_file], capture_output=True)
        shutil.rmtree(self.rootdir, ignore_errors=True)


@pytest.fixture(scope="session")
def instance():
    inst = Instance()
    os.environ["GUST_HOSTS_FILE"] = inst.hosts_file
    gustfs.connect(inst.hosts_file)
    yield inst
    inst.stop()


@pytest.fixture(scope="session")
def client(instance):
    return gustfs.client()


@pytest.fixture
def d(client, request):
    """A fresh, empty directory in GustFS for one test, removed after it."""
    name = "/" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    if client.exists(name):
        client.rmtree(name)
    client.mkdir(name)
    yield name
    if client.exists(name):
        client.rmtree(name)
