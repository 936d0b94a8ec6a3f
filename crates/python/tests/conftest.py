"""Fixtures: one real GustFS instance (3 daemons on loopback) for the whole run,
started with the `gust` binary of this build ($GUST, as scripts/env.sh sets it) and
stopped at the end; a fresh directory in it per test."""

import os
import re

import pytest

import gustfs
import gustfs.testing


def gust_bin():
    try:
        return gustfs.testing.gust_binary()
    except FileNotFoundError as e:
        pytest.exit(str(e), returncode=2)


class Instance(gustfs.testing.LocalInstance):
    def __init__(self, daemons=3, extra=()):
        gust_bin()
        super().__init__(daemons, extra, prefix="gust-py-")


@pytest.fixture(scope="session")
def instance():
    inst = Instance()
    os.environ["GUST_HOSTS_FILE"] = inst.hosts_file
    # The daemons run the node cache's holder, but this process does not tell it
    # what it reads: tests count the daemons' requests, and the holder's lookups
    # would be among them (tests/tests/node_cache.rs tests the node cache).
    os.environ["GUST_NODE_CACHE"] = "0"
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
