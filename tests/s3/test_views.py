"""Views (`gust view`): an object store prefix, filtered by find's predicates, under
/.views/NAME; entries fetched on first open; kept current by SeaweedFS's filer
events or by resyncs. The store is a real SeaweedFS, written with boto3."""

import hashlib
import io
import json
import os
import subprocess

import boto3.s3.transfer
import gustfs
import pytest

from s3env import Instance, boto3_client, entries, events_of, shell, status, wait_for

MIB = 1 << 20

# This process opens entries through gustfs: the store's variables are its own.
pytestmark = pytest.mark.usefixtures("store_env")


def test_a_view_shows_matching_objects_and_fetches_them_on_first_open(gust, s3, bucket, view, weed):
    want = {f"run/s{i}/r{j}.fastq": os.urandom(1000 * (i + 1) + j) for i in range(3) for j in range(4)}
    for k, v in want.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v, Metadata={"sample": k.split("/")[1]})
    s3.put_object(Bucket=bucket, Key="run/s0/notes.txt", Body=b"not a read")
    big = os.urandom(20 * MIB + 3)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)
    s3.upload_fileobj(io.BytesIO(big), bucket, "run/s9/big.fastq", Config=cfg)
    want["run/s9/big.fastq"] = big
    s3.put_object(Bucket=bucket, Key="other/x.fastq", Body=b"outside the prefix")

    v = view("reads", f"s3://{bucket}/run", "-name", "*.fastq", "--events", events_of(weed))
    assert entries(v) == {k[len("run/") :]: len(d) for k, d in want.items()}
    st = status(gust, "reads")
    assert (st["objects"], st["skipped"], st["running"]) == (len(want), 0, True), st
    # Listed and stat'ed from GustFS's records alone: nothing fetched yet (a
    # fetched entry carries its object's ETag; find does not fetch).
    fetched = lambda: gust("find", "/gustfs" + v, "-xattr", "user.s3.etag").stdout.split()
    assert fetched() == []
    p = v + "/s1/r2.fastq"
    assert gustfs.read_bytes(p) == want["run/s1/r2.fastq"]
    assert fetched() == ["/gustfs" + p]
    head = s3.head_object(Bucket=bucket, Key="run/s1/r2.fastq")
    assert gustfs.getxattr(p, "user.s3.etag") == head["ETag"].strip('"').encode()
    assert gustfs.getxattr(p, "user.s3.meta.sample") == b"s1"
    assert int(gustfs.stat(p).st_mtime) == int(head["LastModified"].timestamp())
    # The multipart object: fetched by the daemons in chunks.
    assert gustfs.read_bytes(v + "/s9/big.fastq") == big
    # An unmodified program through the preload library.
    r = gust("run", "--", "sha256sum", "/gustfs" + v + "/s2/r0.fastq")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == hashlib.sha256(want["run/s2/r0.fastq"]).hexdigest()
    # Entries are the store's picture: read only.
    assert gustfs.stat(v + "/s0/r0.fastq").st_mode & 0o777 == 0o444


def test_events_keep_a_view_current(gust, s3, bucket, view, weed):
    s3.put_object(Bucket=bucket, Key="in/a.dat", Body=b"a" * 10)
    s3.put_object(Bucket=bucket, Key="in/b.dat", Body=b"b" * 20)
    v = view("live", f"s3://{bucket}/in", "-size", "+15c", "--events", events_of(weed), "--resync", "3600")
    assert entries(v) == {"b.dat": 20}
    gustfs.read_bytes(v + "/b.dat")  # fetched: an update must still replace it
    # A new matching object appears, a small one does not.
    s3.put_object(Bucket=bucket, Key="in/new/c.dat", Body=b"c" * 100)
    s3.put_object(Bucket=bucket, Key="in/new/tiny.dat", Body=b"t")
    wait_for(lambda: gustfs.exists(v + "/new/c.dat"), "the new object in the view", timeout=30)
    assert gustfs.read_bytes(v + "/new/c.dat") == b"c" * 100
    assert not gustfs.exists(v + "/new/tiny.dat")
    # An overwritten object: its entry is the new version.
    s3.put_object(Bucket=bucket, Key="in/b.dat", Body=b"B" * 40)
    wait_for(lambda: gustfs.stat(v + "/b.dat").st_size == 40, "the new version in the view", timeout=30)
    assert gustfs.read_bytes(v + "/b.dat") == b"B" * 40
    # A deleted object goes, and so does the directory it leaves empty.
    s3.delete_object(Bucket=bucket, Key="in/new/c.dat")
    wait_for(lambda: not gustfs.exists(v + "/new"), "the deleted object gone from the view", timeout=30)
    # An object that stops matching goes too.
    s3.put_object(Bucket=bucket, Key="in/b.dat", Body=b"b")
    wait_for(lambda: not gustfs.exists(v + "/b.dat"), "an object that no longer matches", timeout=30)
    # The status file is rewritten four times a second.
    counted = lambda: (lambda st: st["events"] >= 4 and st["objects"] == 0)(status(gust, "live"))
    wait_for(counted, "the status to count the events", timeout=30)
    st = status(gust, "live")
    assert st["resyncs"] == 1 and st["objects"] == 0 and st["last_event_ns"] > 0, json.dumps(st)
    assert st["state"] == "following events" and st["error"] is None, json.dumps(st)
    assert 0 < st["lag_p50_ms"] <= st["lag_p99_ms"] < 10_000, json.dumps(st)


def test_without_events_resyncs_keep_a_view_current(gust, s3, bucket, view):
    s3.put_object(Bucket=bucket, Key="x/one", Body=b"1")
    v = view("polled", f"s3://{bucket}/x", "--resync", "1")
    assert entries(v) == {"one": 1}
    s3.put_object(Bucket=bucket, Key="x/two", Body=b"22")
    s3.delete_object(Bucket=bucket, Key="x/one")
    wait_for(lambda: entries(v) == {"two": 2}, "the resync", timeout=30)
    wait_for(lambda: status(gust, "polled")["resyncs"] >= 2, "the status to count the resyncs", timeout=30)
    assert status(gust, "polled")["state"] in ("polling", "resyncing")


def test_an_object_deleted_behind_a_view_s_back_is_not_found(gust, s3, bucket, view):
    s3.put_object(Bucket=bucket, Key="g/gone", Body=b"soon gone")
    v = view("stale", f"s3://{bucket}/g", "--resync", "3600")
    s3.delete_object(Bucket=bucket, Key="g/gone")
    with pytest.raises(FileNotFoundError):
        gustfs.read_bytes(v + "/gone")


def test_views_are_listed_and_removed_and_the_objects_stay(gust, s3, bucket, view):
    s3.put_object(Bucket=bucket, Key="k/a", Body=b"a")
    view("listed", f"s3://{bucket}/k", "-name", "a")
    r = gust("view", "ls", "--json")
    assert r.returncode == 0, r.stderr
    mine = [json.loads(l) for l in r.stdout.splitlines() if json.loads(l)["name"] == "listed"]
    assert mine and mine[0]["source"] == f"s3://{bucket}/k" and mine[0]["expression"] == ["-name", "a"], mine
    assert mine[0]["objects"] == 1 and mine[0]["running"], mine
    r = gust("view", "rm", "listed")
    assert r.returncode == 0, r.stderr
    assert not gustfs.exists("/.views/listed")
    assert s3.get_object(Bucket=bucket, Key="k/a")["Body"].read() == b"a"
    r = gust("view", "status", "listed")
    assert r.returncode != 0 and "no view" in r.stderr


def test_bad_definitions_are_refused_clearly_and_leave_nothing(gust, s3, bucket, view, weed):
    r = view("nobucket", "s3://no-such-bucket-gust/p", ok=False)
    assert r.returncode != 0 and "no such bucket" in r.stderr, r.stderr
    assert not gustfs.exists("/.views/nobucket")
    r = gust("view", "add", "badkey", f"s3://{bucket}/p", env={"AWS_SECRET_ACCESS_KEY": "wrong"})
    assert r.returncode != 0 and "secret key does not match" in r.stderr, r.stderr
    assert not gustfs.exists("/.views/badkey")
    r = view("gcs", "gs://b/p", ok=False)
    assert r.returncode != 0 and "gs://" in r.stderr, r.stderr
    r = view(".hidden", f"s3://{bucket}/p", ok=False)
    assert r.returncode != 0 and "not a view name" in r.stderr, r.stderr
    r = view("ev", f"s3://{bucket}/p", "--events", "kafka://x:1", ok=False)
    assert r.returncode != 0 and "not an event source" in r.stderr, r.stderr
    r = view("pred", f"s3://{bucket}/p", "-exec", "rm", ok=False)
    assert r.returncode != 0 and "unknown predicate" in r.stderr, r.stderr
    view("twice", f"s3://{bucket}/p")
    r = view("twice", f"s3://{bucket}/p", ok=False)
    assert r.returncode != 0 and "exists" in r.stderr, r.stderr


def test_a_stage_out_of_a_view_copies_its_objects_and_one_of_the_root_leaves_views_out(gust, s3, bucket, view, d, tmp_path):
    objs = {f"o/{i}.bin": os.urandom(300 * 1024 * (i % 2) + 17 * i) for i in range(6)}
    for k, v in objs.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    v = view("out", f"s3://{bucket}/o", "--resync", "3600")
    gustfs.read_bytes(v + "/1.bin")  # one fetched, the others not yet
    r = gust("stage", "out", "/gustfs" + v, str(tmp_path / "copy"), "--json")
    assert r.returncode == 0, r.stderr
    for k, data in objs.items():
        assert (tmp_path / "copy" / k[2:]).read_bytes() == data, k
    gustfs.write_bytes(d + "/result.txt", b"the job's own data")
    r = gust("stage", "out", "/gustfs/", str(tmp_path / "all"), "--json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "all" / d[1:] / "result.txt").read_bytes() == b"the job's own data"
    assert not (tmp_path / "all" / ".views").exists()


def test_cache_mode_of_a_store_fetches_on_first_open_and_writes_back_as_objects(gust, s3, bucket):
    s3.put_object(Bucket=bucket, Key="c/in/a.txt", Body=b"from the store\n", Metadata={"owner": "lab"})
    s3.put_object(Bucket=bucket, Key="c/in/b.txt", Body=b"left alone\n")
    ci = Instance(daemons=1, extra=["--cache-of", f"s3://{bucket}/c"])  # the AWS variables are this process's
    try:
        on = {"GUST_HOSTS_FILE": ci.hosts_file}
        sh = shell(gust, ci.hosts_file)
        assert sh("ls /gustfs/in").split() == ["a.txt", "b.txt"]
        assert sh("cat /gustfs/in/a.txt") == "from the store\n"
        before = s3.head_object(Bucket=bucket, Key="c/in/b.txt")["LastModified"]
        sh("mkdir -p /gustfs/out && echo result > /gustfs/out/r.txt && echo more >> /gustfs/in/a.txt")
        r = gust("flush", env=on)
        assert r.returncode == 0, r.stderr
        assert s3.get_object(Bucket=bucket, Key="c/out/r.txt")["Body"].read() == b"result\n"
        assert s3.get_object(Bucket=bucket, Key="c/in/a.txt")["Body"].read() == b"from the store\nmore\n"
        assert s3.head_object(Bucket=bucket, Key="c/in/a.txt")["Metadata"] == {"owner": "lab"}
        # Neither the unread object nor a fetched one unchanged is sent back.
        assert s3.head_object(Bucket=bucket, Key="c/in/b.txt")["LastModified"] == before
        sh("echo last > /gustfs/out/last.txt")
    finally:
        ci.stop()  # its final write-back pass
    assert s3.get_object(Bucket=bucket, Key="c/out/last.txt")["Body"].read() == b"last\n"


def test_a_view_of_a_gustfs_directory_links_its_files_and_follows_its_events(gust, d, view):
    src = d + "/src"
    gustfs.makedirs(src + "/sub")
    gustfs.write_bytes(src + "/a.h5", b"a" * 100)
    gustfs.write_bytes(src + "/b.txt", b"not hdf5")
    gustfs.write_bytes(src + "/sub/c.h5", b"c" * 10)
    v = view("h5", "/gustfs" + src, "-name", "*.h5")
    assert entries(v) == {"a.h5": 100, "sub/c.h5": 10}
    # A link is the file itself: a change through the source shows at once.
    with gustfs.open(src + "/a.h5", "ab") as f:
        f.write(b"more")
    assert gustfs.read_bytes(v + "/a.h5") == b"a" * 100 + b"more"
    gustfs.write_bytes(src + "/new.h5", b"n")
    wait_for(lambda: gustfs.exists(v + "/new.h5"), "a new file in the view", timeout=30)
    gustfs.remove(src + "/a.h5")
    wait_for(lambda: not gustfs.exists(v + "/a.h5"), "a removed file gone from the view", timeout=30)
    gustfs.rename(src + "/sub/c.h5", src + "/sub/d.h5")
    wait_for(lambda: entries(v) == {"new.h5": 1, "sub/d.h5": 10}, "a renamed file", timeout=30)
    gustfs.rename(src + "/sub", src + "/sub2")
    wait_for(lambda: entries(v) == {"new.h5": 1, "sub2/d.h5": 10}, "a renamed directory", timeout=30)
    counted = lambda: (lambda st: st["events"] >= 3 and st["objects"] == 2 and st["resyncs"] >= 2)(status(gust, "h5"))
    wait_for(counted, "the status to count the events and the resync", timeout=30)
    # A view cannot hold the views.
    r = view("loop", "/gustfs/", ok=False)
    assert r.returncode != 0 and "cannot hold the views" in r.stderr, r.stderr
    r = view("nodir", "/gustfs" + src + "/new.h5", ok=False)
    assert r.returncode != 0 and "not a directory" in r.stderr, r.stderr


def test_a_view_through_a_fuse_mount_lists_and_fetches(instance, s3, bucket, view, tmp_path):
    data = {f"f/{i}.bin": os.urandom(4096 * i + 3) for i in range(1, 5)}
    for k, b in data.items():
        s3.put_object(Bucket=bucket, Key=k, Body=b)
    view("fused", f"s3://{bucket}/f")
    mp = tmp_path / "mnt"
    mp.mkdir()
    env = dict(os.environ, GUST_HOSTS_FILE=instance.hosts_file)  # with the store's variables
    m = subprocess.Popen([instance.gust, "mount", str(mp)], env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: os.path.ismount(mp), "the FUSE mount", timeout=60)
        ls = subprocess.run(["ls", "-ln", str(mp / ".views" / "fused")], capture_output=True, text=True, check=True)
        sizes = {line.split()[-1]: int(line.split()[4]) for line in ls.stdout.splitlines()[1:]}
        assert sizes == {k[2:]: len(b) for k, b in data.items()}
        assert all(line.startswith("-r--r--r--") for line in ls.stdout.splitlines()[1:]), ls.stdout
        for k, b in data.items():
            f = mp / ".views" / "fused" / k[2:]
            ino = os.stat(f).st_ino
            assert f.read_bytes() == b, k
            assert os.stat(f).st_ino == ino, "a fetch keeps the inode number"
            assert os.stat(f).st_size == len(b)
    finally:
        subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True)
        m.wait(timeout=60)


def test_a_view_survives_its_store_going_away_and_coming_back(gust, s3, bucket, view, weed):
    s3.put_object(Bucket=bucket, Key="w/one", Body=b"1")
    v = view("weather", f"s3://{bucket}/w", "--events", events_of(weed), "--resync", "3600")
    weed.kill()
    # The maintainer says what happened, naming the filer; the view stays as it was.
    filer = f"127.0.0.1:{weed.ports['filer'] + 10000}"
    wait_for(lambda: filer in (status(gust, "weather")["events_error"] or ""), "the lost event stream", timeout=60)
    wait_for(lambda: status(gust, "weather")["error"] is not None, "a failed resync", timeout=60)
    assert entries(v) == {"one": 1}
    weed.start()
    s3 = boto3_client(weed.endpoint)  # the old client's connections went with the store
    s3.put_object(Bucket=bucket, Key="w/two", Body=b"22")
    # Reconnected and resynced: the object written meanwhile is there.
    wait_for(lambda: entries(v) == {"one": 1, "two": 2}, "the view after the store came back", timeout=120)
    wait_for(lambda: status(gust, "weather")["error"] is None, "a clean resync", timeout=60)
    wait_for(lambda: status(gust, "weather")["events_error"] is None, "events again", timeout=60)


def test_views_are_maintained_again_after_a_restart(gust, s3, bucket):
    """A view is the instance's data: `gust stop --keep` ends its maintainer, `gust
    start --restart` starts it again, and its resync catches up with the store."""
    s3.put_object(Bucket=bucket, Key="r/one", Body=b"1")
    ri = Instance(daemons=1)
    try:
        on = {"GUST_HOSTS_FILE": ri.hosts_file}
        r = gust("view", "add", "kept", f"s3://{bucket}/r", "--resync", "3600", env=on)
        assert r.returncode == 0, r.stderr
        r = gust("stop", "--keep", env=on)
        assert r.returncode == 0, r.stderr
        s3.put_object(Bucket=bucket, Key="r/two", Body=b"22")
        r = gust("start", "--restart", "--rootdir", ri.rootdir, env=on)
        assert r.returncode == 0, r.stderr
        assert "views maintained again: kept" in r.stderr, r.stderr

        def listed():
            r = gust("find", "/gustfs/.views/kept", "-type", "f", env=on)
            return sorted(r.stdout.split()) if r.returncode == 0 else None

        want = ["/gustfs/.views/kept/one", "/gustfs/.views/kept/two"]
        wait_for(lambda: listed() == want, "the restarted view to catch up", timeout=60)
        r = gust("view", "ls", "--json", env=on)
        assert json.loads(r.stdout.splitlines()[0])["running"] is True, r.stdout
    finally:
        ri.stop()
