# h5py (serial, HDF5 file locking on, its default) writes a dataset, holds the file
# open for writing while a forked process opens it too, and reads it back: run by
# tests/tests/posix_conformance.rs on a local directory and on GustFS, outputs compared.
# Debian's python3-h5py is for /usr/bin/python3.
import h5py, numpy as np, os, sys, time
p = sys.argv[1]
with h5py.File(p, 'w') as f:
    f['d'] = np.arange(1000)
f = h5py.File(p, 'a')          # holds HDF5's exclusive file lock
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        h5py.File(p, 'r+')
        os.write(w, b'opened')
    except OSError as e:
        os.write(w, b'locked' if 'lock' in str(e).lower() else str(e).encode()[:60])
    os._exit(0)
print(os.read(r, 100).decode())
os.waitpid(pid, 0)
f.close()
with h5py.File(p, 'r+') as g:
    print(g['d'][999])
