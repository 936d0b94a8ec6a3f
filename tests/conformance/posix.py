#!/usr/bin/env python3
"""POSIX conformance probe: runs the same operations in a directory and prints one
line per check, "name<TAB>result", so that a test can run it on a local directory
and on GustFS (FUSE mount, or under the preload library) and compare line by line.

Usage: posix.py DIR MODE [GROUP,...]
  DIR   an empty directory to work in (created if missing)
  MODE  "shared": also checks that need other users (fork + setresuid, as root) and
        node-local FIFO/socket traffic; "single": one user, no fork (preload).
  GROUP owners, perms, times, errors, special, links, xattrs (default: all that MODE
        allows)

Results are errno names ("EACCES"), "ok", or normalized attributes (octal modes,
uid:gid, whether a time moved), never raw times or inode numbers, so that two file
systems that behave alike print the same lines.
"""
import errno
import os
import socket
import stat
import sys
import time

ROOT = sys.argv[1]
MODE = sys.argv[2]
GROUPS = [g for g in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if g]
SHARED = MODE == "shared"
os.makedirs(ROOT, exist_ok=True)
os.umask(0o022)

# Users that need not exist in /etc/passwd: ids are enough for the kernel.
A = (1001, 1001, [1001, 2000])
B = (1002, 1002, [1002])
C = (1003, 1003, [2000])


def J(*p):
    return os.path.join(ROOT, *p)


def rec(name, value):
    print(f"{name}\t{value}", flush=True)


def code(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def res(fn, *a, **k):
    """ "ok" or the errno name of a call."""
    try:
        fn(*a, **k)
        return "ok"
    except OSError as e:
        return code(e)


def as_user(who, fn):
    """Runs fn in a child process with the given uid, gid and groups; returns its
    result (a string), or the errno name of the OSError it raised."""
    uid, gid, groups = who
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            out = fn()
            out = "ok" if out is None else str(out)
        except OSError as e:
            out = code(e)
        except BaseException as e:  # report, never hang the parent
            out = "exception " + repr(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data.decode()


def owner(p, follow=False):
    st = os.stat(p) if follow else os.lstat(p)
    return f"{st.st_uid}:{st.st_gid}"


def perm(p, follow=False):
    st = os.stat(p) if follow else os.lstat(p)
    return oct(stat.S_IMODE(st.st_mode))


def kind(p):
    m = os.lstat(p).st_mode
    for name, test in [("file", stat.S_ISREG), ("dir", stat.S_ISDIR), ("symlink", stat.S_ISLNK),
                       ("fifo", stat.S_ISFIFO), ("socket", stat.S_ISSOCK), ("chr", stat.S_ISCHR)]:
        if test(m):
            return name
    return "?"


def write(p, data=b"x", mode=0o644):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.write(fd, data)
    os.close(fd)


def append(p, data):
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        return os.read(fd, 100).decode()
    finally:
        os.close(fd)


def tick():
    # Longer than the coarse clock's step (a jiffy), so a change shows as a move.
    time.sleep(0.02)


def owners():
    d = J("owners")
    os.mkdir(d)
    os.chmod(d, 0o777)
    f = J("owners", "r")
    write(f)
    rec("owners.create_by_root", owner(f))
    # Root changes owner and group; set-id bits of a file go, a directory keeps them.
    os.chmod(f, 0o6755)
    ct = os.lstat(f).st_ctime_ns
    tick()
    rec("owners.root_chown", res(os.chown, f, 1001, 1001))
    rec("owners.after_chown", owner(f) + " " + perm(f))
    rec("owners.chown_moves_ctime", os.lstat(f).st_ctime_ns > ct)
    g = J("owners", "sgid_nx")
    write(g)
    os.chmod(g, 0o2644)
    os.chown(g, -1, 2000)
    rec("owners.sgid_without_gx_kept", perm(g) + " " + owner(g))
    h = J("owners", "noop")
    write(h)
    os.chmod(h, 0o4755)
    os.chown(h, -1, -1)
    rec("owners.chown_noop_clears_suid", perm(h))
    if SHARED:
        # A write or truncate by a caller without CAP_FSETID drops S_ISUID, and
        # S_ISGID when the group may execute; root's writes keep them.
        for name, mode in [("w_ug", 0o6777), ("w_g_nx", 0o2767)]:
            p = J("owners", name)
            write(p)
            os.chmod(p, mode)
            rec(f"owners.other_write_{name}", (as_user(B, lambda: append(p, b"b")), perm(p)))
        t = J("owners", "t_u")
        write(t)
        os.chmod(t, 0o4777)
        rec("owners.other_truncate", (as_user(B, lambda: os.truncate(t, 0)), perm(t)))
        os.chmod(t, 0o6777)
        with open(t, "ab") as fh:
            fh.write(b"root")
        rec("owners.root_write_keeps", perm(t))
    sd = J("owners", "sd")
    os.mkdir(sd)
    os.chmod(sd, 0o3775)
    os.chown(sd, 1001, 2000)
    rec("owners.dir_keeps_set_id", owner(sd) + " " + perm(sd))
    # A directory with S_ISGID hands its group to new entries, and the bit to new
    # subdirectories.
    sg = J("owners", "sgdir")
    os.mkdir(sg)
    os.chown(sg, -1, 2000)
    os.chmod(sg, 0o2775)
    write(J("owners", "sgdir", "f"))
    os.mkdir(J("owners", "sgdir", "sub"), 0o755)
    rec("owners.setgid_dir_file", owner(J("owners", "sgdir", "f")))
    rec("owners.setgid_dir_subdir", owner(J("owners", "sgdir", "sub")) + " " + perm(J("owners", "sgdir", "sub")))
    # The owner of a read-only file cannot write it (root could).
    def owner_writes_readonly():
        write(J("owners", "ro_own"), b"x", 0o444)
        fd = os.open(J("owners", "ro_own"), os.O_WRONLY)
        os.close(fd)
    if SHARED:
        rec("owners.owner_writes_readonly", as_user(A, owner_writes_readonly))
    # lchown changes the link, chown its target; fchown the open file.
    os.symlink("r", J("owners", "rl"))
    os.lchown(J("owners", "rl"), 1003, 1003)
    rec("owners.lchown", owner(J("owners", "rl")) + " target " + owner(f))
    os.chown(J("owners", "rl"), 1002, 1002)
    rec("owners.chown_follows", owner(J("owners", "rl")) + " target " + owner(f))
    fd = os.open(f, os.O_RDONLY)
    os.fchown(fd, 0, 0)
    os.close(fd)
    rec("owners.fchown", owner(f))
    if not SHARED:
        return
    # Another user creates: the records are its own.
    def make():
        write(J("owners", "a"))
        os.mkdir(J("owners", "ad"))
        os.symlink("a", J("owners", "al"))
        os.mkfifo(J("owners", "ap"))
    rec("owners.create_as_a", as_user(A, make))
    for n in ["a", "ad", "al", "ap"]:
        rec(f"owners.owner_of_{n}", owner(J("owners", n)))
    a = J("owners", "a")
    rec("owners.a_chown_to_b", as_user(A, lambda: os.chown(a, 1002, -1)))
    rec("owners.a_chown_to_self", as_user(A, lambda: os.chown(a, 1001, -1)))
    rec("owners.a_chgrp_member", as_user(A, lambda: os.chown(a, -1, 2000)))
    rec("owners.a_chgrp_nonmember", as_user(A, lambda: os.chown(a, -1, 3000)))
    rec("owners.b_chgrp_not_owner", as_user(B, lambda: os.chown(a, -1, 1002)))
    rec("owners.b_chown_noop_not_owner", as_user(B, lambda: os.chown(a, 1001, -1)))
    rec("owners.a_lchown_link", as_user(A, lambda: os.lchown(J("owners", "al"), -1, 1001)))
    rec("owners.after_a", owner(a) + " link " + owner(J("owners", "al")))

    def a_fchown():
        fd = os.open(a, os.O_RDONLY)
        try:
            os.fchown(fd, -1, 1001)
        finally:
            os.close(fd)
    rec("owners.a_fchown", as_user(A, a_fchown))
    rec("owners.after_a_fchown", owner(a))
    # A write by someone else than the owner clears the set-id bits.
    w = J("owners", "w")
    write(w)
    os.chown(w, 1001, 1001)
    os.chmod(w, 0o6777)

    def b_write():
        fd = os.open(w, os.O_WRONLY)
        os.write(fd, b"y")
        os.close(fd)
    rec("owners.b_write", as_user(B, b_write))
    rec("owners.after_b_write", perm(w))


def perms():
    d = J("perms")
    os.mkdir(d)
    os.chmod(d, 0o777)

    def setup():
        write(J("perms", "secret"), b"data", 0o600)
        os.mkdir(J("perms", "private"), 0o700)
        write(J("perms", "private", "f"))
        os.mkdir(J("perms", "ro"), 0o755)
        write(J("perms", "grp"), b"group", 0o640)
        os.chown(J("perms", "grp"), -1, 2000)
    rec("perms.setup_as_a", as_user(A, setup))
    s = J("perms", "secret")
    rec("perms.owner_reads", as_user(A, lambda: read(s)))
    rec("perms.other_reads", as_user(B, lambda: read(s)))
    rec("perms.other_writes", as_user(B, lambda: os.close(os.open(s, os.O_WRONLY))))
    rec("perms.other_access_r", as_user(B, lambda: os.access(s, os.R_OK)))
    rec("perms.other_lists_private", as_user(B, lambda: os.listdir(J("perms", "private"))))
    rec("perms.other_stats_in_private", as_user(B, lambda: os.stat(J("perms", "private", "f"))))
    rec("perms.other_creates_in_ro", as_user(B, lambda: write(J("perms", "ro", "x"))))
    rec("perms.other_chmods", as_user(B, lambda: os.chmod(s, 0o666)))
    rec("perms.other_sets_times", as_user(B, lambda: os.utime(s, (1, 1))))
    rec("perms.other_touches", as_user(B, lambda: os.utime(s, None)))
    rec("perms.group_member_reads", as_user(C, lambda: read(J("perms", "grp"))))
    rec("perms.group_outsider_reads", as_user(B, lambda: read(J("perms", "grp"))))
    rec("perms.root_reads", read(s))
    os.chmod(d, 0o1777)
    rec("perms.sticky_other_unlinks", as_user(B, lambda: os.unlink(s)))
    rec("perms.sticky_other_renames", as_user(B, lambda: os.rename(s, J("perms", "stolen"))))
    rec("perms.sticky_owner_unlinks", as_user(A, lambda: os.unlink(s)))


def times():
    d = J("times")
    os.mkdir(d)
    f = J("times", "f")
    write(f)
    st0 = os.lstat(f)
    tick()
    fd = os.open(f, os.O_WRONLY)
    os.write(fd, b"more")
    os.close(fd)
    st1 = os.lstat(f)
    rec("times.write_moves_mtime", st1.st_mtime_ns > st0.st_mtime_ns)
    rec("times.write_moves_ctime", st1.st_ctime_ns > st0.st_ctime_ns)
    tick()
    os.chmod(f, 0o600)
    st2 = os.lstat(f)
    rec("times.chmod_moves_ctime_only", (st2.st_ctime_ns > st1.st_ctime_ns, st2.st_mtime_ns == st1.st_mtime_ns))
    tick()
    os.truncate(f, 1)
    st3 = os.lstat(f)
    rec("times.truncate_moves_both", (st3.st_mtime_ns > st2.st_mtime_ns, st3.st_ctime_ns > st2.st_ctime_ns))
    os.utime(f, ns=(1_000_000_123, 2_000_000_456))
    st4 = os.lstat(f)
    rec("times.utime_ns", (st4.st_atime_ns, st4.st_mtime_ns, st4.st_ctime_ns > st3.st_ctime_ns))
    # touch -a / -m set one time and pass UTIME_OMIT for the other.
    os.system(f"touch -a -d @5.000000007 '{f}'")
    st5 = os.lstat(f)
    rec("times.utime_omit_mtime", (st5.st_atime_ns, st5.st_mtime_ns))
    os.system(f"touch -m -d @6.000000008 '{f}'")
    st6 = os.lstat(f)
    rec("times.utime_omit_atime", (st6.st_atime_ns, st6.st_mtime_ns))
    t0 = time.time_ns()
    os.utime(f)  # UTIME_NOW for both
    st7 = os.lstat(f)
    rec("times.utime_now", abs(st7.st_mtime_ns - t0) < 2e9 and st7.st_atime_ns == st7.st_mtime_ns)
    os.utime(f, ns=(-1_500_000_000, 3))
    rec("times.before_1970", (os.lstat(f).st_atime_ns, os.lstat(f).st_mtime_ns))
    tick()
    c8 = os.lstat(f).st_ctime_ns
    tick()
    os.rename(f, J("times", "g"))
    rec("times.rename_moves_ctime", os.lstat(J("times", "g")).st_ctime_ns > c8)
    # The parent directory's times, for each call that changes its entries.
    p = J("times", "p")
    os.mkdir(p)
    steps = [
        ("create", lambda: write(J("times", "p", "x"))),
        ("mkdir", lambda: os.mkdir(J("times", "p", "sub"))),
        ("rename_in", lambda: os.rename(J("times", "g"), J("times", "p", "g"))),
        ("rename_within", lambda: os.rename(J("times", "p", "g"), J("times", "p", "h"))),
        ("unlink", lambda: os.unlink(J("times", "p", "x"))),
        ("rmdir", lambda: os.rmdir(J("times", "p", "sub"))),
        ("symlink", lambda: os.symlink("h", J("times", "p", "l"))),
    ]
    for name, step in steps:
        before = os.lstat(p)
        tick()
        step()
        after = os.lstat(p)
        rec(f"times.parent_on_{name}", (after.st_mtime_ns > before.st_mtime_ns, after.st_ctime_ns > before.st_ctime_ns))
    # Link counts: a file 1, a directory 2 + its subdirectories.
    n = J("times", "n")
    os.mkdir(n)
    for s in ["a", "b", "c"]:
        os.mkdir(J("times", "n", s))
    write(J("times", "n", "f"))
    rec("times.nlink_file", os.lstat(J("times", "n", "f")).st_nlink)
    rec("times.nlink_empty_dir", os.lstat(J("times", "n", "a")).st_nlink)
    rec("times.nlink_dir_with_3_subdirs", os.lstat(n).st_nlink)


def errors():
    e = J("err")
    os.mkdir(e)
    write(J("err", "f"))
    os.mkdir(J("err", "d"))
    os.mkdir(J("err", "d", "sub"))
    os.mkdir(J("err", "e"))
    os.symlink("l2", J("err", "l1"))
    os.symlink("l1", J("err", "l2"))
    long = "n" * 256
    checks = [
        ("enametoolong_open", lambda: os.open(J("err", long), os.O_CREAT | os.O_WRONLY)),
        ("enametoolong_mkdir", lambda: os.mkdir(J("err", long))),
        ("enametoolong_stat", lambda: os.stat(J("err", long))),
        ("enametoolong_below_missing", lambda: os.mkdir(J("err", "nope", long))),
        ("enotdir_stat", lambda: os.stat(J("err", "f", "x"))),
        ("enotdir_create", lambda: os.open(J("err", "f", "x"), os.O_CREAT | os.O_WRONLY)),
        ("enotdir_mkdir", lambda: os.mkdir(J("err", "f", "x"))),
        ("enotdir_trailing_slash", lambda: os.open(J("err", "f") + "/", os.O_RDONLY)),
        ("enotdir_rmdir_file", lambda: os.rmdir(J("err", "f"))),
        ("enotdir_rename_dir_over_file", lambda: os.rename(J("err", "e"), J("err", "f"))),
        ("eloop_open", lambda: os.open(J("err", "l1"), os.O_RDONLY)),
        ("eloop_stat", lambda: os.stat(J("err", "l1"))),
        ("eloop_nofollow", lambda: os.open(J("err", "l1"), os.O_RDONLY | os.O_NOFOLLOW)),
        ("eexist_mkdir_dir", lambda: os.mkdir(J("err", "d"))),
        ("eexist_mkdir_file", lambda: os.mkdir(J("err", "f"))),
        ("eexist_mkdir_dangling_link", lambda: os.mkdir(J("err", "l1"))),
        ("eexist_excl", lambda: os.open(J("err", "f"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
        ("eexist_symlink", lambda: os.symlink("x", J("err", "f"))),
        ("eisdir_open_write", lambda: os.open(J("err", "d"), os.O_WRONLY)),
        ("eisdir_unlink_dir", lambda: os.unlink(J("err", "d"))),
        ("eisdir_rename_file_over_dir", lambda: os.rename(J("err", "f"), J("err", "d"))),
        ("enotempty_rmdir", lambda: os.rmdir(J("err", "d"))),
        ("enotempty_rename_over", lambda: os.rename(J("err", "e"), J("err", "d"))),
        ("einval_rename_into_self", lambda: os.rename(J("err", "d"), J("err", "d", "sub", "x"))),
        ("einval_rename_into_child", lambda: os.rename(J("err", "d"), J("err", "d", "new"))),
        ("exdev_rename_out", lambda: os.rename(J("err", "f"), "/dev/shm/gust-conformance-exdev")),
        ("enoent_rmdir", lambda: os.rmdir(J("err", "nope"))),
        ("enoent_unlink", lambda: os.unlink(J("err", "nope"))),
        ("enoent_rename", lambda: os.rename(J("err", "nope"), J("err", "x"))),
        ("enoent_create_below_missing", lambda: os.open(J("err", "nope", "x"), os.O_CREAT | os.O_WRONLY)),
        ("enoent_empty_path", lambda: os.stat("")),
    ]
    for name, fn in checks:
        rec(f"errors.{name}", res(fn))
    if os.path.exists("/dev/shm/gust-conformance-exdev"):
        os.unlink("/dev/shm/gust-conformance-exdev")


def special():
    d = J("special")
    os.mkdir(d)
    fifo = J("special", "fifo")
    rec("special.mkfifo", res(os.mkfifo, fifo, 0o640))
    rec("special.fifo_stat", kind(fifo) + " " + perm(fifo))
    rec("special.mknod_fifo", res(os.mknod, J("special", "nodefifo"), stat.S_IFIFO | 0o600))
    rec("special.mknod_sock", res(os.mknod, J("special", "nodesock"), stat.S_IFSOCK | 0o600))
    rec("special.mknod_sock_stat", kind(J("special", "nodesock")))
    rec("special.mknod_reg", res(os.mknod, J("special", "nodereg"), stat.S_IFREG | 0o600))
    rec("special.mknod_reg_stat", kind(J("special", "nodereg")))
    rec("special.mknod_chr", res(os.mknod, J("special", "chr"), stat.S_IFCHR | 0o600, os.makedev(1, 3)))
    if os.path.lexists(J("special", "chr")):
        st = os.lstat(J("special", "chr"))
        rec("special.chr_stat", (stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), st.st_size))
        os.unlink(J("special", "chr"))
    rec("special.mknod_blk", res(os.mknod, J("special", "blk"), stat.S_IFBLK | 0o600, os.makedev(7, 300)))
    if os.path.lexists(J("special", "blk")):
        st = os.lstat(J("special", "blk"))
        rec("special.blk_stat", (stat.S_ISBLK(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)))
        os.rename(J("special", "blk"), J("special", "blk2"))
        rec("special.blk_link", res(os.link, J("special", "blk2"), J("special", "blk3")))
        rec("special.blk_nlink", os.lstat(J("special", "blk2")).st_nlink)
        for n in ("blk2", "blk3"):
            if os.path.lexists(J("special", n)):
                os.unlink(J("special", n))
    rec("special.listing", sorted(os.listdir(d)))
    rec("special.listing_types", sorted((e.name, e.is_file(), e.is_dir(), e.is_symlink()) for e in os.scandir(d)))
    rec("special.open_fifo_nonblock", res(lambda: os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))))
    sock = J("special", "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rec("special.bind", res(srv.bind, sock))
    if SHARED:
        rec("special.sock_stat", kind(sock))
        # Traffic through both, node-locally: the kernel serves it.
        srv.listen(1)
        pid = os.fork()
        if pid == 0:
            try:
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.connect(sock)
                c.sendall(b"ping")
                c.close()
                fd = os.open(fifo, os.O_WRONLY)
                os.write(fd, b"through the fifo")
                os.close(fd)
            finally:
                os._exit(0)
        conn, _ = srv.accept()
        rec("special.socket_traffic", conn.recv(10).decode())
        conn.close()
        rec("special.fifo_traffic", read(fifo))
        os.waitpid(pid, 0)
        os.rename(sock, J("special", "sock2"))
        rec("special.rename_sock", kind(J("special", "sock2")))
        rec("special.unlink_sock", res(os.unlink, J("special", "sock2")))
    srv.close()
    if os.path.lexists(sock):
        os.unlink(sock)
    os.rename(fifo, J("special", "fifo2"))
    rec("special.rename_fifo", kind(J("special", "fifo2")) + " " + perm(J("special", "fifo2")))
    for n in ["fifo2", "nodefifo", "nodesock", "nodereg"]:
        rec(f"special.unlink_{n}", res(os.unlink, J("special", n)))
    rec("special.listing_after", sorted(os.listdir(d)))


def links():
    d = J("links")
    os.mkdir(d)
    write(J("links", "f"))
    rec("links.link", res(os.link, J("links", "f"), J("links", "g")))
    rec("links.linkat_follow", res(os.link, J("links", "f"), J("links", "h"), follow_symlinks=True))
    rec("links.nlink", os.lstat(J("links", "f")).st_nlink)
    f, g, h = J("links", "f"), J("links", "g"), J("links", "h")
    rec("links.same_ino", os.lstat(f).st_ino == os.lstat(g).st_ino == os.lstat(h).st_ino)
    # Data, size and attributes are the file's, whichever name changes them.
    with open(g, "ab") as fh:
        fh.write(b"more" * 3000)
    rec("links.content_shared", (read(f) == read(h), os.lstat(h).st_size))
    os.chmod(h, 0o640)
    os.truncate(g, 5)
    rec("links.attrs_shared", (oct(os.lstat(f).st_mode & 0o777), os.lstat(f).st_size))
    before = os.lstat(f).st_ctime_ns
    os.unlink(f)
    rec("links.unlink_one", (os.lstat(g).st_nlink, read(g), os.lstat(g).st_ctime_ns >= before))
    # Two names of one file: rename does nothing.
    os.rename(g, h)
    rec("links.rename_same_file", (os.path.exists(g), os.lstat(h).st_nlink))
    write(J("links", "other"), b"other")
    os.rename(J("links", "other"), g)
    rec("links.rename_over_a_name", (read(g), os.lstat(h).st_nlink, read(h)))
    rec("links.dir", res(os.link, d, J("links", "dl")))
    rec("links.exists", res(os.link, h, g))
    rec("links.missing", res(os.link, J("links", "nothing"), J("links", "n2")))
    os.symlink("h", J("links", "s"))
    # link(2) of a symlink links the symlink itself on Linux.
    rec("links.of_symlink", res(os.link, J("links", "s"), J("links", "sl")))
    for n in ("g", "h", "s", "sl"):
        if os.path.lexists(J("links", n)):
            os.unlink(J("links", n))
    rec("links.all_gone", sorted(os.listdir(d)))


def xattrs():
    d = J("xattrs")
    os.mkdir(d)
    f = J("xattrs", "f")
    write(f)
    rec("xattrs.none", os.listxattr(f))
    ct = os.lstat(f).st_ctime_ns
    tick()
    rec("xattrs.set", res(os.setxattr, f, "user.a", b"1"))
    rec("xattrs.set_moves_ctime", os.lstat(f).st_ctime_ns > ct)
    os.setxattr(f, "user.b", b"\x00bin\xff")
    rec("xattrs.get", (os.getxattr(f, "user.a"), os.getxattr(f, "user.b")))
    rec("xattrs.list", sorted(os.listxattr(f)))
    rec("xattrs.get_missing", res(os.getxattr, f, "user.nope"))
    rec("xattrs.create_existing", res(os.setxattr, f, "user.a", b"2", os.XATTR_CREATE))
    rec("xattrs.replace_missing", res(os.setxattr, f, "user.c", b"2", os.XATTR_REPLACE))
    rec("xattrs.replace", (res(os.setxattr, f, "user.a", b"22", os.XATTR_REPLACE), os.getxattr(f, "user.a")))
    rec("xattrs.empty_value", (res(os.setxattr, f, "user.e", b""), os.getxattr(f, "user.e")))
    rec("xattrs.remove", (res(os.removexattr, f, "user.e"), res(os.removexattr, f, "user.e")))
    rec("xattrs.long_name", res(os.setxattr, f, "user." + "n" * 251, b"x"))
    rec("xattrs.missing_file", res(os.getxattr, J("xattrs", "nothing"), "user.a"))
    # By descriptor, and through the names and moves of a file.
    fd = os.open(f, os.O_RDONLY)
    rec("xattrs.fd", (res(os.setxattr, fd, "user.fd", b"x"), os.getxattr(fd, "user.fd"), sorted(os.listxattr(fd))))
    os.close(fd)
    os.rename(f, J("xattrs", "g"))
    g = J("xattrs", "g")
    rec("xattrs.rename_keeps", sorted(os.listxattr(g)))
    os.mkdir(J("xattrs", "sub"))
    os.setxattr(J("xattrs", "sub"), "user.dir", b"d")
    os.rename(g, J("xattrs", "sub", "g"))
    os.rename(J("xattrs", "sub"), J("xattrs", "moved"))
    rec("xattrs.dir_rename_keeps", (os.getxattr(J("xattrs", "moved"), "user.dir"), os.getxattr(J("xattrs", "moved", "g"), "user.a")))
    g = J("xattrs", "moved", "g")
    os.link(g, J("xattrs", "h"))
    h = J("xattrs", "h")
    os.setxattr(h, "user.via_link", b"l")
    rec("xattrs.links_share", (sorted(os.listxattr(g)) == sorted(os.listxattr(h)), os.getxattr(g, "user.via_link")))
    os.unlink(g)
    rec("xattrs.last_name_keeps", os.getxattr(h, "user.via_link"))
    # Only files and directories carry user.* attributes.
    os.symlink("h", J("xattrs", "s"))
    s = J("xattrs", "s")
    rec("xattrs.symlink_followed", os.getxattr(s, "user.a"))
    rec("xattrs.symlink_itself", (res(os.setxattr, s, "user.a", b"x", follow_symlinks=False), os.listxattr(s, follow_symlinks=False)))
    os.mkfifo(J("xattrs", "p"))
    rec("xattrs.fifo", res(os.setxattr, J("xattrs", "p"), "user.a", b"x"))
    if SHARED:
        os.chmod(d, 0o777)
        os.chmod(h, 0o644)
        rec("xattrs.other_reads", as_user(B, lambda: os.getxattr(h, "user.a")))
        rec("xattrs.other_lists", as_user(B, lambda: sorted(os.listxattr(h))))
        rec("xattrs.other_sets", as_user(B, lambda: os.setxattr(h, "user.b", b"b")))
        os.chmod(h, 0o600)
        rec("xattrs.other_reads_private", as_user(B, lambda: os.getxattr(h, "user.a")))
        os.chmod(h, 0o666)
        os.chmod(d, 0o1777)
        rec("xattrs.other_sets_writable", as_user(B, lambda: os.setxattr(h, "user.b", b"b")))
        rec("xattrs.sticky_dir_other", as_user(B, lambda: os.setxattr(d, "user.b", b"b")))
    for n in ("h", "s", "p"):
        os.unlink(J("xattrs", n))
    os.rmdir(J("xattrs", "moved"))
    rec("xattrs.all_gone", sorted(os.listdir(d)))


ALL = {"owners": owners, "perms": perms, "times": times, "errors": errors, "special": special, "links": links,
       "xattrs": xattrs}
for g in GROUPS or [g for g in ALL if SHARED or g != "perms"]:
    ALL[g]()
