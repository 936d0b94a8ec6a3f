"""A GustFS instance on this machine for tests, notebooks and benchmarks:
``gust start --local N`` in a fresh root directory, stopped (and removed) by
``stop()`` or at the end of a ``with`` block.

    with gustfs.testing.LocalInstance(2) as inst:
        gustfs.connect(inst.hosts_file)
        ...

The ``gust`` binary is ``gust=``, else ``$GUST``, else the one this tree builds
(``$CARGO_TARGET_DIR/release/gust``, by default under ``~/.cache/gustfs-target``),
else ``gust`` on ``PATH``. Root directories go to /dev/shm where it exists.
"""

import os
import shutil
import subprocess
import tempfile


def gust_binary(gust=None):
    """The ``gust`` binary to run (see the module's doc); FileNotFoundError if none."""
    candidates = [gust, os.environ.get("GUST")]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gustfs-target"))
    candidates.append(os.path.join(target, "release", "gust"))
    candidates.append(shutil.which("gust"))
    for g in candidates:
        if g and os.access(g, os.X_OK):
            return g
    raise FileNotFoundError("no gust binary: set $GUST, or build the workspace (cargo build --release)")


class LocalInstance:
    """``daemons`` daemons on this machine; ``extra`` are more ``gust start`` options."""

    def __init__(self, daemons=3, extra=(), rootdir_parent=None, gust=None, prefix="gust-"):
        self.gust = gust_binary(gust)
        parent = rootdir_parent or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.rootdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
        self.hosts_file = os.path.join(self.rootdir, "gust.hosts")
        try:
            subprocess.run(
                [self.gust, "start", "--local", str(daemons), "--rootdir", self.rootdir, "--mountdir", "/gustfs", *extra],
                check=True,
                capture_output=True,
            )
        except subprocess.CalledProcessError as e:
            shutil.rmtree(self.rootdir, ignore_errors=True)
            raise RuntimeError(f"gust start failed: {e.stderr.decode(errors='replace').strip()}") from None

    def stop(self):
        subprocess.run([self.gust, "stop", "--hosts-file", self.hosts_file], capture_output=True)
        shutil.rmtree(self.rootdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
