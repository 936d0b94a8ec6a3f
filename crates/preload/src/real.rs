//! The next definitions (libc's) of the functions this library interposes.
//!
//! Each is looked up once with `dlsym(RTLD_NEXT)` and cached in an atomic. Variadic C
//! functions (open, openat, fcntl, ioctl) are called with their optional argument
//! always present, which the x86-64 and AArch64 Linux calling conventions allow.

#![allow(non_snake_case, clippy::too_many_arguments)]

use libc::{c_char, c_int, c_uint, c_ulong, c_void, dirent64, mode_t, off64_t, off_t, size_t, ssize_t, DIR, FILE};
use std::sync::atomic::{AtomicUsize, Ordering};

#[cold]
fn missing(name: &str) -> ! {
    let msg = format!("gust-preload: libc has no {name}; aborting\n");
    // SAFETY: raw syscall write to stderr, no libc state involved.
    unsafe {
        libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
        libc::abort()
    }
}

macro_rules! real_fns {
    ($( fn $name:ident ( $($arg:ident : $t:ty),* ) -> $ret:ty; )*) => {
        $(
            #[inline]
            pub unsafe fn $name($($arg: $t),*) -> $ret {
                static P: AtomicUsize = AtomicUsize::new(0);
                let mut p = P.load(Ordering::Relaxed);
                if p == 0 {
                    p = libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr() as *const c_char) as usize;
                    if p == 0 {
                        missing(stringify!($name));
                    }
                    P.store(p, Ordering::Relaxed);
                }
                let f: unsafe extern "C" fn($($t),*) -> $ret = std::mem::transmute(p);
                f($($arg),*)
            }
        )*
    };
}

real_fns! {
    fn open(p: *const c_char, f: c_int, m: mode_t) -> c_int;
    fn open64(p: *const c_char, f: c_int, m: mode_t) -> c_int;
    fn openat(d: c_int, p: *const c_char, f: c_int, m: mode_t) -> c_int;
    fn openat64(d: c_int, p: *const c_char, f: c_int, m: mode_t) -> c_int;
    fn creat(p: *const c_char, m: mode_t) -> c_int;
    fn creat64(p: *const c_char, m: mode_t) -> c_int;
    fn __open_2(p: *const c_char, f: c_int) -> c_int;
    fn __open64_2(p: *const c_char, f: c_int) -> c_int;
    fn __openat_2(d: c_int, p: *const c_char, f: c_int) -> c_int;
    fn __openat64_2(d: c_int, p: *const c_char, f: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t;
    fn pread(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t;
    fn pread64(fd: c_int, b: *mut c_void, n: size_t, o: off64_t) -> ssize_t;
    fn pwrite(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t;
    fn pwrite64(fd: c_int, b: *const c_void, n: size_t, o: off64_t) -> ssize_t;
    fn readv(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t;
    fn preadv(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t;
    fn preadv64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t;
    fn pwritev(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t;
    fn pwritev64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t;
    fn lseek(fd: c_int, o: off_t, w: c_int) -> off_t;
    fn lseek64(fd: c_int, o: off64_t, w: c_int) -> off64_t;
    fn stat(p: *const c_char, b: *mut libc::stat) -> c_int;
    fn stat64(p: *const c_char, b: *mut libc::stat64) -> c_int;
    fn lstat(p: *const c_char, b: *mut libc::stat) -> c_int;
    fn lstat64(p: *const c_char, b: *mut libc::stat64) -> c_int;
    fn fstat(fd: c_int, b: *mut libc::stat) -> c_int;
    fn fstat64(fd: c_int, b: *mut libc::stat64) -> c_int;
    fn fstatat(d: c_int, p: *const c_char, b: *mut libc::stat, f: c_int) -> c_int;
    fn fstatat64(d: c_int, p: *const c_char, b: *mut libc::stat64, f: c_int) -> c_int;
    fn statx(d: c_int, p: *const c_char, f: c_int, m: c_uint, b: *mut libc::statx) -> c_int;
    fn access(p: *const c_char, m: c_int) -> c_int;
    fn faccessat(d: c_int, p: *const c_char, m: c_int, f: c_int) -> c_int;
    fn euidaccess(p: *const c_char, m: c_int) -> c_int;
    fn eaccess(p: *const c_char, m: c_int) -> c_int;
    fn mkdir(p: *const c_char, m: mode_t) -> c_int;
    fn mkdirat(d: c_int, p: *const c_char, m: mode_t) -> c_int;
    fn mknod(p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int;
    fn mknodat(d: c_int, p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int;
    fn mkfifo(p: *const c_char, m: mode_t) -> c_int;
    fn mkfifoat(d: c_int, p: *const c_char, m: mode_t) -> c_int;
    fn rmdir(p: *const c_char) -> c_int;
    fn unlink(p: *const c_char) -> c_int;
    fn unlinkat(d: c_int, p: *const c_char, f: c_int) -> c_int;
    fn rename(a: *const c_char, b: *const c_char) -> c_int;
    fn renameat(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> c_int;
    fn renameat2(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_uint) -> c_int;
    fn link(a: *const c_char, b: *const c_char) -> c_int;
    fn linkat(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_int) -> c_int;
    fn truncate(p: *const c_char, l: off_t) -> c_int;
    fn truncate64(p: *const c_char, l: off64_t) -> c_int;
    fn ftruncate(fd: c_int, l: off_t) -> c_int;
    fn ftruncate64(fd: c_int, l: off64_t) -> c_int;
    fn fsync(fd: c_int) -> c_int;
    fn aio_read(cb: *mut libc::aiocb) -> c_int;
    fn aio_read64(cb: *mut libc::aiocb) -> c_int;
    fn aio_write(cb: *mut libc::aiocb) -> c_int;
    fn aio_write64(cb: *mut libc::aiocb) -> c_int;
    fn aio_fsync(op: c_int, cb: *mut libc::aiocb) -> c_int;
    fn aio_error(cb: *const libc::aiocb) -> c_int;
    fn aio_return(cb: *mut libc::aiocb) -> ssize_t;
    fn aio_suspend(list: *const *const libc::aiocb, n: c_int, t: *const libc::timespec) -> c_int;
    fn aio_cancel(fd: c_int, cb: *mut libc::aiocb) -> c_int;
    fn lio_listio(mode: c_int, list: *const *mut libc::aiocb, n: c_int, sig: *mut libc::sigevent) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn socket(d: c_int, t: c_int, p: c_int) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf(fd: c_int, op: c_int, l: off_t) -> c_int;
    fn lockf64(fd: c_int, op: c_int, l: off64_t) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(a: c_int, b: c_int) -> c_int;
    fn dup3(a: c_int, b: c_int, f: c_int) -> c_int;
    fn chdir(p: *const c_char) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn getcwd(b: *mut c_char, n: size_t) -> *mut c_char;
    fn opendir(p: *const c_char) -> *mut DIR;
    fn fdopendir(fd: c_int) -> *mut DIR;
    fn readdir(d: *mut DIR) -> *mut libc::dirent;
    fn readdir64(d: *mut DIR) -> *mut dirent64;
    fn closedir(d: *mut DIR) -> c_int;
    fn dirfd(d: *mut DIR) -> c_int;
    fn rewinddir(d: *mut DIR) -> ();
    fn telldir(d: *mut DIR) -> libc::c_long;
    fn seekdir(d: *mut DIR, l: libc::c_long) -> ();
    fn getdents64(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fn readdir_r(d: *mut DIR, e: *mut libc::dirent, r: *mut *mut libc::dirent) -> c_int;
    fn readdir64_r(d: *mut DIR, e: *mut dirent64, r: *mut *mut dirent64) -> c_int;
    fn scandir(p: *const c_char, l: *mut *mut *mut libc::dirent, f: crate::dir::Filter, c: crate::dir::Compar) -> c_int;
    fn scandir64(p: *const c_char, l: *mut *mut *mut dirent64, f: crate::dir::Filter64, c: crate::dir::Compar64) -> c_int;
    fn freopen(p: *const c_char, m: *const c_char, s: *mut FILE) -> *mut FILE;
    fn freopen64(p: *const c_char, m: *const c_char, s: *mut FILE) -> *mut FILE;
    fn fopen(p: *const c_char, m: *const c_char) -> *mut FILE;
    fn fopen64(p: *const c_char, m: *const c_char) -> *mut FILE;
    fn fdopen(fd: c_int, m: *const c_char) -> *mut FILE;
    fn symlink(a: *const c_char, b: *const c_char) -> c_int;
    fn symlinkat(a: *const c_char, d: c_int, b: *const c_char) -> c_int;
    fn readlink(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t;
    fn readlinkat(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t;
    fn chmod(p: *const c_char, m: mode_t) -> c_int;
    fn fchmod(fd: c_int, m: mode_t) -> c_int;
    fn fchmodat(d: c_int, p: *const c_char, m: mode_t, f: c_int) -> c_int;
    fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn fchownat(d: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, f: c_int) -> c_int;
    fn utimensat(d: c_int, p: *const c_char, t: *const libc::timespec, f: c_int) -> c_int;
    fn futimens(fd: c_int, t: *const libc::timespec) -> c_int;
    fn utimes(p: *const c_char, t: *const libc::timeval) -> c_int;
    fn lutimes(p: *const c_char, t: *const libc::timeval) -> c_int;
    fn futimes(fd: c_int, t: *const libc::timeval) -> c_int;
    fn utime(p: *const c_char, t: *const libc::utimbuf) -> c_int;
    fn statfs(p: *const c_char, b: *mut libc::statfs) -> c_int;
    fn statfs64(p: *const c_char, b: *mut libc::statfs64) -> c_int;
    fn fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int;
    fn fstatfs64(fd: c_int, b: *mut libc::statfs64) -> c_int;
    fn statvfs(p: *const c_char, b: *mut libc::statvfs) -> c_int;
    fn statvfs64(p: *const c_char, b: *mut libc::statvfs64) -> c_int;
    fn fstatvfs(fd: c_int, b: *mut libc::statvfs) -> c_int;
    fn fstatvfs64(fd: c_int, b: *mut libc::statvfs64) -> c_int;
    fn posix_fadvise(fd: c_int, o: off_t, l: off_t, a: c_int) -> c_int;
    fn posix_fadvise64(fd: c_int, o: off64_t, l: off64_t, a: c_int) -> c_int;
    fn fallocate(fd: c_int, m: c_int, o: off_t, l: off_t) -> c_int;
    fn fallocate64(fd: c_int, m: c_int, o: off64_t, l: off64_t) -> c_int;
    fn posix_fallocate(fd: c_int, o: off_t, l: off_t) -> c_int;
    fn posix_fallocate64(fd: c_int, o: off64_t, l: off64_t) -> c_int;
    fn copy_file_range(a: c_int, oa: *mut off64_t, b: c_int, ob: *mut off64_t, n: size_t, f: c_uint) -> ssize_t;
    fn sendfile(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    fn sendfile64(o: c_int, i: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    fn realpath(p: *const c_char, r: *mut c_char) -> *mut c_char;
    fn canonicalize_file_name(p: *const c_char) -> *mut c_char;
    fn mmap(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void;
    fn mmap64(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off64_t) -> *mut c_void;
    fn isatty(fd: c_int) -> c_int;
    fn execve(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
    fn bind(fd: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int;
    fn connect(fd: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int;
    fn setuid(u: libc::uid_t) -> c_int;
    fn seteuid(u: libc::uid_t) -> c_int;
    fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int;
    fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int;
    fn setgid(g: libc::gid_t) -> c_int;
    fn setegid(g: libc::gid_t) -> c_int;
    fn setregid(r: libc::gid_t, e: libc::gid_t) -> c_int;
    fn setresgid(r: libc::gid_t, e: libc::gid_t, s: libc::gid_t) -> c_int;
    fn setgroups(n: size_t, g: *const libc::gid_t) -> c_int;
    fn execvpe(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
    fn getxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn lgetxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn listxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t;
    fn llistxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t;
    fn flistxattr(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t;
    fn setxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn lsetxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn fsetxattr(fd: c_int, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn removexattr(p: *const c_char, n: *const c_char) -> c_int;
    fn lremovexattr(p: *const c_char, n: *const c_char) -> c_int;
    fn fremovexattr(fd: c_int, n: *const c_char) -> c_int;
    fn mkstemp(t: *mut c_char) -> c_int;
    fn mkstemp64(t: *mut c_char) -> c_int;
    fn mkostemp(t: *mut c_char, f: c_int) -> c_int;
    fn mkostemp64(t: *mut c_char, f: c_int) -> c_int;
}
