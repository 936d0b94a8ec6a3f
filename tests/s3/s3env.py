"""What the object store tests (tests/s3) and the object store bench
(bench/s3_stage.py) run: a real SeaweedFS (`weed server` with its S3 gateway, built
by scripts/seaweedfs.sh, path in $GUST_WEED) on loopback ports, a GustFS instance
(the `gust` binary of this build), boto3 as the independent S3 client, and a TCP
proxy in front of the store that can make it fail on cue."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import boto3
import botocore.config
import gustfs.testing

KEY = "GUSTTESTKEY"
SECRET = "gust-test-secret-" + uuid.uuid4().hex
REGION = "us-east-1"


def free_port_pair():
    """A loopback port p with p + 10000 free too (weed's gRPC port of each service)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free loopback port pair")


def wait_for(cond, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


class Instance(gustfs.testing.LocalInstance):
    """A GustFS instance of `daemons` daemons on this machine (`gust start --local`)."""

    def __init__(self, daemons, rootdir_parent=None, extra=()):
        super().__init__(daemons, extra, rootdir_parent=rootdir_parent, prefix="gust-s3-")


class Weed:
    """A SeaweedFS server (master, volume, filer, S3 gateway) with one identity,
    KEY and SECRET, its data under `parent` (a temporary directory by default), in
    volumes of `volume_mb` (small for tests; a 10 GiB benchmark wants larger ones, or
    the master cannot grow volumes as fast as uploads fill them: InternalError)."""

    def __init__(self, parent=None, volume_mb=64):
        self.volume_mb = volume_mb
        self.bin = os.environ.get("GUST_WEED")
        if not self.bin or not os.access(self.bin, os.X_OK):
            raise RuntimeError("no SeaweedFS binary: set GUST_WEED (scripts/seaweedfs.sh prints it)")
        self.dir = tempfile.mkdtemp(prefix="gust-weed-", dir=parent)
        os.makedirs(self.dir + "/data")
        os.makedirs(self.dir + "/log")
        with open(self.dir + "/s3.json", "w") as f:
            f.write(
                '{"identities":[{"name":"gust","credentials":[{"accessKey":"%s","secretKey":"%s"}],'
                '"actions":["Admin","Read","Write","List","Tagging"]}]}' % (KEY, SECRET)
            )
        self.ports = {}
        used = set()
        for name in ("master", "volume", "filer", "s3"):
            p = free_port_pair()
            while p in used:
                p = free_port_pair()
            used.add(p)
            self.ports[name] = p
        self.proc = None
        self.start()

    def start(self):
        p = self.ports
        self.proc = subprocess.Popen(
            [
                self.bin,
                "-logdir=" + self.dir + "/log",
                "server",
                "-dir=" + self.dir + "/data",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}",
                f"-volume.port={p['volume']}",
                "-filer",
                f"-filer.port={p['filer']}",
                "-s3",
                f"-s3.port={p['s3']}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-s3.config=" + self.dir + "/s3.json",
                f"-master.volumeSizeLimitMB={self.volume_mb}",
                "-volume.max=1000",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir + "/log/stderr", "ab"),
            start_new_session=True,
        )
        s3 = boto3_client(self.endpoint)

        def ready():
            # Up when an object can be written: the gateway answers listings
            # before the master has volumes to write to (InternalError meanwhile).
            assert self.proc.poll() is None, f"weed server exited: see {self.dir}/log"
            try:
                if not any(b["Name"] == "gust-ready" for b in s3.list_buckets().get("Buckets", [])):
                    s3.create_bucket(Bucket="gust-ready")
                s3.put_object(Bucket="gust-ready", Key="probe", Body=b"up")
                return True
            except Exception:
                return False

        wait_for(ready, "SeaweedFS's S3 gateway")

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.ports['s3']}"

    def kill(self):
        # weed may hang on SIGTERM: the process group is killed.
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)

    def stop(self):
        self.kill()
        # It writes its unix sockets to /tmp whatever the flags.
        for p in self.ports.values():
            for q in (p, p + 10000):
                for f in os.listdir("/tmp"):
                    if f.startswith("seaweedfs-") and f.endswith(f"-{q}.sock"):
                        try:
                            os.unlink("/tmp/" + f)
                        except OSError:
                            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def boto3_client(endpoint, pool=10):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
        config=botocore.config.Config(
            retries={"max_attempts": 10, "mode": "standard"}, connect_timeout=5, read_timeout=60, max_pool_connections=pool
        ),
    )


class Proxy:
    """A TCP proxy in front of the store. `on_request(method, path)` runs before a
    request is passed on; `go_away_after(n)` cuts every connection and refuses new
    ones once n requests have been passed (the store goes away mid-transfer)."""

    REQUEST = re.compile(rb"(GET|PUT|POST|HEAD|DELETE) (/\S*) HTTP/1\.1\r\n")

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.on_request = None
        self.budget = None
        self.passed = 0
        self.dead = threading.Event()
        self.lock = threading.Lock()
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def go_away_after(self, n):
        self.budget = n

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.dead.is_set():
                c.close()
                continue
            u = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.conns += [c, u]
            threading.Thread(target=self._up, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    def _up(self, c, u):
        while True:
            try:
                data = c.recv(1 << 16)
            except OSError:
                data = b""
            if not data or self.dead.is_set():
                break
            for m in self.REQUEST.finditer(data):
                with self.lock:
                    self.passed += 1
                    over = self.budget is not None and self.passed > self.budget
                if over:
                    self.kill_all()
                    return
                if self.on_request:
                    self.on_request(m.group(1).decode(), m.group(2).decode())
            try:
                u.sendall(data)
            except OSError:
                break
        self._close(c, u)

    def _pump(self, u, c):
        while True:
            try:
                data = u.recv(1 << 16)
            except OSError:
                data = b""
            if not data or self.dead.is_set():
                break
            try:
                c.sendall(data)
            except OSError:
                break
        self._close(c, u)

    def _close(self, *socks):
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def kill_all(self):
        self.dead.set()
        with self.lock:
            conns, self.conns = self.conns, []
        self._close(*conns)

    def close(self):
        self.kill_all()
        self.sock.close()


def events_of(weed):
    return f"seaweedfs://127.0.0.1:{weed.ports['filer'] + 10000}"


def entries(d):
    """{path below d: size} of every file under GustFS directory d."""
    out = {}
    for root, _, files in gustfs.walk(d):
        for f in files:
            p = f"{root}/{f}"
            out[p[len(d) + 1 :]] = gustfs.stat(p).st_size
    return out


def status(gust, name):
    r = gust("view", "status", name, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def follower(instance, weed, home, src, url):
    """`gust stage out --follow SRC URL --json` in the background (what cache mode's
    write-back runs), with the store's variables in its environment (never argv)
    and HOME an empty directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(home),
        GUST_HOSTS_FILE=instance.hosts_file,
        AWS_ENDPOINT_URL=weed.endpoint,
        AWS_ACCESS_KEY_ID=KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_REGION=REGION,
    )
    return subprocess.Popen(
        [instance.gust, "stage", "out", "--follow", src, url, "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def shell(gust, hosts_file):
    """A runner of `sh -c SCRIPT` through the preload library on the instance of
    `hosts_file` (`gust run`), returning the script's output; it must succeed."""

    def sh(script):
        r = gust("run", "--", "sh", "-c", script, env={"GUST_HOSTS_FILE": hosts_file})
        assert r.returncode == 0, r.stderr
        return r.stdout

    return sh
