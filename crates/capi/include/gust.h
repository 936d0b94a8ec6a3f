/*
 * gust.h - the C API of GustFS (libgust.so).
 *
 * Direct calls into the GustFS client core, no interception: link with -lgust,
 * call gust_mount() once, then use the returned handle from any number of threads.
 *
 *     cc prog.c -I crates/capi/include -L $CARGO_TARGET_DIR/release -lgust
 *     GUST_HOSTS_FILE=... LD_LIBRARY_PATH=$CARGO_TARGET_DIR/release ./a.out
 *
 * Conventions that hold for every function below:
 *
 *  - Errors: a function returns -1 (or NULL) and sets errno; gust_last_error()
 *    then describes the failure (function, path or descriptor, cause, and for EIO
 *    the daemon that failed). A successful call leaves errno unchanged.
 *  - errno values are those of the POSIX call of the same name (ENOENT, EEXIST,
 *    EISDIR, ENOTDIR, ENOTEMPTY, EBADF, ...). EIO means a daemon failed or did not
 *    answer within GUST_RPC_TIMEOUT_MS.
 *  - Every pointer argument is checked: NULL fails with EINVAL, never a crash.
 *    (A pointer to freed or too-small memory cannot be detected.)
 *  - An internal error of the library is reported as EIO; it never aborts or
 *    unwinds through the caller.
 *  - Paths are absolute. A path under the instance's mount directory (usually
 *    "/gustfs/a/b") and the file-system path ("/a/b") name the same file; any
 *    other absolute path is taken as a file-system path. A relative path is
 *    EINVAL, an empty one ENOENT, one that is not UTF-8 EINVAL.
 *  - mode arguments are used as given: no umask is applied.
 *  - Thread safety: every function may be called concurrently on one gust_fs.
 *    A descriptor's file offset is shared by the threads using it, as in POSIX.
 *    A gust_dir must be used by one thread at a time.
 *  - Descriptors are GustFS descriptors, not kernel ones: pass them only to the
 *    gust_* functions of the gust_fs that issued them.
 *
 * What is relaxed compared with POSIX (eventually consistent directory
 * listings, one owner for every file, locks that end with the process's
 * connection): docs/SEMANTICS.md.
 */
#ifndef GUST_H
#define GUST_H

#include <dirent.h>     /* DT_REG, DT_DIR, DT_LNK */
#include <fcntl.h>      /* O_* flags, mode_t */
#include <stddef.h>
#include <sys/stat.h>   /* struct stat, UTIME_NOW, UTIME_OMIT */
#include <sys/statvfs.h>
#include <sys/types.h>  /* off_t, ssize_t */
#include <time.h>       /* struct timespec */

#ifdef __cplusplus
extern "C" {
#endif

/* A connection to one GustFS instance (opaque). */
typedef struct gust_fs gust_fs;

/* An open directory stream (opaque). */
typedef struct gust_dir gust_dir;

/* One directory entry, as returned by gust_readdir(). */
struct gust_dirent {
    char name[256];      /* NUL-terminated entry name (at most 255 bytes) */
    unsigned char type;  /* DT_REG, DT_DIR or DT_LNK */
};

/* ----- instance ------------------------------------------------------------- */

/*
 * gust_mount - connect to the instance described by a hosts file.
 *
 * hosts_file: path of the instance's hosts file (as `gust env` prints it); NULL
 * means $GUST_HOSTS_FILE. Reads the hosts file and the instance secret next to
 * it, and makes one request to check that the instance answers; connections to
 * the other daemons open on first use.
 *
 * Returns a handle to pass to every other function, or NULL with errno set:
 * ENOENT/EACCES/ENOTDIR (the hosts file cannot be read), EISDIR (it is a
 * directory), EINVAL (hosts_file is NULL and GUST_HOSTS_FILE is unset, or the
 * file is malformed or lists no daemon), EIO (a daemon did not answer).
 * gust_last_error() names the hosts file and, for EIO, the daemon.
 */
gust_fs *gust_mount(const char *hosts_file);

/*
 * gust_unmount - release a handle and every descriptor still open on it.
 *
 * Data written is already on the daemons; nothing is flushed here (use
 * gust_fsync() for durability against a node crash). No other thread may use
 * fs during or after the call. An open gust_dir stays usable until it is
 * closed. NULL is ignored. Never fails.
 */
void gust_unmount(gust_fs *fs);

/*
 * gust_last_error - describe the calling thread's last failure.
 *
 * Returns a NUL-terminated message such as
 * "gust_open: /a/b: No such file or directory (os error 2)", or "" if no gust_*
 * call has failed on this thread. Never NULL. The string stays valid until the
 * next failing gust_* call on the same thread. Successful calls do not clear it.
 */
const char *gust_last_error(void);

/* ----- descriptors ---------------------------------------------------------- */

/*
 * gust_open - open (and with O_CREAT create) a file or directory.
 *
 * flags: O_RDONLY/O_WRONLY/O_RDWR with O_CREAT, O_EXCL, O_TRUNC, O_APPEND,
 * O_DIRECTORY, O_NOFOLLOW. mode: permission bits of a new file. Symlinks are
 * followed (up to 40 hops).
 *
 * Returns a GustFS descriptor >= 0, or -1 with errno: ENOENT (no such file, or
 * no such parent with the instance's --check-parent), EEXIST (O_CREAT|O_EXCL on
 * an existing name), EISDIR (a directory opened for writing), ENOTDIR
 * (O_DIRECTORY on a non-directory), ELOOP, EMFILE (65536 descriptors open),
 * EINVAL, EIO.
 */
int gust_open(gust_fs *fs, const char *path, int flags, mode_t mode);

/*
 * gust_close - release a descriptor.
 *
 * Returns 0, or -1 with errno EBADF (fd is not open) or EINVAL (fs is NULL).
 */
int gust_close(gust_fs *fs, int fd);

/*
 * gust_dup - a new descriptor sharing the open file (offset, flags) of fd.
 *
 * Returns the new descriptor, or -1 with errno EBADF or EINVAL.
 */
int gust_dup(gust_fs *fs, int fd);

/*
 * gust_read - read up to count bytes at the descriptor's offset and advance it.
 *
 * A read spanning many chunks goes to all daemons holding them in parallel.
 * Returns the bytes read (0 at end of file; fewer than count only at end of
 * file), or -1 with errno: EBADF (fd not open, or opened O_WRONLY), EISDIR
 * (a directory), EINVAL (buf NULL, count > SSIZE_MAX), ESTALE (the path now
 * names another file), EIO.
 */
ssize_t gust_read(gust_fs *fs, int fd, void *buf, size_t count);

/*
 * gust_write - write count bytes at the descriptor's offset (at the end with
 * O_APPEND) and advance it.
 *
 * Returns count, or -1 with errno: EBADF (fd not open, or opened O_RDONLY),
 * EISDIR, EFBIG (the end would pass 2^63-1), EINVAL (buf NULL, count >
 * SSIZE_MAX), ENOSPC (a daemon's disk is full), EIO. Overlapping writes from
 * different processes are not ordered (docs/SEMANTICS.md).
 */
ssize_t gust_write(gust_fs *fs, int fd, const void *buf, size_t count);

/*
 * gust_pread - read up to count bytes at offset; the descriptor's offset is
 * unchanged. Holes read as zeros.
 *
 * Returns the bytes read (0 at or past end of file), or -1 with errno as for
 * gust_read(), and EINVAL for a negative offset.
 */
ssize_t gust_pread(gust_fs *fs, int fd, void *buf, size_t count, off_t offset);

/*
 * gust_pwrite - write count bytes at offset; the descriptor's offset is
 * unchanged. With O_APPEND the data goes to the end, as on Linux.
 *
 * Returns count, or -1 with errno as for gust_write(), and EINVAL for a
 * negative offset.
 */
ssize_t gust_pwrite(gust_fs *fs, int fd, const void *buf, size_t count, off_t offset);

/*
 * gust_lseek - set the descriptor's offset.
 *
 * whence: SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE (the whole file
 * counts as data). Seeking past the end is allowed; a later write leaves a hole.
 * Returns the new offset, or -1 with errno: EBADF, EINVAL (bad whence or a
 * negative result), ENXIO (SEEK_DATA/SEEK_HOLE at or past the end), EOVERFLOW,
 * EIO.
 */
off_t gust_lseek(gust_fs *fs, int fd, off_t offset, int whence);

/*
 * gust_fsync - make the file's data and metadata durable on every daemon
 * holding them (an acknowledged write already survives a daemon crash; this
 * makes it survive a node crash).
 *
 * Returns 0, or -1 with errno EBADF, EINVAL or EIO.
 */
int gust_fsync(gust_fs *fs, int fd);

/*
 * gust_flock - flock(2) on a GustFS descriptor: operation LOCK_SH, LOCK_EX or
 * LOCK_UN, with LOCK_NB not to wait. The lock belongs to the open file (shared
 * by gust_dup) and is kept by the file's metadata daemon, so it holds between
 * processes on every node (docs/SEMANTICS.md, "File locks").
 *
 * Returns 0, or -1 with errno: EWOULDBLOCK (LOCK_NB and another owner holds a
 * conflicting lock), EINTR (a signal handler ran while waiting), EBADF, EINVAL,
 * ENOLCK (no room, or the daemon cannot be reached for locks), EIO.
 */
int gust_flock(gust_fs *fs, int fd, int operation);

/*
 * gust_lock - fcntl(2)'s record locks on a GustFS descriptor: cmd F_GETLK,
 * F_SETLK, F_SETLKW (owner: this process; all its locks on the file end when it
 * closes any descriptor of the file) or F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
 * (owner: the open file; l_pid must be 0), with struct flock as fcntl takes it.
 *
 * Returns 0 (F_GETLK: *lock describes a conflicting lock, or l_type is
 * F_UNLCK), or -1 with errno: EAGAIN (F_SETLK and a conflicting lock),
 * EDEADLK (F_SETLKW would deadlock), EINTR, EBADF (also a read lock through a
 * descriptor not open for reading, a write lock through one not open for
 * writing), EINVAL (lock NULL, a bad type, whence or range), EOVERFLOW, ENOLCK,
 * EIO.
 */
int gust_lock(gust_fs *fs, int fd, int cmd, struct flock *lock);

/*
 * gust_ftruncate - set the size of an open file; data past length is dropped,
 * growth reads as zeros.
 *
 * Returns 0, or -1 with errno: EBADF (fd not open), EINVAL (fd opened read-only,
 * negative length, fs NULL), EISDIR, EFBIG, EIO.
 */
int gust_ftruncate(gust_fs *fs, int fd, off_t length);

/* ----- attributes ----------------------------------------------------------- */

/*
 * gust_stat - attributes of path, following symlinks.
 *
 * Fills *buf: st_mode (type and permission bits), st_size, st_ino (stable for
 * the file's life, kept across rename), st_nlink, st_blksize (the chunk size),
 * st_blocks (512-byte units), st_atim/st_mtim/st_ctim, st_uid/st_gid (the
 * creator's effective ids, changed by chown); st_dev is the same for every file.
 * Returns 0, or -1 with errno ENOENT, ELOOP, EINVAL (NULL argument), EIO.
 */
int gust_stat(gust_fs *fs, const char *path, struct stat *buf);

/*
 * gust_lstat - as gust_stat(), but a symlink is described itself (S_IFLNK,
 * st_size = length of the target).
 *
 * Returns 0, or -1 with errno ENOENT, EINVAL, EIO.
 */
int gust_lstat(gust_fs *fs, const char *path, struct stat *buf);

/*
 * gust_fstat - attributes of an open file (current ones, fetched from its
 * metadata daemon).
 *
 * Returns 0, or -1 with errno EBADF, EINVAL, ENOENT (the file was removed by
 * another process), EIO.
 */
int gust_fstat(gust_fs *fs, int fd, struct stat *buf);

/*
 * gust_access - check that path exists (F_OK) and that its owner bits allow
 * R_OK/W_OK/X_OK (root may read and write anything, and execute what has an x
 * bit).
 *
 * Returns 0, or -1 with errno ENOENT, EACCES, EINVAL (bad mode), EIO.
 */
int gust_access(gust_fs *fs, const char *path, int mode);

/*
 * gust_chmod - set the permission bits (mode & 07777) of path, following
 * symlinks.
 *
 * Returns 0, or -1 with errno ENOENT, EINVAL, EIO.
 */
int gust_chmod(gust_fs *fs, const char *path, mode_t mode);

/*
 * Extended attributes of path, following symlinks: user.* names only (other
 * namespaces are EOPNOTSUPP), on files and directories, at most 4096 bytes of
 * names and values per file (16 more per attribute). As getxattr(2) and friends:
 *
 * gust_getxattr - copy the value of name into value (size bytes); size 0
 *   returns the value's length. Returns the length, or -1 with errno ENODATA
 *   (no such attribute), ERANGE (size too small), ENOENT, EACCES, EOPNOTSUPP.
 * gust_listxattr - the names, each followed by a NUL, as gust_getxattr.
 * gust_setxattr - set name to value (size bytes); flags XATTR_CREATE (fail
 *   with EEXIST if it exists) or XATTR_REPLACE (ENODATA unless it does).
 *   Returns 0, or -1 with errno EEXIST, ENODATA, ENOSPC (past the bound),
 *   EPERM (not a file or directory), ERANGE (name empty or over 255 bytes),
 *   EACCES, EOPNOTSUPP, ENOENT.
 * gust_removexattr - remove name. Returns 0, or -1 with errno ENODATA, ...
 */
ssize_t gust_getxattr(gust_fs *fs, const char *path, const char *name, void *value, size_t size);
ssize_t gust_listxattr(gust_fs *fs, const char *path, char *list, size_t size);
int gust_setxattr(gust_fs *fs, const char *path, const char *name, const void *value, size_t size, int flags);
int gust_removexattr(gust_fs *fs, const char *path, const char *name);

/*
 * gust_utimens - set access and modification times of path, following
 * symlinks, as utimensat(2): times[0] is atime, times[1] mtime; tv_nsec ==
 * UTIME_NOW means now, UTIME_OMIT leaves that time alone; times == NULL sets
 * both to now.
 *
 * Returns 0, or -1 with errno ENOENT, EINVAL (tv_nsec out of range, NULL fs or
 * path), EIO.
 */
int gust_utimens(gust_fs *fs, const char *path, const struct timespec times[2]);

/*
 * gust_truncate - set the size of the file at path (following symlinks).
 *
 * Returns 0, or -1 with errno ENOENT, EISDIR, EINVAL (negative length), EFBIG,
 * EIO.
 */
int gust_truncate(gust_fs *fs, const char *path, off_t length);

/*
 * gust_statvfs - capacity of the instance: the sum over all daemons' root
 * directories, in 4096-byte blocks (f_bsize = f_frsize = 4096). f_files counts
 * records plus 2^32; f_ffree is 2^32 (there is no inode table to run out of);
 * f_namemax is 255.
 *
 * Returns 0, or -1 with errno EINVAL (NULL argument) or EIO.
 */
int gust_statvfs(gust_fs *fs, struct statvfs *buf);

/* ----- namespace ------------------------------------------------------------ */

/*
 * gust_mkdir - create a directory with permission bits mode.
 *
 * Returns 0, or -1 with errno EEXIST (the name exists), ENOENT/ENOTDIR (bad
 * parent, checked only on instances started with --check-parent), EINVAL, EIO.
 */
int gust_mkdir(gust_fs *fs, const char *path, mode_t mode);

/*
 * gust_rmdir - remove an empty directory.
 *
 * Returns 0, or -1 with errno ENOENT, ENOTDIR (not a directory), ENOTEMPTY,
 * EBUSY (the root), EINVAL, EIO.
 */
int gust_rmdir(gust_fs *fs, const char *path);

/*
 * gust_unlink - remove a file or symlink (not what a symlink points to) and
 * the file's data on every daemon.
 *
 * Returns 0, or -1 with errno ENOENT, EISDIR (a directory), EINVAL, EIO.
 */
int gust_unlink(gust_fs *fs, const char *path);

/*
 * gust_rename - rename oldpath to newpath, replacing a file at newpath (or an
 * empty directory, when oldpath is a directory). A file's data does not move.
 * Descriptors of this gust_fs open on oldpath follow the rename.
 *
 * Returns 0, or -1 with errno ENOENT, ENOTDIR, ENOTEMPTY, EINVAL (newpath
 * inside oldpath, NULL argument), EBUSY (the root), EIO (a directory rename
 * failed part-way; gust_last_error() names the daemon).
 */
int gust_rename(gust_fs *fs, const char *oldpath, const char *newpath);

/*
 * gust_symlink - create a symlink at linkpath pointing to target. target is
 * stored as given (relative, absolute within the file system, or under the
 * mount directory) and resolved when followed.
 *
 * Returns 0, or -1 with errno EEXIST, ENOENT (empty target), ENAMETOOLONG,
 * EINVAL, EIO.
 */
int gust_symlink(gust_fs *fs, const char *target, const char *linkpath);

/*
 * gust_readlink - copy the target of the symlink at path into buf, as
 * readlink(2): no terminating NUL, truncated to bufsiz bytes.
 *
 * Returns the bytes copied, or -1 with errno: ENOENT, EINVAL (not a symlink,
 * buf NULL, bufsiz 0), EIO.
 */
ssize_t gust_readlink(gust_fs *fs, const char *path, char *buf, size_t bufsiz);

/* ----- directories ---------------------------------------------------------- */

/*
 * gust_opendir - open a listing of the directory at path (following symlinks).
 *
 * Entries are fetched lazily in pages from one daemon after another, so a
 * directory of millions of entries needs no large buffer. The listing holds
 * no "." or ".." entries and its order is unspecified; entries created or
 * removed while it is read may or may not appear (docs/SEMANTICS.md).
 * Returns a stream for gust_readdir(), or NULL with errno: ENOENT, ENOTDIR,
 * EINVAL, EIO.
 */
gust_dir *gust_opendir(gust_fs *fs, const char *path);

/*
 * gust_readdir - the next entry of a directory stream.
 *
 * Returns a pointer to an entry owned by the stream, valid until the next
 * gust_readdir() or gust_closedir() on it. At the end returns NULL and leaves
 * errno unchanged (set errno to 0 before the call to tell the end from an
 * error); on an error returns NULL and sets errno: EINVAL (dir NULL), EIO (a
 * daemon failed; later calls return NULL as at the end).
 */
const struct gust_dirent *gust_readdir(gust_dir *dir);

/*
 * gust_closedir - release a directory stream.
 *
 * Returns 0, or -1 with errno EINVAL (dir NULL).
 */
int gust_closedir(gust_dir *dir);

#ifdef __cplusplus
}
#endif

#endif /* GUST_H */
