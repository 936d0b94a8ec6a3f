"""`gust stage in|out` against a real S3 store (SeaweedFS), checked with boto3."""

import io
import json
import os
import signal
import subprocess

import boto3.s3.transfer
import gustfs
import pytest

from s3env import KEY, SECRET, Instance, Proxy, wait_for
from s3env import follower as start_follower

MIB = 1 << 20


def put_tree(s3, bucket, prefix):
    """Objects as other tools leave them: nested keys, an empty directory marker, an
    empty object, a name with spaces, and a 20 MiB object in 8 MiB parts (boto3's
    multipart upload: an ETag ending in -3). Returns {relative path: bytes}."""
    want = {f"a/f{i}.txt": (f"line {i}\n" * (i * 37)).encode() for i in range(12)}
    want["a/b/deep name.csv"] = b"x,y\n1,2\n"
    want["zero"] = b""
    for rel, data in want.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/empty/", Body=b"")
    big = os.urandom(20 * MIB + 5)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)
    s3.upload_fileobj(io.BytesIO(big), bucket, f"{prefix}/big.bin", Config=cfg)
    want["big.bin"] = big
    return want


def summary(r):
    assert r.stdout, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("via", ["daemons", "client"])
def test_stage_in_copies_the_tree_resumes_and_verifies(gust, s3, bucket, d, via):
    want = put_tree(s3, bucket, "run")
    assert s3.head_object(Bucket=bucket, Key="run/big.bin")["ETag"].endswith('-3"')
    r = gust("stage", "in", f"s3://{bucket}/run", d + "/run", "--verify", "--json", "--via", via)
    assert r.returncode == 0, r.stderr
    s = summary(r)
    assert (s["files"], s["verified"], s["failures"], s["via"]) == (len(want), len(want), [], via), s
    assert s["bytes"] == sum(len(v) for v in want.values())
    for rel, data in want.items():
        assert gustfs.read_bytes(f"{d}/run/{rel}") == data, rel
    assert gustfs.isdir(d + "/run/empty") and gustfs.listdir(d + "/run/empty") == []
    # The files carry the objects' times: what makes a rerun skip them.
    listed = {o["Key"]: o for o in s3.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]}
    assert int(gustfs.stat(d + "/run/a/f3.txt").st_mtime) == int(listed["run/a/f3.txt"]["LastModified"].timestamp())
    r = gust("stage", "in", f"s3://{bucket}/run", d + "/run", "--json")
    s = summary(r)
    assert (s["files"], s["skipped"]) == (0, len(want)), s
    # A changed object is copied again, the others are not.
    s3.put_object(Bucket=bucket, Key="run/a/f1.txt", Body=b"changed\n")
    s = summary(gust("stage", "in", f"s3://{bucket}/run", d + "/run", "--json", "--verify", "--via", via))
    assert (s["files"], s["skipped"], s["verified"]) == (1, len(want) - 1, len(want)), s
    assert gustfs.read_bytes(d + "/run/a/f1.txt") == b"changed\n"
    # One object's URL stages that object as the destination file; filters apply to keys.
    assert gust("stage", "in", f"s3://{bucket}/run/big.bin", d + "/one.bin", "--via", via).returncode == 0
    assert gustfs.read_bytes(d + "/one.bin") == want["big.bin"]
    s = summary(gust("stage", "in", f"s3://{bucket}/run", d + "/csv", "--include", "*.csv", "--json"))
    assert s["files"] == 1 and gustfs.read_bytes(d + "/csv/a/b/deep name.csv") == b"x,y\n1,2\n"


def test_stage_out_writes_objects_others_read(gust, s3, bucket, d):
    files = {"r/one.txt": b"hello\n", "r/sub/two.bin": os.urandom(3 * MIB), "r/big.dat": os.urandom(17 * MIB + 1)}
    gustfs.makedirs(d + "/r/sub")
    for rel, data in files.items():
        gustfs.write_bytes(f"{d}/{rel}", data)
    gustfs.symlink("one.txt", d + "/r/link")
    r = gust("stage", "out", d + "/r", f"s3://{bucket}/results/r", "--verify", "--json")
    s = summary(r)
    # The symlink is named as not staged; the files are there, read back by boto3.
    assert [f["path"] for f in s["failures"]] == [d + "/r/link"], s
    assert "symlink" in s["failures"][0]["reason"]
    assert (s["files"], s["verified"]) == (3, 3), s
    for rel, data in files.items():
        assert s3.get_object(Bucket=bucket, Key=f"results/{rel}")["Body"].read() == data, rel
    # 17 MiB went up in parts (multipart ETag), 3 MiB in one PUT.
    assert s3.head_object(Bucket=bucket, Key="results/r/big.dat")["ETag"].endswith('-3"')
    assert "-" not in s3.head_object(Bucket=bucket, Key="results/r/sub/two.bin")["ETag"]
    # A rerun sends nothing; a file written after its object is sent again.
    s = summary(gust("stage", "out", d + "/r", f"s3://{bucket}/results/r", "--exclude", "link", "--json"))
    assert (s["files"], s["skipped"], s["failures"]) == (0, 3, []), s
    gustfs.write_bytes(d + "/r/one.txt", b"HELLO\n")
    gustfs.utime(d + "/r/one.txt", (4102444800, 4102444800))  # 2100: after any upload
    s = summary(gust("stage", "out", d + "/r", f"s3://{bucket}/results/r", "--exclude", "link", "--json"))
    assert (s["files"], s["skipped"]) == (1, 2), s
    assert s3.get_object(Bucket=bucket, Key="results/r/one.txt")["Body"].read() == b"HELLO\n"
    # And back in: a round trip through the store is byte for byte.
    s = summary(gust("stage", "in", f"s3://{bucket}/results/r", d + "/back", "--verify", "--json"))
    assert s["verified"] == 3 and gustfs.read_bytes(d + "/back/big.dat") == files["r/big.dat"]


def test_credentials_from_a_profile_in_the_aws_files(gust, s3, bucket, d, tmp_path, weed):
    s3.put_object(Bucket=bucket, Key="p/x", Body=b"via profile")
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(f"[job]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    (tmp_path / ".aws" / "config").write_text(f"[profile job]\nregion = us-east-1\nendpoint_url = {weed.endpoint}\n")
    unset = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_ENDPOINT_URL": None, "AWS_REGION": None}
    r = gust("stage", "in", f"s3://{bucket}/p/x", d + "/x", env=unset)
    assert "no S3 credentials" in r.stderr and r.returncode != 0
    r = gust("stage", "in", f"s3://{bucket}/p/x", d + "/x", env={**unset, "AWS_PROFILE": "job"})
    assert r.returncode == 0, r.stderr
    assert gustfs.read_bytes(d + "/x") == b"via profile"


def test_bad_input_is_a_clear_error_and_writes_nothing(gust, s3, bucket, d):
    s3.put_object(Bucket=bucket, Key="in/a", Body=b"a")
    cases = [
        ({"AWS_SECRET_ACCESS_KEY": "wrong"}, f"s3://{bucket}/in", "access denied"),
        ({"AWS_ACCESS_KEY_ID": "NOSUCHKEY"}, f"s3://{bucket}/in", "access denied"),
        ({}, "s3://no-such-bucket-here/in", "no such bucket"),
        ({}, f"s3://{bucket}/nothing", "no objects under it"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}, f"s3://{bucket}/in", "cannot reach the object store"),
        ({}, "gs://b/p", "s3:// object stores only"),
    ]
    for env, src, says in cases:
        r = gust("stage", "in", src, d + "/dst", env=env)
        assert r.returncode != 0 and says in r.stderr, (src, env, r.stderr)
        assert "wrong" not in r.stderr and "gust-test-secret" not in r.stderr, "a secret in the output"
        assert not gustfs.exists(d + "/dst"), (src, env)
    r = gust("stage", "out", d, "s3://no-such-bucket-here/x")
    assert r.returncode != 0 and "no such bucket" in r.stderr, r.stderr


@pytest.mark.parametrize("via,size", [("daemons", 4), ("daemons", 3 * MIB), ("client", 4)])
def test_objects_deleted_or_replaced_during_stage_in_are_named(gust, s3, bucket, d, weed, via, size):
    # Small objects are fetched whole by their metadata daemon, large ones in
    # ranges by the daemons holding the chunks, or all through the client.
    for i in range(6):
        s3.put_object(Bucket=bucket, Key=f"in/f{i}", Body=(b"v1 %d" % i) * size)
    proxy = Proxy(weed.ports["s3"])
    done = set()

    def meddle(method, path):
        # Between the listing and the copy: f2 is deleted, f4 replaced.
        if method == "GET" and path.startswith(f"/{bucket}/in/f2") and "f2" not in done:
            done.add("f2")
            s3.delete_object(Bucket=bucket, Key="in/f2")
        if method == "GET" and path.startswith(f"/{bucket}/in/f4") and "f4" not in done:
            done.add("f4")
            s3.put_object(Bucket=bucket, Key="in/f4", Body=b"v2 replaced")

    proxy.on_request = meddle
    try:
        r = gust("stage", "in", f"s3://{bucket}/in", d + "/in", "--json", "--via", via, endpoint=proxy.endpoint)
    finally:
        proxy.close()
    s = summary(r)
    failed = {f["path"]: f["reason"] for f in s["failures"]}
    assert set(failed) == {f"s3://{bucket}/in/f2", f"s3://{bucket}/in/f4"}, s
    assert "no such object" in failed[f"s3://{bucket}/in/f2"]
    assert "changed while being staged" in failed[f"s3://{bucket}/in/f4"]
    assert s["files"] == 4
    # Nothing of f2 or f4 looks complete: absent, or size 0 until a rerun.
    for f in ("f2", "f4"):
        assert not gustfs.exists(f"{d}/in/{f}") or gustfs.getsize(f"{d}/in/{f}") == 0, f
    # A rerun completes what is there now.
    s = summary(gust("stage", "in", f"s3://{bucket}/in", d + "/in", "--json", "--verify"))
    assert s["failures"] == [] and (s["files"], s["skipped"]) == (1, 4), s
    assert gustfs.read_bytes(d + "/in/f4") == b"v2 replaced"


@pytest.mark.parametrize("direction,via", [("in", "daemons"), ("in", "client"), ("out", "client")])
def test_a_store_that_goes_away_mid_transfer(gust, s3, bucket, d, weed, direction, via):
    n = 12
    data = {f"f{i:02}": os.urandom(2 * MIB + i) for i in range(n)}
    if direction == "in":
        for k, v in data.items():
            s3.put_object(Bucket=bucket, Key=f"t/{k}", Body=v)
        args = ["stage", "in", f"s3://{bucket}/t", d + "/t", "--json", "-j", "1", "--via", via]
    else:
        gustfs.mkdir(d + "/t")
        for k, v in data.items():
            gustfs.write_bytes(f"{d}/t/{k}", v)
        args = ["stage", "out", d + "/t", f"s3://{bucket}/t", "--json", "-j", "1"]
    proxy = Proxy(weed.ports["s3"])
    proxy.go_away_after(1 + n // 2)  # the listing, then half of the files
    try:
        r = gust(*args, endpoint=proxy.endpoint)
    finally:
        proxy.close()
    assert r.returncode != 0
    s = summary(r)
    assert s["failures"] and all("cannot reach the object store" in f["reason"] for f in s["failures"]), s
    assert s["files"] + len(s["failures"]) == n, s
    # Nothing half-written looks complete: the rerun copies what failed (a PUT whose
    # reply was cut may have landed whole: the rerun finds it complete) and all
    # of it checks out.
    s2 = summary(gust(*args, "--verify"))
    assert s2["failures"] == [] and s2["verified"] == n, s2
    assert s2["files"] + s2["skipped"] == n and s2["files"] <= len(s["failures"]), (s, s2)
    if direction == "in":
        assert s2["files"] == len(s["failures"]), (s, s2)
    for k, v in data.items():
        got = gustfs.read_bytes(f"{d}/t/{k}") if direction == "in" else s3.get_object(Bucket=bucket, Key=f"t/{k}")["Body"].read()
        assert got == v, k


def test_stage_out_follow_sends_closed_files_while_the_job_runs(gust, s3, bucket, d, instance, weed, tmp_path):
    """`gust stage out --follow DIR s3://…`: files closed after writing become
    objects while it runs (what cache mode's write-back runs), the rest at SIGINT."""
    gustfs.mkdir(d + "/job")
    gustfs.write_bytes(d + "/job/before", b"written before")
    follower = start_follower(instance, weed, tmp_path, d + "/job", f"s3://{bucket}/job")
    try:

        def has(key):
            def check():
                try:
                    s3.head_object(Bucket=bucket, Key=key)
                    return True
                except s3.exceptions.ClientError:
                    return False

            return check

        wait_for(has("job/before"), "the first pass to send job/before", timeout=60)
        big = os.urandom(9 * MIB)
        gustfs.write_bytes(d + "/job/during.bin", big)
        wait_for(has("job/during.bin"), "the follower to send a file closed while it runs", timeout=60)
        assert s3.get_object(Bucket=bucket, Key="job/during.bin")["Body"].read() == big
        gustfs.write_bytes(d + "/job/last", b"last")
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert s3.get_object(Bucket=bucket, Key="job/last")["Body"].read() == b"last", "the final pass sends what is left"
    assert json.loads(out)["failures"] == []


def test_stage_in_to_a_replicated_instance_survives_a_daemon(gust, s3, bucket, tmp_path):
    """Each copy's daemon fetches its own chunks from the store: with --replicas 2,
    every staged object reads back after one daemon is killed."""
    want = {f"r/f{i}": os.urandom(300_000 + i) if i % 2 else b"small %d" % i for i in range(8)}
    for k, v in want.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    inst = Instance(daemons=3, extra=("--replicas", "2"))
    try:
        r = gust("stage", "in", f"s3://{bucket}/r", "/r", "--verify", "--json", env={"GUST_HOSTS_FILE": inst.hosts_file})
        s = summary(r)
        assert (s["files"], s["verified"], s["via"]) == (8, 8, "daemons"), s
        pid = next(int(l.split()[3]) for l in open(inst.hosts_file) if l.split()[:2] == ["daemon", "1"])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "daemon 1 to be gone", timeout=30)
        env = {**os.environ, "GUST_HOSTS_FILE": inst.hosts_file}
        for k, v in want.items():
            got = subprocess.run([inst.gust, "cat", "/" + k], env=env, capture_output=True, timeout=120)
            assert got.returncode == 0 and got.stdout == v, (k, got.stderr)
    finally:
        inst.stop()


@pytest.mark.parametrize("via", ["daemons", "client"])
def test_object_metadata_is_the_files_extended_attributes(gust, s3, bucket, d, via):
    """x-amz-meta-NAME in, user.s3.meta.NAME on the file; changed with setxattr,
    and out again as the object's metadata."""
    s3.put_object(Bucket=bucket, Key="m/small.txt", Body=b"s\n", Metadata={"owner": "ana", "run-id": "7"})
    big = os.urandom(9 * MIB)
    s3.put_object(Bucket=bucket, Key="m/big.bin", Body=big, Metadata={"sha": "abc"})
    s3.put_object(Bucket=bucket, Key="m/plain", Body=b"p")
    r = gust("stage", "in", f"s3://{bucket}/m", d + "/m", "--json", "--via", via)
    assert summary(r)["failures"] == [], r.stderr
    assert gustfs.getxattr(d + "/m/small.txt", "user.s3.meta.owner") == b"ana"
    assert gustfs.getxattr(d + "/m/small.txt", "user.s3.meta.run-id") == b"7"
    assert gustfs.listxattr(d + "/m/big.bin") == ["user.s3.meta.sha"]
    assert gustfs.listxattr(d + "/m/plain") == []
    assert gustfs.read_bytes(d + "/m/big.bin") == big
    # Changed through the file system, written back by a stage-out (a single PUT
    # and a multipart upload); attributes outside user.s3.meta. stay in GustFS.
    gustfs.setxattr(d + "/m/small.txt", "user.s3.meta.owner", b"bo")
    gustfs.setxattr(d + "/m/big.bin", "user.s3.meta.checked", b"yes")
    gustfs.setxattr(d + "/m/plain", "user.local", b"x")
    r = gust("stage", "out", d + "/m", f"s3://{bucket}/back", "--json")
    assert summary(r)["failures"] == [], r.stderr
    assert s3.head_object(Bucket=bucket, Key="back/small.txt")["Metadata"] == {"owner": "bo", "run-id": "7"}
    assert s3.head_object(Bucket=bucket, Key="back/big.bin")["Metadata"] == {"sha": "abc", "checked": "yes"}
    assert s3.head_object(Bucket=bucket, Key="back/plain")["Metadata"] == {}
    # --no-metadata: no HEAD requests, no attributes.
    r = gust("stage", "in", f"s3://{bucket}/m", d + "/bare", "--json", "--no-metadata", "--via", via)
    assert summary(r)["failures"] == [], r.stderr
    assert gustfs.listxattr(d + "/bare/small.txt") == []
