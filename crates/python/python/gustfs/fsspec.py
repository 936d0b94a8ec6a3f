"""An fsspec file system for GustFS, registered as ``gust://``.

    import pandas as pd
    df = pd.read_csv("gust:///data/table.csv")          # fsspec finds gust:// itself
    df.to_parquet("gust:///data/table.parquet")

    import pyarrow.dataset as ds
    from gustfs.fsspec import GustFileSystem
    ds.dataset("/data/parquet", filesystem=GustFileSystem())

URLs are ``gust://PATH`` with PATH a path inside GustFS (``gust:///a/b`` and
``gust://a/b`` both name ``/a/b``). Storage options: ``hosts_file`` (default
``$GUST_HOSTS_FILE``); ``auto_mkdir`` (default True: writing a file creates its
missing parent directories, as on object stores). Files opened here are the module's own file objects
(gustfs.FileIO under io's buffers), so reads go straight into buffers, without
fsspec's caching layers: GustFS is a file system, not an object store.
"""

import datetime
import os
import stat as _stat

from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path

import gustfs

# Bytes per round of a copy inside GustFS (cp_file): large enough for few round
# trips, small enough to bound the memory a copy pins.
_COPY_BLOCK_BYTES = 16 << 20


def _kind(mode):
    if _stat.S_ISDIR(mode):
        return "directory"
    if _stat.S_ISREG(mode):
        return "file"
    return "other"


class GustFileSystem(AbstractFileSystem):
    """GustFS as an fsspec file system (protocol ``gust``)."""

    protocol = "gust"
    root_marker = "/"
    local_file = False

    def __init__(self, hosts_file=None, auto_mkdir=True, **kwargs):
        super().__init__(hosts_file=hosts_file, auto_mkdir=auto_mkdir, **kwargs)
        self.hosts_file = hosts_file
        # Writing a file creates its missing parent directories, as on object
        # stores, which is what pyarrow, dask and fsspec's copy functions expect.
        self.auto_mkdir = auto_mkdir
        # One client per process: the module's own unless another instance is named.
        self.client = gustfs.client() if hosts_file is None else gustfs.Client(hosts_file)

    @property
    def fsid(self):
        return "gust:" + self.client.hosts_file

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if path.startswith("gust://"):
            path = path[len("gust://") :]
        elif path.startswith("gust:"):
            path = path[len("gust:") :]
        path = path.rstrip("/")
        if not path.startswith("/"):
            path = "/" + path
        return path

    def unstrip_protocol(self, name):
        return "gust://" + self._strip_protocol(name)

    @classmethod
    def _parent(cls, path):
        path = cls._strip_protocol(path)
        return path.rsplit("/", 1)[0] or "/"

    def _isfilestore(self):
        return True

    # -- metadata ------------------------------------------------------------------

    def _info_from_stat(self, path, st, link_st=None):
        out = st if link_st is None else link_st
        info = {
            "name": path,
            "size": out.st_size,
            "type": _kind(out.st_mode),
            "created": out.st_ctime,
            "mtime": out.st_mtime,
            "islink": link_st is not None,
            "mode": out.st_mode,
            "uid": out.st_uid,
            "gid": out.st_gid,
            "ino": out.st_ino,
            "nlink": out.st_nlink,
        }
        return info

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.lstat(path)
        if _stat.S_ISLNK(st.st_mode):
            try:
                target_st = self.client.stat(path)
            except OSError:
                target_st = st
            info = self._info_from_stat(path, st, target_st)
            info["destination"] = self.client.readlink(path)
            return info
        return self._info_from_stat(path, st)

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.stat(path)
        if not _stat.S_ISDIR(st.st_mode):
            return [self.info(path)] if detail else [path]
        names = sorted(self.client.listdir(path))
        paths = [path + n if path.endswith("/") else path + "/" + n for n in names]
        if not detail:
            return paths
        out = []
        for p in paths:
            try:
                out.append(self.info(p))
            except FileNotFoundError:
                pass  # removed since the listing
        return out

    def exists(self, path, **kwargs):
        return self.client.exists(self._strip_protocol(path))

    def lexists(self, path, **kwargs):
        try:
            self.client.lstat(self._strip_protocol(path))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isdir(self, path):
        return self.client.isdir(self._strip_protocol(path))

    def isfile(self, path):
        return self.client.isfile(self._strip_protocol(path))

    def islink(self, path):
        return self.client.islink(self._strip_protocol(path))

    def size(self, path):
        return self.client.getsize(self._strip_protocol(path))

    def created(self, path):
        return datetime.datetime.fromtimestamp(self.info(path)["created"], tz=datetime.timezone.utc)

    def modified(self, path):
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    def chmod(self, path, mode):
        self.client.chmod(self._strip_protocol(path), mode)

    # -- namespace -----------------------------------------------------------------

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if create_parents:
            if self.client.exists(path):
                raise FileExistsError(path)
            self.client.makedirs(path, exist_ok=True)
        else:
            self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        self.client.remove(self._strip_protocol(path))

    _rm = rm_file

    def rm(self, path, recursive=False, maxdepth=None):
        if not isinstance(path, list):
            path = [path]
        for p in path:
            if maxdepth is not None or any(c in str(p) for c in "*?["):
                # Globs and depth limits: fsspec's own expansion, then one by one.
                for q in reversed(self.expand_path(p, recursive=recursive, maxdepth=maxdepth)):
                    if self.client.isdir(q) and not self.client.islink(q):
                        self.client.rmdir(q)
                    else:
                        self.client.remove(q)
                continue
            p = self._strip_protocol(p)
            if self.client.isdir(p) and not self.client.islink(p):
                if not recursive:
                    raise ValueError(f"{p} is a directory: set recursive=True to delete it")
                self.client.rmtree(p)
            else:
                self.client.remove(p)

    def mv(self, path1, path2, recursive=True, maxdepth=None, **kwargs):
        """Renames within GustFS: one record moves for a file (no data), every
        descendant's record for a directory. Lists and globs go through fsspec's
        copy-then-delete."""
        if isinstance(path1, list) or any(c in str(path1) for c in "*?["):
            return super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        if p1 == p2:
            return
        if self.client.isdir(p2) and not self.client.isdir(p1):
            # Like shutil.move (LocalFileSystem): a file moves into an existing directory.
            p2 = p2 + "/" + p1.rsplit("/", 1)[-1]
        self.client.rename(p1, p2)

    def cp_file(self, path1, path2, **kwargs):
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.client.isdir(p1):
            self.client.makedirs(p2, exist_ok=True)
            return
        if self.auto_mkdir:
            self.client.makedirs(self._parent(p2), exist_ok=True)
        buf = bytearray(min(self.client.getsize(p1), _COPY_BLOCK_BYTES) or 1)
        view = memoryview(buf)
        with self.client.open(p1, "rb", buffering=0) as src, self.client.open(p2, "wb", buffering=0) as dst:
            while True:
                n = src.readinto(view)
                if not n:
                    break
                dst.write(view[:n])

    def symlink(self, src, dst, **kwargs):
        self.client.symlink(self._strip_protocol(src), self._strip_protocol(dst))

    def touch(self, path, truncate=True, **kwargs):
        path = self._strip_protocol(path)
        if self.auto_mkdir:
            self.client.makedirs(self._parent(path), exist_ok=True)
        if truncate or not self.client.exists(path):
            self.client.open(path, "wb", buffering=0).close()
        else:
            self.client.utime(path)

    # -- data ------------------------------------------------------------------------

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if not autocommit:
            raise NotImplementedError("GustFS writes in place: fsspec transactions are not supported")
        path = self._strip_protocol(path)
        if self.auto_mkdir and any(c in mode for c in "wax"):
            self.client.makedirs(self._parent(path), exist_ok=True)
        buffering = block_size if isinstance(block_size, int) and block_size > 0 else -1
        return self.client.open(path, mode, buffering=buffering)

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.client.read_bytes(path)
        with self.client.open(path, "rb", buffering=0) as f:
            size = None
            if (start is not None and start < 0) or (end is not None and end < 0) or end is None:
                size = f.seek(0, os.SEEK_END)
            start = 0 if start is None else (max(0, size + start) if start < 0 else start)
            end = size if end is None else (max(0, size + end) if end < 0 else end)
            if end <= start:
                return b""
            return f.pread(end - start, start)

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        """fsspec's ``cat``: the contents of one path, or a dict of many. The files
        of a list are read with ``read_many`` (all requests sent before any reply
        is read), not one ``cat_file`` after another; byte ranges (``start``,
        ``end``) take fsspec's own way."""
        paths = self.expand_path(path, recursive=recursive)
        many = len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path)
        if not many:
            return self.cat_file(paths[0], **kwargs)
        if kwargs.get("start") is not None or kwargs.get("end") is not None:
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)
        out = {}
        for p, got in zip(paths, self.client.read_many(paths, on_error="return")):
            if isinstance(got, BaseException):
                if on_error == "raise":
                    raise got
                if on_error == "omit":
                    continue
            out[p] = got
        return out

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        path = self._strip_protocol(path)
        if self.auto_mkdir:
            self.client.makedirs(self._parent(path), exist_ok=True)
        with self.client.open(path, "xb" if mode == "create" else "wb", buffering=0) as f:
            f.write(value)

    def sign(self, path, expiration=100, **kwargs):
        raise NotImplementedError("GustFS has no URLs to sign")
