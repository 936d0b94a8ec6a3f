"""MPI-IO semantics on a file system (issue 32): what ROMIO and OMPIO ask of it
beyond plain reads and writes. Usage: mpirun -n N python3 mpiio_semantics.py DIR
[--no-atomic] (OMPIO takes no locks in atomic mode on a file system it does not
know as NFS, so its atomic mode is ROMIO's to test).
Every check runs on every rank; rank 0 prints one line per check, "ok NAME" or
"FAILED NAME: why", then "K of M checks ok".

The checks:
* strided-collective: N-to-1 strided writes through a file view (write_all),
  read back through another rank's view (reads across write boundaries), and the
  file's size as every rank sees it.
* strided-independent: the same with independent writes: ROMIO's data sieving
  reads, changes and writes back whole regions under byte-range locks (fcntl),
  so a lock that does not exclude another process loses other ranks' bytes.
* shared-pointer: write_shared from every rank, then write_ordered: every
  record lands once, the ordered ones in rank order after them (ROMIO keeps the
  pointer in a hidden file under an fcntl lock; OMPIO's lockedfile too).
* set-size: set_size grows (zeros) and shrinks the file, get_size agrees on
  every rank.
* preallocate: the size is at least what was asked and the bytes written before
  are kept.
* atomic: with set_atomicity(True) every rank writes the same region at once;
  afterwards the region is one rank's bytes whole, never a mix. The region
  (ATOMIC_BYTES, default 3 MiB from 300 KiB on) spans several chunks, whose
  writes go to several daemons in parallel: without the byte-range locks ROMIO
  takes in atomic mode, ranks' chunks interleave.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
base = sys.argv[1]
if r == 0:
    os.makedirs(base, exist_ok=True)
comm.Barrier()
AMODE = MPI.MODE_CREATE | MPI.MODE_RDWR
results = []


def check(name, fn):
    """Runs fn on every rank; a check passes when it passes on every rank."""
    path = os.path.join(base, name)
    try:
        why = fn(path)
    except Exception as e:  # an MPI error is a failed check, not a stopped run
        why = f"{type(e).__name__}: {e}"
    whys = comm.allgather(why)
    bad = [f"rank {i}: {w}" for i, w in enumerate(whys) if w]
    results.append((name, "; ".join(bad)))


def strided(path, collective):
    block, rounds = 8, 64
    f = MPI.File.Open(comm, path, AMODE)
    etype = MPI.BYTE
    ftype = MPI.BYTE.Create_vector(rounds, block, block * n).Commit()
    f.Set_view(r * block, etype, ftype)
    mine = np.array([(r * 31 + i) % 251 for i in range(block * rounds)], dtype=np.uint8)
    if collective:
        f.Write_at_all(0, mine)
    else:
        f.Write_at(0, mine)
    f.Sync()
    comm.Barrier()
    f.Sync()
    size = f.Get_size()
    # Read the next rank's blocks through its view, and the whole file plainly.
    other = (r + 1) % n
    f.Set_view(other * block, etype, ftype)
    got = np.empty(block * rounds, dtype=np.uint8)
    f.Read_at_all(0, got) if collective else f.Read_at(0, got)
    f.Set_view(0, MPI.BYTE, MPI.BYTE)
    whole = np.empty(block * rounds * n, dtype=np.uint8)
    f.Read_at_all(0, whole)
    f.Close()
    ftype.Free()
    want_other = np.array([(other * 31 + i) % 251 for i in range(block * rounds)], dtype=np.uint8)
    if size != block * rounds * n:
        return f"size {size}, want {block * rounds * n}"
    if not (got == want_other).all():
        return f"rank {other}'s blocks read back wrong through its view"
    for k in range(n):
        sel = whole.reshape(rounds, n, block)[:, k, :].reshape(-1)
        if not (sel == np.array([(k * 31 + i) % 251 for i in range(block * rounds)], dtype=np.uint8)).all():
            return f"rank {k}'s blocks wrong in the whole file"
    return None


def shared_pointer(path):
    rec = 64
    f = MPI.File.Open(comm, path, AMODE)
    mine = bytearray([r + 1]) * rec
    f.Write_shared(mine)
    comm.Barrier()
    f.Write_ordered(bytearray([100 + r]) * rec)
    f.Sync()
    comm.Barrier()
    size = f.Get_size()
    data = bytearray(size)
    f.Read_at(0, data)
    f.Close()
    if size != 2 * n * rec:
        return f"size {size}, want {2 * n * rec}"
    first = sorted(data[i * rec] for i in range(n))
    if first != list(range(1, n + 1)):
        return f"shared records {first}, want each rank once"
    for i in range(2 * n):
        if len(set(data[i * rec:(i + 1) * rec])) != 1:
            return f"record {i} is mixed"
    ordered = [data[(n + i) * rec] for i in range(n)]
    if ordered != [100 + i for i in range(n)]:
        return f"ordered records {ordered}, want rank order"
    return None


def set_size(path):
    f = MPI.File.Open(comm, path, AMODE)
    if r == 0:
        f.Write_at(0, bytearray(b"x") * 1000)
    comm.Barrier()
    # Set_size is collective but need not wait for the others: the barriers keep
    # one rank's next size from another's look at the last.
    f.Set_size(5000)
    comm.Barrier()
    s1 = f.Get_size()
    tail = bytearray(4000)
    f.Read_at(1000, tail)
    comm.Barrier()
    f.Set_size(300)
    comm.Barrier()
    s2 = f.Get_size()
    head = bytearray(300)
    f.Read_at(0, head)
    f.Close()
    if s1 != 5000 or s2 != 300:
        return f"sizes {s1} and {s2}, want 5000 and 300"
    if any(tail):
        return "the grown part is not zeros"
    if head != bytearray(b"x") * 300:
        return "the kept part changed"
    return None


def preallocate(path):
    f = MPI.File.Open(comm, path, AMODE)
    if r == 0:
        f.Write_at(0, bytearray(b"p") * 100)
    comm.Barrier()
    f.Preallocate(1 << 20)
    size = f.Get_size()
    head = bytearray(100)
    f.Read_at(0, head)
    f.Close()
    if size < (1 << 20):
        return f"size {size} after preallocating 1 MiB"
    if head != bytearray(b"p") * 100:
        return "bytes written before preallocate changed"
    return None


def atomic(path):
    region = int(os.environ.get("ATOMIC_BYTES", 3 << 20))
    at = 300 * 1024
    f = MPI.File.Open(comm, path, AMODE)
    f.Set_atomicity(os.environ.get("ATOMIC", "1") == "1")
    if f.Get_atomicity() != (os.environ.get("ATOMIC", "1") == "1"):
        return "atomic mode refused"
    for round_ in range(8):
        comm.Barrier()
        f.Write_at(at, bytearray([r + 1 + 16 * round_]) * region)
        comm.Barrier()
        got = bytearray(region)
        f.Read_at(at, got)
        if len(set(got)) != 1:
            return f"round {round_}: the region mixes {sorted(set(got))}"
    f.Close()
    return None


check("strided-collective", lambda p: strided(p, True))
check("strided-independent", lambda p: strided(p, False))
check("shared-pointer", shared_pointer)
check("set-size", set_size)
check("preallocate", preallocate)
if "--no-atomic" not in sys.argv:
    check("atomic", atomic)

if r == 0:
    for name, why in results:
        print(f"ok {name}" if not why else f"FAILED {name}: {why}", flush=True)
    ok = sum(1 for _, why in results if not why)
    print(f"{ok} of {len(results)} checks ok", flush=True)
