# Usage (through the preload library): LD_PRELOAD=... GUST_HOSTS_FILE=... python3 bench/size_watch.py /gustfs/FILE 5000 WATCH(0|1)
# A writer writes N pieces of 8 KiB (pwrite at growing offsets) while, with WATCH=1, another
# process stats the file in a loop (docs/PERFORMANCE.md, size holds: what a watcher costs the
# writer); prints the writer's writes/s and how many stats the watcher made meanwhile.
import os, sys, time, multiprocessing as mp
path, n, watch = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def watcher(done, counts):
    k = 0
    while not done.is_set():
        os.stat(path)
        k += 1
    counts.put(k)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.pwrite(fd, b"x", 0)
done = mp.Event(); counts = mp.Queue()
p = mp.Process(target=watcher, args=(done, counts)) if watch else None
if p: p.start(); time.sleep(0.3)
t = time.time()
buf = b"y" * 8192
for i in range(n):
    os.pwrite(fd, buf, i * 8192)
dt = time.time() - t
done.set()
stats = counts.get() if p else 0
if p: p.join()
os.close(fd)
print(f"watch={int(watch)} writes/s {n/dt:,.0f} stats during {stats}")
