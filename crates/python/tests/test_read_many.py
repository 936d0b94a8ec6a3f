"""gustfs.read_many: the whole contents of a batch of files, all requests sent
before any reply is read. Each entry must be what read_bytes gives for that file
alone (inline files, files in chunks, grown by truncate), in the order asked, and
errors must stay with their file: raised in order, returned in place, or left out."""

import errno
import os

import pytest

import gustfs

INLINE_BYTES_MAX = 256 << 10


def test_every_kind_of_file_in_order(d):
    sizes = [0, 1, 4096, 100 << 10, INLINE_BYTES_MAX, INLINE_BYTES_MAX + 1, 3 << 20] + [i * 1000 for i in range(150)]
    paths, want = [], []
    for i, size in enumerate(sizes):
        p = f"{d}/f{i}"
        data = os.urandom(size)
        gustfs.write_bytes(p, data)  # inline up to the bound, chunks past it
        paths.append(p)
        want.append(data)
    with gustfs.open(f"{d}/chunked", "wb") as f:  # created at open: in chunks
        f.write(b"small, in chunks")
    gustfs.write_bytes(f"{d}/grown", b"abc")
    gustfs.truncate(f"{d}/grown", 5000)
    paths += [f"{d}/chunked", f"{d}/grown", paths[3]]
    want += [b"small, in chunks", b"abc" + bytes(4997), want[3]]
    got = gustfs.read_many(paths)
    assert len(got) == len(paths)
    for p, g, w in zip(paths, got, want):
        assert type(g) is bytes, p
        assert g == w, p
        assert g == gustfs.read_bytes(p), p
    assert gustfs.read_many([]) == []
    # Any path-like object, as read_bytes takes.
    import pathlib

    assert gustfs.read_many([pathlib.PurePosixPath(paths[2])]) == [want[2]]


def test_errors_stay_with_their_file(d):
    gustfs.write_bytes(f"{d}/a", b"A")
    gustfs.write_bytes(f"{d}/b", b"B")
    gustfs.mkdir(f"{d}/sub")
    paths = [f"{d}/a", f"{d}/missing", f"{d}/sub", f"{d}/b", f"{d}/a/below", ""]
    with pytest.raises(FileNotFoundError) as ei:
        gustfs.read_many(paths)
    assert ei.value.filename == f"{d}/missing"  # the first failure in order
    got = gustfs.read_many(paths, on_error="return")
    assert got[0] == b"A" and got[3] == b"B"
    assert isinstance(got[1], FileNotFoundError) and got[1].errno == errno.ENOENT
    assert got[1].filename == f"{d}/missing"
    assert isinstance(got[2], IsADirectoryError) and got[2].filename == f"{d}/sub"
    assert isinstance(got[4], (NotADirectoryError, FileNotFoundError))
    assert isinstance(got[5], FileNotFoundError)
    assert gustfs.read_many(paths, on_error="omit") == [b"A", b"B"]
    with pytest.raises(ValueError):
        gustfs.read_many(paths, on_error="ignore")


def test_fsspec_cat_of_many_paths(d):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("gust")
    want = {f"{d}/c{i}": os.urandom(i * 5000) for i in range(1, 40)}
    for p, data in want.items():
        fs.pipe_file(p, data)
    assert fs.cat(list(want)) == want
    # A glob expands to every file, as fsspec's own cat does.
    assert fs.cat(f"gust://{d}/c*") == want
    # One path: its bytes, not a dict.
    first = next(iter(want))
    assert fs.cat(first) == want[first]
    # Errors: raised, returned in place, or left out.
    asked = [first, f"{d}/missing"]
    with pytest.raises(FileNotFoundError):
        fs.cat(asked)
    got = fs.cat(asked, on_error="return")
    assert got[first] == want[first] and isinstance(got[f"{d}/missing"], FileNotFoundError)
    assert fs.cat(asked, on_error="omit") == {first: want[first]}
    # Byte ranges take fsspec's own way and agree with it.
    assert fs.cat([first], start=2, end=10) == {first: want[first][2:10]}


def test_whole_file_reads_are_traced(instance, d, tmp_path):
    """GUST_TRACE=read records read_bytes and every file of read_many as a read of
    its path, with the bytes it got, and an error for a missing file."""
    import json
    import subprocess
    import sys

    gustfs.write_bytes(f"{d}/a", b"x" * 5000)
    gustfs.write_bytes(f"{d}/b", b"y" * 7)
    script = (
        "import gustfs, sys\n"
        "d = sys.argv[1]\n"
        "assert gustfs.read_bytes(d + '/a') == b'x' * 5000\n"
        "got = gustfs.read_many([d + '/a', d + '/b', d + '/missing'], on_error='return')\n"
        "assert got[:2] == [b'x' * 5000, b'y' * 7] and isinstance(got[2], FileNotFoundError)\n"
    )
    env = dict(os.environ, GUST_HOSTS_FILE=instance.hosts_file, GUST_TRACE="read", GUST_TRACE_DIR=str(tmp_path / "t"))
    subprocess.run([sys.executable, "-c", script, d], env=env, check=True)
    out = subprocess.run(
        [instance.gust, "trace", "report", "--json", "--out", str(tmp_path / "r"), str(tmp_path / "t")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    reads = [o for o in json.loads(out)["ops"] if o["name"] == "read"]
    assert len(reads) == 1 and reads[0]["count"] == 4 and reads[0]["errors"] == 1, out
    assert reads[0]["bytes"] == 5000 + 5000 + 7, out
    events = json.load(open(tmp_path / "r" / "trace.json"))["traceEvents"]
    paths = sorted(e["args"]["path"] for e in events if e.get("ph") == "X" and e.get("name") == "read")
    assert paths == sorted([f"{d}/a", f"{d}/a", f"{d}/b", f"{d}/missing"])
