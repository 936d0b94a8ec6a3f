"""Parallel HDF5 through MPI-IO (h5py with driver="mpio", Debian's
python3-h5py-mpi): every rank writes one row of a dataset, then reads its row back.
Usage: mpirun -n N python3 h5py_mpio.py FILE. Rank 0 prints "K of N ranks ok" (one
line: the ranks' own output may interleave in mpirun's forwarding)."""
import sys

import h5py
import numpy as np
from mpi4py import MPI

path = sys.argv[1]
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
with h5py.File(path, "w", driver="mpio", comm=comm) as f:
    d = f.create_dataset("x", (n, 1024), dtype="i4")
    d[r] = np.arange(1024, dtype="i4") + r
comm.Barrier()
with h5py.File(path, "r", driver="mpio", comm=comm) as f:
    got = f["x"][r]
good = bool((got == np.arange(1024) + r).all())
if not good:
    print(f"rank {r}: wrong row", file=sys.stderr, flush=True)
oks = comm.gather(good, root=0)
if r == 0:
    print(f"{sum(oks)} of {n} ranks ok", flush=True)
