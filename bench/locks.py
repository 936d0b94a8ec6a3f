"""What a lock costs one process: N lock+unlock pairs of fcntl (lockf on byte i)
and of flock, and N open+close of a read-only descriptor, on PATH. Prints one JSON
line of microseconds per pair (per open+close). Run it under the LD_PRELOAD
library, on a FUSE mount, or on a local file system: bench/run_locks.sh."""
import fcntl, json, os, sys, time

path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
out = {}
t = time.perf_counter()
for i in range(n):
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, i)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, i)
out["fcntl_us"] = (time.perf_counter() - t) / n * 1e6
t = time.perf_counter()
for _ in range(n):
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_UN)
out["flock_us"] = (time.perf_counter() - t) / n * 1e6
os.close(fd)
t = time.perf_counter()
for _ in range(n):
    os.close(os.open(path, os.O_RDONLY))
out["open_close_ro_us"] = (time.perf_counter() - t) / n * 1e6
print(json.dumps({k: round(v, 1) for k, v in out.items()}))
