"""Object properties beside the bytes: tags as `user.s3.tag.*` attributes (in and
out), properties set through the file system written back alone, views laid out by
a property (`--layout`) and filtered by one (`-xattr`). Real SeaweedFS, boto3,
setfattr through the preload library."""

import json
import os
import signal
import time

import gustfs
import pytest

from s3env import Instance, entries, events_of, shell, status, wait_for
from s3env import follower as start_follower

# This process opens entries through gustfs: the store's variables are its own.
pytestmark = pytest.mark.usefixtures("store_env")


def tags(s3, bucket, key):
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}


def summary(r):
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("via", ["daemons", "client"])
def test_tags_are_attributes_on_the_way_in_and_tags_again_on_the_way_out(gust, s3, bucket, d, via):
    s3.put_object(Bucket=bucket, Key="t/a.txt", Body=b"a", Tagging="project=ocean&stage=raw data")
    big = os.urandom(9 << 20)
    s3.put_object(Bucket=bucket, Key="t/big.bin", Body=big, Tagging="project=ice", Metadata={"owner": "ana"})
    s3.put_object(Bucket=bucket, Key="t/plain", Body=b"p")
    r = gust("stage", "in", f"s3://{bucket}/t", d + "/t", "--json", "--via", via)
    assert summary(r)["failures"] == [], r.stderr
    assert gustfs.getxattr(d + "/t/a.txt", "user.s3.tag.project") == b"ocean"
    assert gustfs.getxattr(d + "/t/a.txt", "user.s3.tag.stage") == b"raw data"
    assert sorted(gustfs.listxattr(d + "/t/big.bin")) == ["user.s3.meta.owner", "user.s3.tag.project"]
    assert gustfs.listxattr(d + "/t/plain") == []
    # Set through the file system, out as tags (a PUT and a multipart upload).
    gustfs.setxattr(d + "/t/plain", "user.s3.tag.checked", b"yes")
    gustfs.setxattr(d + "/t/big.bin", "user.s3.tag.stage", b"cooked")
    r = gust("stage", "out", d + "/t", f"s3://{bucket}/back", "--json")
    assert summary(r)["failures"] == [], r.stderr
    assert tags(s3, bucket, "back/a.txt") == {"project": "ocean", "stage": "raw data"}
    assert tags(s3, bucket, "back/big.bin") == {"project": "ice", "stage": "cooked"}
    assert tags(s3, bucket, "back/plain") == {"checked": "yes"}
    assert s3.head_object(Bucket=bucket, Key="back/big.bin")["Metadata"] == {"owner": "ana"}


def test_properties_set_on_a_written_back_file_follow_it_alone(gust, s3, bucket, weed, tmp_path):
    """Cache mode of a store: setfattr on a file (through an unmodified program)
    changes its object's metadata and tags at the next flush, without sending its
    bytes again; removing an attribute removes the property."""
    s3.put_object(Bucket=bucket, Key="p/a.txt", Body=b"the data\n", Metadata={"owner": "ana"}, Tagging="stage=raw")
    s3.put_object(Bucket=bucket, Key="p/b.txt", Body=b"untouched\n")
    ci = Instance(daemons=1, extra=["--cache-of", f"s3://{bucket}/p"])
    try:
        on = {"GUST_HOSTS_FILE": ci.hosts_file}
        sh = shell(gust, ci.hosts_file)
        assert sh("getfattr -n user.s3.tag.stage --only-values /gustfs/a.txt") == "raw"
        etag = s3.head_object(Bucket=bucket, Key="p/a.txt")["ETag"]
        before_b = s3.head_object(Bucket=bucket, Key="p/b.txt")["LastModified"]
        sh(
            "setfattr -n user.s3.meta.owner -v bo /gustfs/a.txt && "
            "setfattr -n user.s3.meta.checked -v yes /gustfs/a.txt && "
            "setfattr -n user.s3.tag.stage -v cooked /gustfs/a.txt && "
            "setfattr -n user.s3.tag.project -v ocean /gustfs/a.txt"
        )
        r = gust("flush", env=on)
        assert r.returncode == 0, r.stderr
        head = s3.head_object(Bucket=bucket, Key="p/a.txt")
        assert head["Metadata"] == {"owner": "bo", "checked": "yes"}
        assert tags(s3, bucket, "p/a.txt") == {"stage": "cooked", "project": "ocean"}
        assert head["ETag"] == etag, "the bytes were not sent again"
        assert s3.get_object(Bucket=bucket, Key="p/a.txt")["Body"].read() == b"the data\n"
        assert s3.head_object(Bucket=bucket, Key="p/b.txt")["LastModified"] == before_b
        # Removed: gone from the object too (at the final pass of `gust stop`).
        sh("setfattr -x user.s3.tag.project /gustfs/a.txt && setfattr -x user.s3.meta.checked /gustfs/a.txt")
    finally:
        ci.stop()
    assert tags(s3, bucket, "p/a.txt") == {"stage": "cooked"}
    assert s3.head_object(Bucket=bucket, Key="p/a.txt")["Metadata"] == {"owner": "bo"}


def test_a_follower_writes_back_properties_of_files_already_out(gust, s3, bucket, d, instance, weed, tmp_path):
    """`gust stage out --follow`: an attribute set on a file the first pass sent
    reaches its object while the follower runs."""
    gustfs.mkdir(d + "/job")
    gustfs.write_bytes(d + "/job/r.txt", b"result")
    follower = start_follower(instance, weed, tmp_path, d + "/job", f"s3://{bucket}/job")
    try:

        def head():
            try:
                return s3.head_object(Bucket=bucket, Key="job/r.txt")
            except s3.exceptions.ClientError:
                return None

        wait_for(lambda: head() is not None, "the first pass", timeout=60)
        etag = head()["ETag"]
        gustfs.setxattr(d + "/job/r.txt", "user.s3.tag.state", b"final")
        wait_for(lambda: tags(s3, bucket, "job/r.txt") == {"state": "final"}, "the tag on the object", timeout=60)
        gustfs.setxattr(d + "/job/r.txt", "user.s3.meta.quality", b"good")
        wait_for(lambda: head()["Metadata"] == {"quality": "good"}, "the metadata on the object", timeout=60)
        assert head()["ETag"] == etag
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    s = json.loads(out)
    assert s["failures"] == [] and s["properties"] >= 2, s


def test_a_view_laid_out_by_properties_and_filtered_by_one(gust, s3, bucket, view, weed):
    put = lambda key, project, kind: s3.put_object(
        Bucket=bucket, Key=key, Body=key.encode(), Metadata={"kind": kind}, Tagging=f"project={project}"
    )
    put("l/run1/a.h5", "ocean", "raw")
    put("l/run1/b.h5", "ice", "raw")
    put("l/run2/c.h5", "ocean", "cooked")
    s3.put_object(Bucket=bucket, Key="l/run2/untagged.h5", Body=b"u", Metadata={"kind": "raw"})
    year = time.strftime("%Y", time.gmtime())
    v = view(
        "byproject", f"s3://{bucket}/l", "-xattr", "user.s3.meta.kind=raw",
        "--layout", "user.s3.tag.project", "--layout", "year", "--events", events_of(weed), "--resync", "3600",
    )  # fmt: skip
    want = {f"ocean/{year}/run1/a.h5": 11, f"ice/{year}/run1/b.h5": 11, f"_none/{year}/run2/untagged.h5": 1}
    assert entries(v) == want
    # An entry shows its object's properties before it is fetched.
    assert gustfs.getxattr(f"{v}/ocean/{year}/run1/a.h5", "user.s3.tag.project") == b"ocean"
    assert gustfs.read_bytes(f"{v}/ice/{year}/run1/b.h5") == b"l/run1/b.h5"
    # Events: a retag moves the entry, a new object lands under its value, one
    # whose metadata stops matching leaves.
    s3.put_object_tagging(Bucket=bucket, Key="l/run1/a.h5", Tagging={"TagSet": [{"Key": "project", "Value": "ice"}]})
    put("l/run3/d.h5", "desert", "raw")
    s3.copy_object(
        Bucket=bucket, Key="l/run1/b.h5", CopySource={"Bucket": bucket, "Key": "l/run1/b.h5"},
        Metadata={"kind": "cooked"}, MetadataDirective="REPLACE",
    )  # fmt: skip
    want = {f"ice/{year}/run1/a.h5": 11, f"desert/{year}/run3/d.h5": 11, f"_none/{year}/run2/untagged.h5": 1}
    wait_for(lambda: entries(v) == want, "the view after the events", timeout=60)
    assert status(gust, "byproject")["objects"] == 3
    # The same view by resyncs alone, a second one: the same picture.
    w = view("byproject2", f"s3://{bucket}/l", "-xattr", "user.s3.meta.kind=raw",
             "--layout", "user.s3.tag.project", "--layout", "year")  # fmt: skip
    assert entries(w) == want
    r = gust("view", "ls", "--json")
    defs = {j["name"]: j for j in map(json.loads, r.stdout.splitlines())}
    assert defs["byproject2"]["layout"] == ["user.s3.tag.project", "year"]
    # Bad levels are refused, naming what is possible.
    r = view("bad", f"s3://{bucket}/l", "--layout", "size", ok=False)
    assert r.returncode != 0 and "not a level" in r.stderr, r.stderr


def test_a_view_of_a_gustfs_directory_by_an_attribute_moves_entries_when_it_changes(gust, d, view):
    src = d + "/src"
    gustfs.makedirs(src)
    for name, owner in (("a.dat", b"ana"), ("b.dat", b"bo"), ("c.dat", None)):
        gustfs.write_bytes(f"{src}/{name}", name.encode())
        if owner:
            gustfs.setxattr(f"{src}/{name}", "user.owner", owner)
    v = view("byowner", "/gustfs" + src, "--layout", "user.owner", "--layout", "extension")
    assert entries(v) == {"ana/dat/a.dat": 5, "bo/dat/b.dat": 5, "_none/dat/c.dat": 5}
    gustfs.setxattr(src + "/c.dat", "user.owner", b"ana")
    wait_for(
        lambda: entries(v) == {"ana/dat/a.dat": 5, "bo/dat/b.dat": 5, "ana/dat/c.dat": 5},
        "the entry moved by its new attribute",
        timeout=30,
    )
    # `gust find -xattr` selects by the same attributes.
    r = gust("find", "/gustfs" + src, "-xattr", "user.owner=an*")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(["/gustfs" + src + "/a.dat", "/gustfs" + src + "/c.dat"])
    r = gust("find", "/gustfs" + src, "-xattr", "user.owner")
    assert len(r.stdout.split()) == 3, r.stdout
