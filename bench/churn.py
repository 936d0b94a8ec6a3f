"""Rewrites files of its own (/churn: 2,000 files of 50-250 KiB, random bytes) as
fast as it can for SECONDS, so that memtables fill, flush and are freed and tables
compact while other processes read: bench/soak_by_reference.sh.

    churn.py SECONDS
"""
import gustfs, random, sys, time
t_end = time.time() + float(sys.argv[1])
rng = random.Random(7)
gustfs.makedirs("/churn", exist_ok=True)
n = 0
while time.time() < t_end:
    p = f"/churn/f{rng.randrange(2000)}"
    with gustfs.open(p, "wb") as f:
        f.write(rng.randbytes(rng.randrange(50_000, 250_000)))
    n += 1
print("churn: rewrote", n, "files", file=sys.stderr)
