"""Fixtures for the object store tests (helpers in s3env.py): one SeaweedFS and one
GustFS instance of 2 daemons for the run, a fresh bucket and GustFS directory per
test, boto3 for the store's side and `gust` with the store's environment."""

import os
import re
import subprocess
import uuid

import pytest

import gustfs
from s3env import KEY, REGION, SECRET, Instance, Weed, boto3_client


@pytest.fixture(scope="session")
def weed():
    w = Weed()
    yield w
    w.stop()


@pytest.fixture(scope="session")
def instance():
    inst = Instance(daemons=2)
    gustfs.connect(inst.hosts_file)
    yield inst
    inst.stop()


@pytest.fixture
def s3(weed):
    return boto3_client(weed.endpoint)


@pytest.fixture
def bucket(s3, request):
    name = "b-" + re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:6]
    s3.create_bucket(Bucket=name)
    # SeaweedFS gives a new bucket its volumes on the first write (InternalError
    # until then): written once here, so the test starts with a writable bucket.
    s3.put_object(Bucket=name, Key=".ready", Body=b"")
    s3.delete_object(Bucket=name, Key=".ready")
    return name


@pytest.fixture
def d(instance, request):
    """A fresh directory in GustFS for one test."""
    name = "/" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    if gustfs.exists(name):
        gustfs.rmtree(name)
    gustfs.mkdir(name)
    yield name
    if gustfs.exists(name):
        gustfs.rmtree(name)


@pytest.fixture
def gust(instance, weed, tmp_path):
    """Runs `gust ARGS` with the store's endpoint and credentials in its environment
    (never in argv) and HOME pointing at an empty directory (no ~/.aws of the user's)."""

    def run(*args, endpoint=None, env=None):
        e = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AWS_") and k not in ("HOME",)
        }
        e.update(
            HOME=str(tmp_path),
            GUST_HOSTS_FILE=instance.hosts_file,
            AWS_ENDPOINT_URL=endpoint or weed.endpoint,
            AWS_ACCESS_KEY_ID=KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_REGION=REGION,
        )
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return subprocess.run([instance.gust, *args], env=e, capture_output=True, text=True, timeout=600)

    return run


@pytest.fixture
def store_env(weed, monkeypatch):
    """This test process opens views' entries through gustfs: its fetches take the
    store's endpoint and credentials from the environment, as any program's do."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", weed.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", REGION)


@pytest.fixture
def view(gust, request):
    """Adds views by name (removed at the end) and returns their directory."""
    made = []

    def add(name, *args, ok=True):
        r = gust("view", "add", name, *args)
        if ok:
            assert r.returncode == 0, r.stderr
            made.append(name)
            return "/.views/" + name
        return r

    yield add
    for name in made:
        gust("view", "rm", name)
