"""File objects and os-like functions of the gustfs module, against a real instance."""

import errno
import io
import multiprocessing
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

import gustfs


def test_binary_round_trip_and_types(d):
    p = d + "/x.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)  # several chunks (chunk size 512 KiB)
    with gustfs.open(p, "wb") as f:
        assert isinstance(f, io.BufferedWriter)
        assert f.write(data) == len(data)
    with gustfs.open(p, "rb") as f:
        assert isinstance(f, io.BufferedReader)
        assert isinstance(f.raw, gustfs.FileIO) and isinstance(f.raw, io.RawIOBase)
        assert f.read() == data
        assert f.read() == b""
    assert f.closed and f.raw.closed
    with gustfs.open(p, "rb", buffering=0) as f:
        assert isinstance(f, gustfs.FileIO)
        assert f.read(10) == data[:10]
        assert f.readall() == data[10:]
    assert gustfs.read_bytes(p) == data
    assert gustfs.getsize(p) == len(data)


def test_text_mode_lines_and_encoding(d):
    p = d + "/t.txt"
    with gustfs.open(p, "w", encoding="utf-8") as f:
        assert isinstance(f, io.TextIOWrapper) and f.mode == "w"
        f.write("grüße\nzwei\n")
        print("drei", file=f)
    with gustfs.open(p, encoding="utf-8") as f:
        assert list(f) == ["grüße\n", "zwei\n", "drei\n"]
    with gustfs.open(p, "rb") as f:
        assert f.readline() == "grüße\n".encode()


def test_modes_append_exclusive_update(d):
    p = d + "/m"
    with gustfs.open(p, "x") as f:
        f.write("abc")
    with pytest.raises(FileExistsError):
        gustfs.open(p, "x")
    with gustfs.open(p, "a") as f:
        f.write("def")
    assert gustfs.read_bytes(p) == b"abcdef"
    with gustfs.open(p, "r+b") as f:
        assert isinstance(f, io.BufferedRandom)
        f.seek(2)
        f.write(b"XY")
        f.seek(0)
        assert f.read() == b"abXYef"
    with gustfs.open(p, "w+") as f:  # truncates
        assert f.read() == ""
        f.write("new")
        f.seek(0)
        assert f.read() == "new"


def test_seek_tell_truncate_pread_pwrite(d):
    p = d + "/s"
    with gustfs.open(p, "wb+", buffering=0) as f:
        f.write(b"0123456789")
        assert f.tell() == 10
        assert f.seek(-3, os.SEEK_END) == 7
        assert f.read() == b"789"
        assert f.seek(2) == 2
        assert f.truncate() == 2
        assert f.seek(0, os.SEEK_END) == 2
        f.pwrite(b"zz", 5)  # a hole from 2 to 5 reads as zeros
        assert f.pread(100, 0) == b"01\0\0\0zz"
        assert f.tell() == 2
        assert f.stat().st_size == 7


def test_readinto_fills_the_callers_buffer_in_place(d):
    p = d + "/r"
    data = os.urandom(1 << 20)
    gustfs.write_bytes(p, data)
    big = bytearray(2 << 20)
    view = memoryview(big)[1000 : 1000 + len(data)]
    with gustfs.open(p, "rb", buffering=0) as f:
        assert f.readinto(view) == len(data)
        assert bytes(big[1000 : 1000 + len(data)]) == data
        assert f.preadinto(memoryview(big)[:10], 5) == 10
        assert bytes(big[:10]) == data[5:15]
        # At the end of the file: 0 (bytes past the count are unspecified, as for read(2)).
        assert f.readinto(bytearray(10)) == 0
    # Through the buffered reader: reads larger than its buffer go straight through.
    out = bytearray(len(data))
    with gustfs.open(p, "rb", buffering=4096) as f:
        assert f.readinto(out) == len(data)
    assert out == data
    # Read-only buffers are refused, not written.
    with gustfs.open(p, "rb", buffering=0) as f:
        with pytest.raises(BufferError):
            f.readinto(b"immutable")


# Peak memory of a code block, in a fresh process: VmHWM after the block minus VmRSS
# before it, with the peak reset first (Linux: "5" > /proc/self/clear_refs), so that
# start-up peaks do not hide the block's own.
_PEAK_PRELUDE = """
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024

def peak_growth_mib(block):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    result = block()
    return _status("VmHWM") - before, result
"""


def test_readinto_makes_no_copy(instance, d):
    """Reading 128 MiB into a buffer the process already holds must not grow its
    peak memory by anything like the size read: the bytes go from the sockets
    straight into the buffer. Run in a fresh process so the peak is this read's."""
    p = d + "/big"
    block = os.urandom(1 << 20)
    with gustfs.open(p, "wb") as f:
        for _ in range(128):
            f.write(block)
    code = _PEAK_PRELUDE + textwrap.dedent(
        f"""
        import gustfs
        gustfs.connect({instance.hosts_file!r})
        buf = bytearray(b"x") * (128 << 20)  # every page touched, no temporary

        def block():
            with gustfs.open({p!r}, "rb", buffering=0) as f:
                return f.readinto(buf)

        grown, n = peak_growth_mib(block)
        assert n == len(buf), n
        print(grown)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    grown_mib = int(out.stdout.strip())
    assert grown_mib < 32, f"peak memory grew by {grown_mib} MiB reading 128 MiB: a copy?"


def test_large_readall_holds_one_copy(instance, d):
    """f.read() of a large file reads into its result: peak memory grows by the
    file's size, not twice that."""
    p = d + "/big"
    with gustfs.open(p, "wb") as f:
        f.truncate(96 << 20)
    code = _PEAK_PRELUDE + textwrap.dedent(
        f"""
        import gustfs
        gustfs.connect({instance.hosts_file!r})

        def block():
            with gustfs.open({p!r}, "rb") as f:
                return len(f.read())

        grown, n = peak_growth_mib(block)
        assert n == 96 << 20, n
        print(grown)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    grown_mib = int(out.stdout.strip())
    assert 90 <= grown_mib < 140, f"peak memory grew by {grown_mib} MiB reading 96 MiB"


def test_write_from_any_buffer(d):
    import array

    p = d + "/w"
    a = array.array("i", range(1000))
    with gustfs.open(p, "wb", buffering=0) as f:
        assert f.write(a) == 4000
        assert f.write(memoryview(b"tail")) == 4
    assert gustfs.read_bytes(p) == a.tobytes() + b"tail"


def test_closed_and_unsupported_operations(d):
    p = d + "/c"
    gustfs.write_bytes(p, b"abc")
    f = gustfs.open(p, "rb")
    f.close()
    with pytest.raises(ValueError):
        f.read()
    f = gustfs.open(p, "rb", buffering=0)
    with pytest.raises(io.UnsupportedOperation):
        f.write(b"x")
    with pytest.raises(io.UnsupportedOperation):
        f.fileno()
    assert not f.isatty() and f.seekable() and f.readable() and not f.writable()
    f.close()
    f.close()  # idempotent
    with pytest.raises(ValueError):
        f.tell()
    w = gustfs.open(p, "wb", buffering=0)
    with pytest.raises(io.UnsupportedOperation):
        w.read()
    w.close()


def test_bad_modes():
    for mode in ("", "rw", "rr", "q", "rbt", "b"):
        with pytest.raises(ValueError):
            gustfs.open("/whatever", mode)
    with pytest.raises(ValueError):
        gustfs.open("/whatever", "rb", encoding="utf-8")
    with pytest.raises(ValueError):
        gustfs.open("/whatever", "w", buffering=0)


# ----- errors: OSError subclasses with the errno of the failure ---------------------------


def expect(exc_type, err, fn, *args, filename=None):
    with pytest.raises(exc_type) as ei:
        fn(*args)
    assert ei.value.errno == err, ei.value
    assert ei.value.strerror == os.strerror(err)
    if filename is not None:
        assert ei.value.filename == filename
    return ei.value


def test_every_error(d):
    f, sub, missing = d + "/file", d + "/sub", d + "/missing"
    gustfs.write_bytes(f, b"x")
    gustfs.mkdir(sub)
    gustfs.write_bytes(sub + "/inner", b"y")

    expect(FileNotFoundError, errno.ENOENT, gustfs.stat, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.open, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.listdir, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.remove, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.rmdir, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.readlink, missing, filename=missing)
    expect(FileNotFoundError, errno.ENOENT, gustfs.stat, "", filename="")
    e = expect(FileNotFoundError, errno.ENOENT, gustfs.rename, missing, d + "/to")
    assert (e.filename, e.filename2) == (missing, d + "/to")

    expect(FileExistsError, errno.EEXIST, gustfs.mkdir, sub, filename=sub)
    expect(FileExistsError, errno.EEXIST, gustfs.open, f, "x", filename=f)
    expect(FileExistsError, errno.EEXIST, gustfs.symlink, "/anything", f)
    expect(FileExistsError, errno.EEXIST, gustfs.makedirs, sub)

    expect(IsADirectoryError, errno.EISDIR, gustfs.open, sub, "w", filename=sub)
    expect(IsADirectoryError, errno.EISDIR, gustfs.open, sub, "r+b", filename=sub)
    expect(IsADirectoryError, errno.EISDIR, gustfs.remove, sub, filename=sub)
    expect(IsADirectoryError, errno.EISDIR, gustfs.open, sub, "rb", filename=sub)  # as io.open
    fd, _, kind = gustfs.client()._c.open(sub, os.O_RDONLY)  # the system level opens it
    assert kind == "d"
    try:
        expect(IsADirectoryError, errno.EISDIR, gustfs.client()._c.read, fd, 10)
    finally:
        gustfs.client()._c.close(fd)

    expect(NotADirectoryError, errno.ENOTDIR, gustfs.listdir, f, filename=f)
    expect(NotADirectoryError, errno.ENOTDIR, gustfs.rmdir, f, filename=f)
    expect(NotADirectoryError, errno.ENOTDIR, gustfs.rmtree, f)

    expect(OSError, errno.ENOTEMPTY, gustfs.rmdir, sub, filename=sub)
    expect(OSError, errno.EINVAL, gustfs.rename, sub, sub + "/inside")
    expect(OSError, errno.EINVAL, gustfs.readlink, f, filename=f)
    expect(OSError, errno.ENAMETOOLONG, gustfs.stat, d + "/" + "n" * 300)

    loop = d + "/loop"
    gustfs.symlink(loop, loop)
    expect(OSError, errno.ELOOP, gustfs.stat, loop, filename=loop)
    expect(OSError, errno.ELOOP, gustfs.open, loop, filename=loop)

    # An instance that is not there: the hosts file's own errno, and its path.
    with pytest.raises(FileNotFoundError) as ei:
        gustfs.Client("/nonexistent/gust.hosts")
    assert ei.value.filename == "/nonexistent/gust.hosts" and "No such file" in ei.value.strerror


def test_error_of_a_stopped_instance(tmp_path):
    from conftest import Instance

    inst = Instance(daemons=1)
    c = gustfs.Client(inst.hosts_file)
    c.write_bytes("/x", b"1")
    inst.stop()
    with pytest.raises(OSError) as ei:
        c.stat("/x")
    assert ei.value.errno == errno.EIO
    assert "daemon" in ei.value.strerror  # says which daemon failed


# ----- metadata and directories -------------------------------------------------------


def test_extended_attributes(client, d):
    p = d + "/xa"
    gustfs.write_bytes(p, b"x")
    assert gustfs.listxattr(p) == []
    gustfs.setxattr(p, "user.tag", b"\x00train")
    gustfs.setxattr(p, "user.n", b"1")
    assert gustfs.getxattr(p, "user.tag") == b"\x00train"
    assert sorted(gustfs.listxattr(p)) == ["user.n", "user.tag"]
    with pytest.raises(FileExistsError):
        gustfs.setxattr(p, "user.n", b"2", os.XATTR_CREATE)
    gustfs.setxattr(p, "user.n", b"2", os.XATTR_REPLACE)
    assert gustfs.getxattr(p, "user.n") == b"2"
    gustfs.removexattr(p, "user.n")
    with pytest.raises(OSError) as ei:
        gustfs.getxattr(p, "user.n")
    assert ei.value.errno == errno.ENODATA
    with pytest.raises(OSError) as ei:
        gustfs.setxattr(p, "security.x", b"1")
    assert ei.value.errno == errno.EOPNOTSUPP
    gustfs.symlink(p, d + "/xa-link")
    assert gustfs.getxattr(d + "/xa-link", "user.tag") == b"\x00train"
    assert gustfs.listxattr(d + "/xa-link", follow_symlinks=False) == []


def test_stat_result(client, d):
    p = d + "/st"
    gustfs.write_bytes(p, b"12345")
    st = gustfs.stat(p)
    assert isinstance(st, os.stat_result)
    assert stat.S_ISREG(st.st_mode) and st.st_size == 5 and st.st_nlink == 1
    assert st.st_uid == os.getuid() and st.st_blksize == client.chunk_size
    assert st.st_mtime_ns // 1_000_000_000 == int(st.st_mtime) == st[stat.ST_MTIME]
    assert stat.S_IMODE(st.st_mode) == 0o666 & ~_umask()
    assert stat.S_ISDIR(gustfs.stat(d).st_mode)
    gustfs.chmod(p, 0o600)
    assert stat.S_IMODE(gustfs.stat(p).st_mode) == 0o600
    gustfs.utime(p, ns=(1_000_000_000, 2_000_000_123))
    assert gustfs.stat(p).st_mtime_ns == 2_000_000_123
    gustfs.truncate(p, 2)
    assert gustfs.read_bytes(p) == b"12"
    assert gustfs.access(p, os.R_OK) and not gustfs.access(d + "/none", os.F_OK)
    assert gustfs.exists(p) and gustfs.isfile(p) and not gustfs.isdir(p) and gustfs.isdir(d)
    vfs = gustfs.statvfs()
    assert isinstance(vfs, os.statvfs_result) and vfs.f_bsize > 0


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_paths_forms(client, d):
    p = d + "/pf"
    gustfs.write_bytes(p, b"z")
    import pathlib

    assert gustfs.read_bytes(pathlib.PurePosixPath(p)) == b"z"
    assert gustfs.read_bytes(p.encode()) == b"z"
    assert gustfs.read_bytes(client.mountdir + p) == b"z"  # under the mount directory
    assert gustfs.read_bytes(p.lstrip("/")) == b"z"  # relative: from the root
    assert client.internal_path(client.mountdir + d + "/./a/../pf") == p


def test_listdir_scandir_symlinks(d):
    gustfs.mkdir(d + "/dir")
    gustfs.write_bytes(d + "/file", b"abc")
    gustfs.symlink(d + "/dir", d + "/link")
    assert sorted(gustfs.listdir(d)) == ["dir", "file", "link"]
    with gustfs.scandir(d) as it:
        entries = {e.name: e for e in it}
    assert entries["dir"].is_dir() and not entries["dir"].is_file()
    assert entries["file"].is_file() and entries["file"].stat().st_size == 3
    assert entries["link"].is_symlink() and entries["link"].is_dir()
    assert not entries["link"].is_dir(follow_symlinks=False)
    assert entries["file"].path == d + "/file" and os.fspath(entries["file"]) == d + "/file"
    assert gustfs.readlink(d + "/link") == d + "/dir"
    assert gustfs.islink(d + "/link") and gustfs.isdir(d + "/link")


def test_walk_like_os_walk(d):
    gustfs.makedirs(d + "/a/b/c")
    gustfs.makedirs(d + "/a/b/c", exist_ok=True)
    gustfs.makedirs(d + "/x")
    for p in ("/a/1", "/a/b/2", "/a/b/c/3", "/x/4", "/5"):
        gustfs.write_bytes(d + p, b"")

    def norm(w):
        return [(r, sorted(ds), sorted(fs)) for r, ds, fs in w]

    top = norm(gustfs.walk(d))
    assert top[0] == (d, ["a", "x"], ["5"])
    assert sorted(top) == sorted(
        [
            (d, ["a", "x"], ["5"]),
            (d + "/a", ["b"], ["1"]),
            (d + "/a/b", ["c"], ["2"]),
            (d + "/a/b/c", [], ["3"]),
            (d + "/x", [], ["4"]),
        ]
    )
    bottom = [r for r, _, _ in gustfs.walk(d, topdown=False)]
    assert bottom.index(d + "/a/b/c") < bottom.index(d + "/a/b") < bottom.index(d + "/a") < bottom.index(d)
    # Pruning in top-down order, as with os.walk.
    seen = []
    for root, dirs, _ in gustfs.walk(d):
        seen.append(root)
        if "a" in dirs:
            dirs.remove("a")
    assert sorted(seen) == [d, d + "/x"]
    errors = []
    assert list(gustfs.walk(d + "/none", onerror=errors.append)) == []
    assert isinstance(errors[0], FileNotFoundError)


def test_rename_replace_remove_rmtree(d):
    gustfs.write_bytes(d + "/a", b"A")
    gustfs.write_bytes(d + "/b", b"B")
    gustfs.rename(d + "/a", d + "/b")  # replaces, as on Linux
    assert gustfs.read_bytes(d + "/b") == b"A" and not gustfs.exists(d + "/a")
    gustfs.replace(d + "/b", d + "/c")
    gustfs.remove(d + "/c")
    gustfs.makedirs(d + "/t/u/v")
    for i in range(20):
        gustfs.write_bytes(f"{d}/t/u/f{i}", b"x")
    gustfs.rename(d + "/t", d + "/t2")
    assert sorted(gustfs.listdir(d + "/t2/u")) == sorted(["v"] + [f"f{i}" for i in range(20)])
    gustfs.rmtree(d + "/t2")
    assert gustfs.listdir(d) == []
    calls = []
    gustfs.rmtree(d + "/none", onerror=lambda fn, p, ei: calls.append((p, ei[0])))
    assert calls == [(d + "/none", FileNotFoundError)]
    gustfs.rmtree(d + "/none", ignore_errors=True)


def test_hard_links_share_data_and_attributes(d):
    gustfs.write_bytes(d + "/a", b"one")
    gustfs.link(d + "/a", d + "/b")
    assert gustfs.stat(d + "/a").st_nlink == 2
    assert gustfs.stat(d + "/a").st_ino == gustfs.stat(d + "/b").st_ino
    gustfs.write_bytes(d + "/b", b"two, longer")
    assert gustfs.read_bytes(d + "/a") == b"two, longer"
    gustfs.chmod(d + "/a", 0o600)
    assert gustfs.stat(d + "/b").st_mode & 0o777 == 0o600
    gustfs.remove(d + "/a")
    assert gustfs.stat(d + "/b").st_nlink == 1 and gustfs.read_bytes(d + "/b") == b"two, longer"
    with pytest.raises(FileExistsError):
        gustfs.link(d + "/b", d + "/b")
    with pytest.raises(FileNotFoundError):
        gustfs.link(d + "/none", d + "/c")


# ----- concurrency: threads and processes ----------------------------------------------


def test_threads_share_a_client(d):
    """The GIL is released around every call, so threads overlap; each one's data
    must still come back intact."""
    blobs = {i: os.urandom(200_000 + i) for i in range(8)}
    errors = []

    def work(i):
        try:
            p = f"{d}/th{i}"
            for _ in range(5):
                gustfs.write_bytes(p, blobs[i])
                with gustfs.open(p, "rb") as f:
                    assert f.read() == blobs[i]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def _child_reads(path, open_file, q):
    try:
        # A file object inherited from the parent, and a fresh open through the
        # inherited client: both work after fork.
        open_file.seek(0)
        q.put((open_file.read(), gustfs.read_bytes(path)))
    except Exception as e:  # noqa: BLE001
        q.put(repr(e))


def test_fork_workers(d):
    p = d + "/forked"
    gustfs.write_bytes(p, b"data for workers")
    f = gustfs.open(p, "rb", buffering=0)
    assert f.read(4) == b"data"  # the parent has live pooled connections now
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child_reads, args=(p, f, q)) for _ in range(3)]
    for pr in procs:
        pr.start()
    results = [q.get(timeout=60) for _ in procs]
    for pr in procs:
        pr.join(60)
    assert results == [(b"data for workers", b"data for workers")] * 3
    # The parent's own connections are untouched by the children.
    assert gustfs.read_bytes(p) == b"data for workers"
    f.close()


def test_write_bytes_is_one_call_with_errors_at_the_call(d):
    """write_bytes creates, writes and closes in one native call (a deferred create:
    a small file travels with its record); sizes on both sides of the inline bound
    read back, a replacement drops the old content, and the create's errors come
    from the call with the path (a missing parent is no error: instances check
    parents only when started with --check-parent)."""
    for i, n in enumerate([0, 1, 4096, 200 << 10, 256 << 10, (256 << 10) + 1, 3 << 20]):
        p = f"{d}/f{i}"
        data = os.urandom(n)
        assert gustfs.write_bytes(p, data) == n
        assert gustfs.read_bytes(p) == data
        with gustfs.open(p, "rb") as f:
            assert f.read() == data
        assert gustfs.stat(p).st_size == n
    p = d + "/replaced"
    gustfs.write_bytes(p, b"a much longer first content")
    gustfs.write_bytes(p, memoryview(b"short"))
    assert gustfs.read_bytes(p) == b"short"
    gustfs.mkdir(d + "/sub")
    expect(IsADirectoryError, errno.EISDIR, gustfs.write_bytes, d + "/sub", b"x", filename=d + "/sub")
    assert gustfs.isdir(d + "/sub")
