"""The data-loader benchmark (bench/loader.py) on a small data set: every way in
reads every file of every epoch intact (crc32 checked), through forked workers."""

import json
import os
import subprocess
import sys

import pytest

LOADER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "loader.py")


def run(args, instance, prefix=()):
    env = dict(os.environ, GUST_HOSTS_FILE=instance.hosts_file)
    out = subprocess.run([*prefix, sys.executable, LOADER, *args], env=env, check=True, capture_output=True, text=True)
    return out.stdout


@pytest.fixture(scope="module")
def dataset(instance, tmp_path_factory):
    local = tmp_path_factory.mktemp("loader-local")
    run(["make", "--files", "300", "--local", str(local), "--gust", "/loader-test"], instance)
    manifest = json.load(open(local / "manifest.json"))
    assert len(manifest["files"]) == 300
    sizes = [e[1] for e in manifest["files"]]
    assert min(sizes) < 100 << 10 < max(sizes)  # log-normal around 100 KiB
    return local, manifest


@pytest.mark.parametrize("way", ["module", "module-read_many", "local", "preload"])
def test_loader_reads_everything_intact(instance, dataset, way):
    local, manifest = dataset
    common = ["--manifest-dir", str(local), "--workers", "2", "--epochs", "2", "--verify"]
    prefix = ()
    if way == "module":
        target = "gust:/loader-test"
    elif way == "module-read_many":
        # Batches of 7: the last batch of each worker's share is short.
        target = "gust:/loader-test"
        common += ["--api", "read_many", "--batch", "7"]
    elif way == "local":
        target = f"posix:{local}"
    else:
        preload = os.path.join(os.path.dirname(instance.gust), "libgust_preload.so")
        if not os.path.exists(preload):
            pytest.skip(f"{preload} not built")
        target = "posix:/gustfs/loader-test"
        prefix = (instance.gust, "run", "--hosts-file", instance.hosts_file, "--")
    result = json.loads(run(["read", "--target", target, *common], instance, prefix))
    assert [e["files"] for e in result["epochs"]] == [300, 300]
    assert all(e["bytes"] == manifest["bytes"] for e in result["epochs"])
    assert result["files_per_s"] > 0
