"""GustFS from Python: file objects and os-like functions over the client core.

    import gustfs
    with gustfs.open("/data/x.csv", "w") as f:      # like io.open
        f.write("a,b\\n1,2\\n")
    gustfs.stat("/data/x.csv").st_size               # an os.stat_result
    for root, dirs, files in gustfs.walk("/data"):   # like os.walk
        ...

The module-level functions use one client per process, connected on first use to
the instance of ``$GUST_HOSTS_FILE``; ``gustfs.Client(hosts_file)`` connects to
another instance and has the same methods. Failures raise ``OSError`` subclasses
with the errno of the failure (``FileNotFoundError``, ``IsADirectoryError``, ...).

Paths are paths inside GustFS (``/a/b``); a path under the instance's mount
directory (``/gustfs/a/b``) means the same file, and a relative path is taken from
the root (GustFS has no working directory). ``str``, ``bytes`` and ``os.PathLike``
are accepted.

See docs/PYTHON.md for what differs from ``os`` and ``io``; ``gustfs.fsspec``
has the fsspec file system (``gust://``).
"""

import errno as _errno
import io
import os
import stat as _stat
import threading

from . import _native

__all__ = [
    "Client",
    "FileIO",
    "DirEntry",
    "client",
    "connect",
    "open",
    "stat",
    "lstat",
    "exists",
    "isdir",
    "isfile",
    "islink",
    "getsize",
    "listdir",
    "scandir",
    "walk",
    "mkdir",
    "makedirs",
    "rmdir",
    "remove",
    "unlink",
    "rename",
    "replace",
    "link",
    "rmtree",
    "truncate",
    "symlink",
    "readlink",
    "chmod",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
    "utime",
    "access",
    "statvfs",
    "read_bytes",
    "read_many",
    "write_bytes",
]

_O_ACCESS = {"r": os.O_RDONLY, "w": os.O_WRONLY, "a": os.O_WRONLY, "x": os.O_WRONLY}
_O_EXTRA = {"r": 0, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND, "x": os.O_CREAT | os.O_EXCL}


def _fspath(path):
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    return p


def _stat_result(t):
    """An os.stat_result from the native tuple (see _native.Client.stat)."""
    mode, ino, dev, nlink, uid, gid, size, atime_ns, mtime_ns, ctime_ns, blksize, blocks = t
    return os.stat_result(
        (
            mode,
            ino,
            dev,
            nlink,
            uid,
            gid,
            size,
            atime_ns // 1_000_000_000,
            mtime_ns // 1_000_000_000,
            ctime_ns // 1_000_000_000,
            atime_ns / 1e9,
            mtime_ns / 1e9,
            ctime_ns / 1e9,
            atime_ns,
            mtime_ns,
            ctime_ns,
            blksize,
            blocks,
            0,
        )
    )


# Valid mode strings already parsed (a bounded set: each letter at most once): every
# open parses its mode twice, which cost ~2 µs each time, a tenth of the Python
# side of opening and reading a small file.
_PARSED_MODES = {}


def _parse_mode(mode):
    """(raw mode letter, plus, binary) of an io.open mode string, checked as io.open does."""
    parsed = _PARSED_MODES.get(mode) if type(mode) is str else None
    if parsed is None:
        parsed = _PARSED_MODES[mode] = _check_mode(mode)
    return parsed


def _check_mode(mode):
    if not isinstance(mode, str):
        raise TypeError(f"invalid mode: {mode!r}")
    modes = set(mode)
    if modes - set("rwaxbt+") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = modes & set("rwax")
    if len(kinds) != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if "b" in modes and "t" in modes:
        raise ValueError("can't have text and binary mode at once")
    return kinds.pop(), "+" in modes, "b" in modes


class FileIO(io.RawIOBase):
    """An open GustFS file: io.FileIO's interface over a GustFS descriptor.

    ``readinto`` reads straight into the caller's buffer (any writable contiguous
    buffer: bytearray, memoryview, numpy array) and ``write`` writes straight from
    one, with no copy in between; the GIL is released while the data moves.
    ``fileno()`` raises io.UnsupportedOperation: the descriptor is not a kernel one.

    A small file opened read-only whose data is stored with its record (inline, up
    to 256 KiB) comes whole with the open, in one request, read from the socket
    straight into a bytes object; the file object then serves every read from it
    (the file as of the open, as the client core does for such a file) and holds no
    descriptor of the core. ``read()`` of the whole file returns that object itself.
    """

    def __init__(self, file, mode="r", *, client=None, perms=0o666):
        self._fd = -1
        # The file's content when it came with the open (see the class doc), else None.
        self._data = None
        self._c = (client or _client())._c
        kind, plus, _ = _parse_mode(mode.replace("b", "") + "b")
        flags = (os.O_RDWR if plus else _O_ACCESS[kind]) | _O_EXTRA[kind]
        self.name = _fspath(file)
        self._readable = kind == "r" or plus
        self._writable = kind != "r" or plus
        self._appending = kind == "a"
        self._mode = {"r": "rb", "w": "wb", "a": "ab", "x": "xb"}[kind] + ("+" if plus else "")
        if flags == os.O_RDONLY:
            data, fd, self._size_hint, kind, self._stat = self._c.open_read(self.name)
            if data is not None:
                self._data, self._pos = data, 0
                return
        else:
            fd, self._size_hint, kind = self._c.open(self.name, flags, perms)
        if kind == "d":
            # As io.FileIO: a directory opens at the system level but is no file.
            self._c.close(fd)
            raise IsADirectoryError(_errno.EISDIR, os.strerror(_errno.EISDIR), self.name)
        self._fd = fd

    # -- state ------------------------------------------------------------------------

    @property
    def mode(self):
        return self._mode

    def _check(self):
        if self._fd < 0 and self._data is None:
            raise ValueError("I/O operation on closed file")

    def readable(self):
        self._check()
        return self._readable

    def writable(self):
        self._check()
        return self._writable

    def seekable(self):
        self._check()
        return True

    def isatty(self):
        self._check()
        return False

    def fileno(self):
        raise io.UnsupportedOperation(
            "a GustFS descriptor is not a kernel descriptor; "
            "for programs that need one use the preload library (gust run) or a FUSE mount"
        )

    def close(self):
        if self._data is not None:
            try:
                super().close()
            finally:
                self._data = None
        elif self._fd >= 0:
            try:
                super().close()
            finally:
                fd, self._fd = self._fd, -1
                self._c.close(fd)
        else:
            super().close()

    def __repr__(self):
        state = "closed" if self._fd < 0 and self._data is None else f"mode={self._mode!r}"
        return f"<gustfs.FileIO name={self.name!r} {state}>"

    def __getstate__(self):
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    # -- data -----------------------------------------------------------------------

    def _check_readable(self):
        self._check()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")

    def _check_writable(self):
        self._check()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")

    def readinto(self, b):
        self._check_readable()
        if self._data is not None:
            n = self._copy_out(b, self._pos)
            self._pos += n
            return n
        return self._c.readinto(self._fd, b)

    def _copy_out(self, b, offset):
        """Copies from the data that came with the open into ``b`` at ``offset``."""
        with memoryview(b) as m, m.cast("B") as m:
            if m.readonly:
                raise BufferError("buffer is read-only; readinto needs a writable one")
            n = max(0, min(len(m), len(self._data) - offset))
            if n:
                m[:n] = memoryview(self._data)[offset : offset + n]
            return n

    def read(self, size=-1):
        self._check_readable()
        if size is None or size < 0:
            return self.readall()
        if self._data is not None:
            out = self._data[self._pos : self._pos + size]
            self._pos += len(out)
            return out
        return self._c.read(self._fd, size)

    def readall(self):
        self._check_readable()
        if self._data is not None:
            # The whole file from the start: the bytes object itself, no copy.
            out = self._data if self._pos == 0 else self._data[self._pos :]
            self._pos = max(self._pos, len(self._data))
            return out
        if self._size_hint is None:
            self._size_hint = self._c.fstat(self._fd)[6]
        pos = self._c.lseek(self._fd, 0, os.SEEK_CUR)
        return self._c.readall(self._fd, max(self._size_hint - pos, 0))

    def pread(self, size, offset):
        """Up to ``size`` bytes at ``offset``; the file position is unchanged."""
        self._check_readable()
        if self._data is not None:
            if offset < 0:
                raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL))
            return self._data[offset : offset + max(size, 0)]
        return self._c.pread(self._fd, size, offset)

    def preadinto(self, b, offset):
        """Reads into ``b`` at ``offset``, without a copy; the position is unchanged."""
        self._check_readable()
        if self._data is not None:
            if offset < 0:
                raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL))
            return self._copy_out(b, offset)
        return self._c.preadinto(self._fd, b, offset)

    def write(self, b):
        self._check_writable()
        self._size_hint = None
        return self._c.write(self._fd, b)

    def pwrite(self, b, offset):
        """Writes ``b`` at ``offset``; the position is unchanged."""
        self._check_writable()
        self._size_hint = None
        return self._c.pwrite(self._fd, b, offset)

    def seek(self, pos, whence=os.SEEK_SET):
        self._check()
        if self._data is not None:
            base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: len(self._data)}.get(whence)
            if base is None or base + pos < 0:
                raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL))
            self._pos = base + pos
            return self._pos
        return self._c.lseek(self._fd, pos, whence)

    def tell(self):
        self._check()
        if self._data is not None:
            return self._pos
        return self._c.lseek(self._fd, 0, os.SEEK_CUR)

    def truncate(self, size=None):
        self._check_writable()
        if size is None:
            size = self.tell()
        self._size_hint = None
        self._c.ftruncate(self._fd, size)
        return size

    def fsync(self):
        """Makes everything written durable on the daemons (os.fsync)."""
        self._check()
        if self._data is None:
            self._c.fsync(self._fd)

    def stat(self):
        """os.fstat of this file."""
        self._check()
        if self._data is not None:
            return _stat_result(self._stat)  # the record that came with the open
        return _stat_result(self._c.fstat(self._fd))


class DirEntry:
    """What scandir yields: os.DirEntry's interface. The kind comes with the listing;
    ``stat()`` costs one RPC (cached)."""

    __slots__ = ("name", "path", "_kind", "_client", "_stat", "_lstat")

    def __init__(self, client, dirpath, name, kind):
        self.name = name
        self.path = dirpath + name if dirpath.endswith("/") else dirpath + "/" + name
        self._kind = kind
        self._client = client
        self._stat = None
        self._lstat = None

    def is_dir(self, *, follow_symlinks=True):
        if self._kind == "l" and follow_symlinks:
            return self._follow(_stat.S_ISDIR)
        return self._kind == "d"

    def is_file(self, *, follow_symlinks=True):
        if self._kind == "l" and follow_symlinks:
            return self._follow(_stat.S_ISREG)
        return self._kind == "f"

    def is_symlink(self):
        return self._kind == "l"

    def is_junction(self):
        return False

    def _follow(self, test):
        try:
            return test(self.stat().st_mode)
        except FileNotFoundError:
            return False

    def stat(self, *, follow_symlinks=True):
        if follow_symlinks and self._kind == "l":
            if self._stat is None:
                self._stat = self._client.stat(self.path)
            return self._stat
        if self._lstat is None:
            self._lstat = self._client.lstat(self.path)
        return self._lstat

    def inode(self):
        return self.stat(follow_symlinks=False).st_ino

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<gustfs.DirEntry {self.name!r}>"


class _ScandirIterator:
    """os.scandir's iterator: iterable, and a context manager."""

    def __init__(self, entries):
        self._it = iter(entries)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def close(self):
        self._it = iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client:
    """A connection to one GustFS instance: the hosts file ``hosts_file``, or that
    of ``$GUST_HOSTS_FILE`` when None. Connects eagerly (one RPC), so a stopped
    instance fails here. Safe to share between threads; survives os.fork."""

    def __init__(self, hosts_file=None):
        self._c = _native.Client(None if hosts_file is None else _fspath(hosts_file))

    def __repr__(self):
        return f"<gustfs.Client hosts_file={self.hosts_file!r} daemons={self.daemon_count}>"

    @property
    def hosts_file(self):
        return self._c.hosts_file

    @property
    def node_cache_hits(self):
        """Lookups this process answered from its node's cache (what another
        process of the node read: docs/DESIGN.md, "The node cache")."""
        return self._c.node_cache_hits

    @property
    def mountdir(self):
        return self._c.mountdir

    @property
    def daemon_count(self):
        return self._c.daemon_count

    @property
    def chunk_size(self):
        return self._c.chunk_size

    def internal_path(self, path):
        """The normalized path inside GustFS that ``path`` names."""
        return self._c.internal_path(_fspath(path))

    # -- files ----------------------------------------------------------------------

    def open(self, file, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        """io.open for GustFS: returns a FileIO (``buffering=0``), a BufferedReader,
        BufferedWriter or BufferedRandom, or a TextIOWrapper around one. The default
        buffer is one chunk of the instance (its st_blksize), as io.open uses
        st_blksize."""
        kind, plus, binary = _parse_mode(mode)
        if binary and encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        if binary and errors is not None:
            raise ValueError("binary mode doesn't take an errors argument")
        if binary and newline is not None:
            raise ValueError("binary mode doesn't take a newline argument")
        if binary and buffering == 1:
            buffering = -1
        raw = FileIO(file, kind + ("+" if plus else ""), client=self)
        try:
            line_buffering = buffering == 1
            if buffering < 0 or buffering == 1:
                # A file whose data came with the open reads from memory: a chunk-sized
                # buffer (512 KiB, allocated per open) would only cost an allocation.
                buffering = io.DEFAULT_BUFFER_SIZE if raw._data is not None else self._c.chunk_size
            if buffering == 0:
                if binary:
                    return raw
                raise ValueError("can't have unbuffered text I/O")
            if plus:
                buf = io.BufferedRandom(raw, buffering)
            elif kind == "r":
                buf = io.BufferedReader(raw, buffering)
            else:
                buf = io.BufferedWriter(raw, buffering)
            if binary:
                return buf
            text = io.TextIOWrapper(buf, encoding, errors, newline, line_buffering)
            text.mode = mode
            return text
        except BaseException:
            raw.close()
            raise

    def read_bytes(self, path):
        """The whole content of a file, as pathlib's read_bytes: one native call, one
        request for a small (inline) file, whose data lands straight in the result."""
        return self._c.read_file(_fspath(path))

    def read_many(self, paths, *, on_error="raise"):
        """The whole contents of many files, as a list of bytes in the order of
        ``paths``: what a data loader fetches for a batch of samples. The requests
        for all of them are sent before any reply is read, so the daemons serve the
        batch in parallel and a small (inline) file costs one request whose wake-ups
        are shared with the rest of the batch.

        ``on_error``: ``"raise"`` raises the OSError of the first file (in order)
        that could not be read; ``"return"`` puts each such error in that file's
        place in the list instead; ``"omit"`` leaves those files out.
        """
        if on_error not in ("raise", "return", "omit"):
            raise ValueError(f"on_error must be 'raise', 'return' or 'omit', not {on_error!r}")
        got = self._c.read_files([_fspath(p) for p in paths])
        if on_error == "return":
            return got
        if on_error == "omit":
            return [g for g in got if not isinstance(g, BaseException)]
        for g in got:
            if isinstance(g, BaseException):
                raise g
        return got

    def write_bytes(self, path, data):
        """Creates or replaces a file with ``data`` (any bytes-like object)."""
        # One native call: a small file is one request and is kept with its record.
        return self._c.write_file(_fspath(path), data)

    # -- metadata -------------------------------------------------------------------

    def stat(self, path, *, follow_symlinks=True):
        return _stat_result(self._c.stat(_fspath(path), follow_symlinks))

    def lstat(self, path):
        return _stat_result(self._c.stat(_fspath(path), False))

    def exists(self, path):
        try:
            self._c.stat(_fspath(path), True)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _mode_or_none(self, path, follow=True):
        try:
            return self._c.stat(_fspath(path), follow)[0]
        except (FileNotFoundError, NotADirectoryError):
            return None

    def isdir(self, path):
        m = self._mode_or_none(path)
        return m is not None and _stat.S_ISDIR(m)

    def isfile(self, path):
        m = self._mode_or_none(path)
        return m is not None and _stat.S_ISREG(m)

    def islink(self, path):
        m = self._mode_or_none(path, False)
        return m is not None and _stat.S_ISLNK(m)

    def getsize(self, path):
        return self._c.stat(_fspath(path), True)[6]

    def access(self, path, mode):
        return self._c.access(_fspath(path), mode)

    def chmod(self, path, mode):
        self._c.chmod(_fspath(path), mode)

    # Extended attributes, as the os module's (``user.*`` names; os.XATTR_CREATE and
    # os.XATTR_REPLACE as flags).

    def getxattr(self, path, attribute, *, follow_symlinks=True):
        return self._c.getxattr(_fspath(path), _fspath(attribute), follow_symlinks)

    def setxattr(self, path, attribute, value, flags=0, *, follow_symlinks=True):
        self._c.setxattr(_fspath(path), _fspath(attribute), bytes(value), flags, follow_symlinks)

    def listxattr(self, path="/", *, follow_symlinks=True):
        return self._c.listxattr(_fspath(path), follow_symlinks)

    def removexattr(self, path, attribute, *, follow_symlinks=True):
        self._c.setxattr(_fspath(path), _fspath(attribute), None, 0, follow_symlinks)

    def utime(self, path, times=None, *, ns=None, follow_symlinks=True):
        """os.utime: ``times`` (atime, mtime) in seconds or ``ns`` in nanoseconds;
        neither sets both to now."""
        if times is not None and ns is not None:
            raise ValueError("utime: you may specify either 'times' or 'ns' but not both")
        if ns is None:
            if times is None:
                import time

                now = time.time_ns()
                ns = (now, now)
            else:
                ns = tuple(int(t * 1_000_000_000) for t in times)
        self._c.utime(_fspath(path), ns[0], ns[1], follow_symlinks)

    def statvfs(self, path="/"):
        """os.statvfs of the instance (every path of it gives the same answer)."""
        return os.statvfs_result(self._c.statvfs() + (_native.GUST_DEV,))

    # -- directories ------------------------------------------------------------------

    def listdir(self, path="/"):
        """Names in a directory, in no particular order (the listing merges daemons)."""
        return self._c.listdir(_fspath(path))

    def scandir(self, path="/"):
        p = _fspath(path)
        return _ScandirIterator([DirEntry(self, p, n, k) for n, k in self._c.scandir(p)])

    def walk(self, top, topdown=True, onerror=None, followlinks=False):
        """os.walk for GustFS (same arguments, same order of results)."""
        stack = [_fspath(top)]
        while stack:
            top = stack.pop()
            if isinstance(top, tuple):  # bottom-up: the directory's own result, after its children
                yield top
                continue
            try:
                entries = self._c.scandir(top)
            except OSError as e:
                if onerror is not None:
                    onerror(e)
                continue
            dirs, files, walk_into, links = [], [], [], set()
            for name, kind in entries:
                path = top + name if top.endswith("/") else top + "/" + name
                is_dir = kind == "d"
                if kind == "l":
                    links.add(name)
                    m = self._mode_or_none(path)
                    is_dir = m is not None and _stat.S_ISDIR(m)
                (dirs if is_dir else files).append(name)
                if is_dir and not topdown and (followlinks or kind != "l"):
                    walk_into.append(path)
            if topdown:
                yield top, dirs, files
                # `dirs` as the caller left it, as os.walk does.
                for name in reversed(dirs):
                    if followlinks or name not in links:
                        stack.append(top + name if top.endswith("/") else top + "/" + name)
            else:
                stack.append((top, dirs, files))
                stack.extend(reversed(walk_into))

    def mkdir(self, path, mode=0o777):
        self._c.mkdir(_fspath(path), mode)

    def makedirs(self, name, mode=0o777, exist_ok=False):
        """os.makedirs: creates missing parents (with mode 0o777, as os does)."""
        p = self._c.internal_path(_fspath(name))
        head = p.rsplit("/", 1)[0] or "/"
        if head != "/" and not self.exists(head):
            try:
                self.makedirs(head, exist_ok=exist_ok)
            except FileExistsError:
                pass  # made meanwhile by someone else
        try:
            self._c.mkdir(p, mode)
        except OSError:
            if not exist_ok or not self.isdir(p):
                raise

    def rmdir(self, path):
        self._c.rmdir(_fspath(path))

    def remove(self, path):
        self._c.unlink(_fspath(path))

    unlink = remove

    def rename(self, src, dst):
        """POSIX rename: an existing ``dst`` is replaced (as os.rename on Linux)."""
        self._c.rename(_fspath(src), _fspath(dst))

    replace = rename

    def link(self, src, dst):
        """A hard link: ``dst`` becomes another name of the file at ``src`` (os.link;
        a symlink at ``src`` is not followed, and cannot be linked: EPERM)."""
        self._c.link(_fspath(src), _fspath(dst))

    def rmtree(self, path, ignore_errors=False, onerror=None):
        """shutil.rmtree for GustFS. ``onerror(function, path, excinfo)`` as in
        shutil; a symlink to a directory is an error, as there."""
        import sys

        def fail(fn, p):
            if ignore_errors:
                return
            if onerror is None:
                raise
            onerror(fn, p, sys.exc_info())

        top = _fspath(path)
        try:
            if self.islink(top):
                raise OSError("Cannot call rmtree on a symbolic link")
        except OSError:
            fail(self.islink, top)
            return
        # Depth first, without recursion: (path, listed?) pairs.
        stack = [(top, False)]
        while stack:
            p, listed = stack.pop()
            if listed:
                try:
                    self._c.rmdir(p)
                except OSError:
                    fail(self.rmdir, p)
                continue
            try:
                entries = self._c.scandir(p)
            except OSError:
                fail(self.scandir, p)
                continue
            stack.append((p, True))
            for name, kind in entries:
                child = p + name if p.endswith("/") else p + "/" + name
                if kind == "d":
                    stack.append((child, False))
                else:
                    try:
                        self._c.unlink(child)
                    except OSError:
                        fail(self.remove, child)

    def truncate(self, path, length):
        self._c.truncate(_fspath(path), length)

    def symlink(self, src, dst):
        """Creates ``dst`` pointing at ``src`` (os.symlink's order)."""
        self._c.symlink(_fspath(src), _fspath(dst))

    def readlink(self, path):
        return self._c.readlink(_fspath(path))


# ----- one client per process, for the module-level functions ----------------------------

_default = None
_default_lock = threading.Lock()


def client():
    """The process's client, connected on first use to ``$GUST_HOSTS_FILE``."""
    global _default
    c = _default
    if c is None:
        with _default_lock:
            if _default is None:
                _default = Client()
            c = _default
    return c


_client = client


def connect(hosts_file=None):
    """Sets the process's client to the instance of ``hosts_file`` and returns it."""
    global _default
    c = Client(hosts_file)
    with _default_lock:
        _default = c
    return c


def _module_function(name):
    method = getattr(Client, name)

    def f(*args, **kwargs):
        return method(client(), *args, **kwargs)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = method.__doc__
    return f


for _name in (
    "open stat lstat exists isdir isfile islink getsize listdir scandir walk mkdir makedirs rmdir remove "
    "unlink rename replace link rmtree truncate symlink readlink chmod getxattr setxattr listxattr removexattr utime access "
    "statvfs read_bytes read_many write_bytes"
).split():
    globals()[_name] = _module_function(_name)
del _name
