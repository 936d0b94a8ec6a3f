"""gustfs.read_bytes: a whole file in one native call. An inline file (up to 256 KiB,
stored with its record) is one request whose data lands straight in the returned
bytes; every other file is opened with the record that request brought and read to
its end. These tests check the content byte for byte on both sides of the inline
bound and every error, with the path in it."""

import errno
import io
import os
import subprocess
import threading

import pytest

import gustfs

INLINE_BYTES_MAX = 256 << 10


def expect(exc_type, err, fn, *args, filename=None):
    with pytest.raises(exc_type) as ei:
        fn(*args)
    assert ei.value.errno == err, ei.value
    assert ei.value.strerror == os.strerror(err)
    assert ei.value.filename == filename
    return ei.value


def daemon_requests(instance):
    """Requests served by all daemons so far, from `gust status` (which itself
    sends one request to each daemon, counted in the next call's total)."""
    out = subprocess.run(
        [instance.gust, "status", "--hosts-file", instance.hosts_file], check=True, capture_output=True, text=True
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    return sum(int(r[5]) for r in rows), len(rows)


@pytest.mark.parametrize(
    "size", [0, 1, 4096, 100 << 10, INLINE_BYTES_MAX - 1, INLINE_BYTES_MAX, INLINE_BYTES_MAX + 1, 3 << 20]
)
def test_content_on_both_sides_of_the_inline_bound(d, size):
    p = f"{d}/f{size}"
    data = os.urandom(size)
    gustfs.write_bytes(p, data)  # inline up to the bound, chunks past it
    got = gustfs.read_bytes(p)
    assert type(got) is bytes
    assert got == data
    # The result is an ordinary bytes object: hashable, sliceable, immutable.
    assert hash(got) == hash(data) and got[1:3] == data[1:3]


def test_files_in_chunks_and_inline_files_grown_by_truncate(d):
    # gustfs.open("wb") creates at open: a small file in chunks, not inline.
    small = d + "/chunked-small"
    with gustfs.open(small, "wb") as f:
        f.write(b"chunked but small")
    assert gustfs.read_bytes(small) == b"chunked but small"
    # An inline file grown by truncate: stored data is shorter than the size, and
    # the rest reads as zeros (not as whatever the new bytes object held).
    for grown in (10, 200 << 10, INLINE_BYTES_MAX):
        p = f"{d}/grown{grown}"
        gustfs.write_bytes(p, b"abc")
        gustfs.truncate(p, grown)
        assert gustfs.read_bytes(p) == b"abc" + bytes(grown - 3)
    # Cut by truncate: only what is left.
    p = d + "/cut"
    gustfs.write_bytes(p, b"0123456789")
    gustfs.truncate(p, 4)
    assert gustfs.read_bytes(p) == b"0123"
    # Written through chunks after being inline (the open for writing moves it).
    p = d + "/moved"
    gustfs.write_bytes(p, b"inline first")
    with gustfs.open(p, "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b", then chunks")
    assert gustfs.read_bytes(p) == b"inline first, then chunks"


def test_symlinks_and_path_forms(client, d):
    p = d + "/target"
    gustfs.write_bytes(p, b"through a link")
    gustfs.symlink(p, d + "/link")
    gustfs.symlink("target", d + "/relative")
    assert gustfs.read_bytes(d + "/link") == b"through a link"
    assert gustfs.read_bytes(d + "/relative") == b"through a link"
    assert gustfs.read_bytes(client.mountdir + p) == b"through a link"
    assert gustfs.read_bytes(p.encode()) == b"through a link"
    assert gustfs.read_bytes(p.lstrip("/")) == b"through a link"


def test_every_error(d):
    f, sub, missing = d + "/file", d + "/sub", d + "/missing"
    gustfs.write_bytes(f, b"x")
    gustfs.mkdir(sub)
    expect(FileNotFoundError, errno.ENOENT, gustfs.read_bytes, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.read_bytes, missing + "/x", filename=missing + "/x")
    expect(FileNotFoundError, errno.ENOENT, gustfs.read_bytes, "", filename="")
    expect(IsADirectoryError, errno.EISDIR, gustfs.read_bytes, sub, filename=sub)
    expect(IsADirectoryError, errno.EISDIR, gustfs.read_bytes, "/", filename="/")
    # A path below a file: what open says (GustFS resolves no parents: ENOENT).
    with pytest.raises(OSError) as via_open:
        gustfs.open(f + "/below", "rb")
    expect(type(via_open.value), via_open.value.errno, gustfs.read_bytes, f + "/below", filename=f + "/below")
    gustfs.symlink(d + "/loop", d + "/loop")
    expect(OSError, errno.ELOOP, gustfs.read_bytes, d + "/loop", filename=d + "/loop")
    gustfs.symlink(d + "/nowhere", d + "/dangling")
    expect(FileNotFoundError, errno.ENOENT, gustfs.read_bytes, d + "/dangling", filename=d + "/dangling")
    gustfs.symlink(sub, d + "/dirlink")
    expect(IsADirectoryError, errno.EISDIR, gustfs.read_bytes, d + "/dirlink", filename=d + "/dirlink")
    long_name = d + "/" + "n" * 300
    expect(OSError, errno.ENAMETOOLONG, gustfs.read_bytes, long_name, filename=long_name)
    with pytest.raises(TypeError):
        gustfs.read_bytes(42)
    # Nothing was lost or changed by the failures.
    assert gustfs.read_bytes(f) == b"x" and gustfs.isdir(sub)


def test_an_inline_file_is_one_request(instance, d):
    files = [f"{d}/img{i}" for i in range(40)]
    for i, p in enumerate(files):
        gustfs.write_bytes(p, bytes([i]) * (1000 * i + 1))
    # Another client (another process's view), which holds no grant on them.
    other = gustfs.Client(instance.hosts_file)
    q0, _ = daemon_requests(instance)
    for i, p in enumerate(files):
        assert other.read_bytes(p) == bytes([i]) * (1000 * i + 1)
    q1, daemons = daemon_requests(instance)
    assert q1 - daemons - q0 == len(files), "one request per inline file"
    # The writer holds grants on what it wrote, with the data: no request.
    q0, _ = daemon_requests(instance)
    for i, p in enumerate(files):
        assert gustfs.read_bytes(p) == bytes([i]) * (1000 * i + 1)
    q1, daemons = daemon_requests(instance)
    assert q1 - daemons - q0 == 0, "requests for files the writer holds"


def test_threads_read_at_once(d):
    """Threads share the client; each call's data lands in its own bytes object."""
    paths = []
    for i in range(16):
        p = f"{d}/t{i}"
        gustfs.write_bytes(p, bytes([i]) * (64 << 10))
        paths.append(p)
    bad = []

    def reader(k):
        for _ in range(20):
            for i, p in enumerate(paths):
                if gustfs.read_bytes(p) != bytes([i]) * (64 << 10):
                    bad.append((k, p))

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_open_rb_of_an_inline_file_serves_reads_from_the_open(instance, d):
    """gustfs.open(p, "rb") of an inline file brings the data with the open (one
    request for open + read + close) and behaves as a file object in every way."""
    p = d + "/lines"
    data = b"first line\nsecond line\n" + bytes(range(256)) * 100 + b"\nlast"
    gustfs.write_bytes(p, data)
    with gustfs.open(p, "rb") as f:
        assert isinstance(f, io.BufferedReader) and isinstance(f.raw, gustfs.FileIO)
        assert f.readline() == b"first line\n"
        assert f.tell() == 11
        assert f.read(6) == b"second"
        f.seek(-4, os.SEEK_END)
        assert f.read() == b"last" and f.read() == b""
        f.seek(0)
        assert list(f)[-1] == b"last"
        assert f.raw.stat().st_size == len(data) and f.raw.stat().st_mode & 0o170000 == 0o100000
    assert f.closed and f.raw.closed
    with gustfs.open(p, "rb", buffering=0) as f:
        assert f.read(5) == b"first"
        buf = bytearray(10)
        assert f.readinto(buf) == 10 and bytes(buf) == data[5:15]
        assert f.pread(4, 1) == data[1:5] and f.tell() == 15
        view = memoryview(bytearray(8))
        assert f.preadinto(view, len(data) - 3) == 3 and bytes(view[:3]) == data[-3:]
        assert f.pread(10, len(data) + 5) == b""
        assert f.seek(len(data) + 100) == len(data) + 100 and f.read(3) == b""
        with pytest.raises(OSError) as e:
            f.seek(-1)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(BufferError):
            f.readinto(b"read-only")
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
        with pytest.raises(io.UnsupportedOperation):
            f.truncate(0)
        f.seek(3)
        assert f.readall() == data[3:]
    with pytest.raises(ValueError):
        f.read()
    with pytest.raises(ValueError):
        f.seek(0)
    with gustfs.open(p, "r", encoding="latin-1", newline="") as t:
        assert t.readline() == "first line\n"
    # The file as of the open: a later replacement does not show through.
    with gustfs.open(p, "rb") as f:
        gustfs.write_bytes(p, b"replaced")
        assert f.read() == data
    assert gustfs.read_bytes(p) == b"replaced"
    # Grown by truncate: zeros past the stored data, in the file object too.
    gustfs.truncate(p, 20)
    with gustfs.open(p, "rb") as f:
        assert f.read() == b"replaced" + bytes(12)
    # One request per open + read + close.
    files = [f"{d}/img{i}" for i in range(30)]
    for i, q in enumerate(files):
        gustfs.write_bytes(q, bytes([i]) * (3000 * i + 1))
    other = gustfs.Client(instance.hosts_file)
    q0, _ = daemon_requests(instance)
    for i, q in enumerate(files):
        with other.open(q, "rb") as f:
            assert f.read() == bytes([i]) * (3000 * i + 1)
    q1, daemons = daemon_requests(instance)
    assert q1 - daemons - q0 == len(files), "one request per file"


def test_open_rb_of_other_files_and_errors(d):
    big = d + "/big"
    data = os.urandom(INLINE_BYTES_MAX + 4097)
    gustfs.write_bytes(big, data)  # in chunks
    with gustfs.open(big, "rb") as f:
        assert f.read(3) == data[:3]
        f.seek(INLINE_BYTES_MAX)
        assert f.read() == data[INLINE_BYTES_MAX:]
        assert f.raw.stat().st_size == len(data)
    gustfs.symlink(big, d + "/link")
    with gustfs.open(d + "/link", "rb") as f:
        assert f.read() == data
    gustfs.write_bytes(d + "/empty", b"")
    with gustfs.open(d + "/empty", "rb") as f:
        assert f.read() == b""
    gustfs.mkdir(d + "/sub")
    expect(IsADirectoryError, errno.EISDIR, gustfs.open, d + "/sub", "rb", filename=d + "/sub")
    expect(FileNotFoundError, errno.ENOENT, gustfs.open, d + "/missing", "rb", filename=d + "/missing")
