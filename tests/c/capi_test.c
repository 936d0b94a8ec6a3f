/* The C API (gust.h, libgust.so) against a running instance.
 *
 * usage: capi_test HOSTS_FILE MOUNTDIR MISSING_HOSTS_FILE
 * Leaves /capi/big (pattern), /capi/shared (threads), /capi/many (1,000
 * entries) and /capi/link -> big for the Rust side to check. Prints CAPI-OK. */
#define _GNU_SOURCE
#include "gust.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define CHECK(c)                                                                                    \
    do {                                                                                            \
        if (!(c)) {                                                                                 \
            fprintf(stderr, "capi_test.c:%d: CHECK(%s) failed: errno %d (%s), last error: %s\n", \
                    __LINE__, #c, errno, strerror(errno), gust_last_error());                       \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* A call that must fail with errno e. */
#define FAILS(call, e)                                                                           \
    do {                                                                                         \
        errno = 0;                                                                               \
        long long r_ = (long long)(call);                                                        \
        if (r_ != -1 || errno != (e)) {                                                          \
            fprintf(stderr, "capi_test.c:%d: %s returned %lld errno %d (%s), wanted -1 errno %s\n", \
                    __LINE__, #call, r_, errno, strerror(errno), #e);                            \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Same for calls returning pointers. */
#define FAILS_NULL(call, e)                                                                  \
    do {                                                                                     \
        errno = 0;                                                                           \
        const void *p_ = (const void *)(call);                                               \
        if (p_ != NULL || errno != (e)) {                                                    \
            fprintf(stderr, "capi_test.c:%d: %s returned %p errno %d, wanted NULL errno %s\n", \
                    __LINE__, #call, p_, errno, #e);                                         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* Index of the first differing byte, or -1. */
static long long first_diff(const unsigned char *a, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long long)i;
    return -1;
}

#define SAME(a, b, n)                                                                            \
    do {                                                                                         \
        long long at_ = first_diff((a), (b), (n));                                               \
        if (at_ >= 0) {                                                                          \
            fprintf(stderr, "capi_test.c:%d: data differs at byte %lld: %d, wanted %d\n", __LINE__, \
                    at_, (int)(b)[at_], (int)(a)[at_]);                                          \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Byte i of the big file: must match big_pattern() in tests/tests/capi.rs. */
static unsigned char pattern(uint64_t i) {
    uint64_t x = (i / 8) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (unsigned char)(x >> (8 * (i % 8)));
}

#define BIG_BYTES (20u * 1024 * 1024 + 12345) /* 41 chunks of 512 KiB, ragged end */
#define THREADS 4
#define SHARED_PART_BYTES (1u * 1024 * 1024 + 7)
#define MANY 1000

static gust_fs *fs;

struct worker {
    int id;
    int shared_fd;
};

static void *work(void *arg) {
    struct worker *w = arg;
    char dir[64], path[96];
    snprintf(dir, sizeof dir, "/capi/t%d", w->id);
    CHECK(gust_mkdir(fs, dir, 0755) == 0);
    /* Disjoint parts of one shared file through one shared descriptor. */
    unsigned char *part = malloc(SHARED_PART_BYTES);
    CHECK(part != NULL);
    memset(part, 'A' + w->id, SHARED_PART_BYTES);
    off_t at = (off_t)w->id * SHARED_PART_BYTES;
    CHECK(gust_pwrite(fs, w->shared_fd, part, SHARED_PART_BYTES, at) == (ssize_t)SHARED_PART_BYTES);
    /* Small files, each written, stat'ed, read back and some removed. */
    for (int i = 0; i < 40; i++) {
        char data[200];
        int len = snprintf(data, sizeof data, "thread %d file %d", w->id, i);
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        int fd = gust_open(fs, path, O_CREAT | O_EXCL | O_RDWR, 0644);
        CHECK(fd >= 0);
        CHECK(gust_write(fs, fd, data, len) == len);
        struct stat st;
        CHECK(gust_fstat(fs, fd, &st) == 0 && st.st_size == len);
        char back[200];
        CHECK(gust_pread(fs, fd, back, sizeof back, 0) == len && memcmp(back, data, len) == 0);
        CHECK(gust_close(fs, fd) == 0);
        if (i % 2)
            CHECK(gust_unlink(fs, path) == 0);
    }
    /* Error messages are per thread. */
    snprintf(path, sizeof path, "%s/missing", dir);
    FAILS(gust_open(fs, path, O_RDONLY, 0), ENOENT);
    CHECK(strstr(gust_last_error(), path) != NULL);
    usleep(20000); /* let other threads fail in between */
    CHECK(strstr(gust_last_error(), path) != NULL);
    /* Read the own part back through the shared descriptor. */
    memset(part, 0, SHARED_PART_BYTES);
    CHECK(gust_pread(fs, w->shared_fd, part, SHARED_PART_BYTES, at) == (ssize_t)SHARED_PART_BYTES);
    for (unsigned i = 0; i < SHARED_PART_BYTES; i++)
        CHECK(part[i] == 'A' + w->id);
    free(part);
    gust_dir *d = gust_opendir(fs, dir);
    CHECK(d != NULL);
    int n = 0;
    while (gust_readdir(d) != NULL)
        n++;
    CHECK(n == 20);
    CHECK(gust_closedir(d) == 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOSTS_FILE MOUNTDIR MISSING_HOSTS_FILE\n", argv[0]);
        return 2;
    }
    const char *hosts = argv[1], *mnt = argv[2], *missing = argv[3];
    struct stat st;
    char buf[4096], path[512];

    /* ----- mount ----- */
    CHECK(gust_last_error() != NULL && gust_last_error()[0] == '\0');
    FAILS_NULL(gust_mount(missing), ENOENT);
    CHECK(strstr(gust_last_error(), missing) != NULL);
    CHECK(strstr(gust_last_error(), "gust_mount") != NULL);
    FAILS_NULL(gust_mount("/"), EISDIR);
    unsetenv("GUST_HOSTS_FILE");
    FAILS_NULL(gust_mount(NULL), EINVAL);
    CHECK(strstr(gust_last_error(), "GUST_HOSTS_FILE") != NULL);
    setenv("GUST_HOSTS_FILE", hosts, 1);
    fs = gust_mount(NULL);
    CHECK(fs != NULL);
    gust_unmount(fs);
    gust_unmount(NULL);
    fs = gust_mount(hosts);
    CHECK(fs != NULL);

    /* ----- NULL pointers: EINVAL, never a crash ----- */
    FAILS(gust_open(NULL, "/x", O_RDONLY, 0), EINVAL);
    FAILS(gust_open(fs, NULL, O_RDONLY, 0), EINVAL);
    FAILS(gust_close(NULL, 3), EINVAL);
    FAILS(gust_dup(NULL, 3), EINVAL);
    FAILS(gust_read(fs, 3, NULL, 10), EINVAL);
    FAILS(gust_write(fs, 3, NULL, 10), EINVAL);
    FAILS(gust_pread(NULL, 3, buf, 10, 0), EINVAL);
    FAILS(gust_pwrite(fs, 3, NULL, 10, 0), EINVAL);
    FAILS(gust_lseek(NULL, 3, 0, SEEK_SET), EINVAL);
    FAILS(gust_stat(fs, "/", NULL), EINVAL);
    FAILS(gust_stat(fs, NULL, &st), EINVAL);
    FAILS(gust_lstat(NULL, "/", &st), EINVAL);
    FAILS(gust_fstat(fs, 3, NULL), EINVAL);
    FAILS(gust_access(fs, NULL, F_OK), EINVAL);
    FAILS(gust_mkdir(fs, NULL, 0755), EINVAL);
    FAILS(gust_rmdir(NULL, "/x"), EINVAL);
    FAILS(gust_unlink(fs, NULL), EINVAL);
    FAILS(gust_rename(fs, "/x", NULL), EINVAL);
    FAILS(gust_rename(fs, NULL, "/x"), EINVAL);
    FAILS(gust_truncate(fs, NULL, 0), EINVAL);
    FAILS(gust_ftruncate(NULL, 3, 0), EINVAL);
    FAILS(gust_fsync(NULL, 3), EINVAL);
    FAILS(gust_symlink(fs, NULL, "/l"), EINVAL);
    FAILS(gust_symlink(fs, "t", NULL), EINVAL);
    FAILS(gust_readlink(fs, "/l", NULL, 10), EINVAL);
    FAILS(gust_chmod(fs, NULL, 0644), EINVAL);
    FAILS(gust_utimens(fs, NULL, NULL), EINVAL);
    FAILS(gust_statvfs(fs, NULL), EINVAL);
    FAILS(gust_statvfs(NULL, NULL), EINVAL);
    FAILS_NULL(gust_opendir(fs, NULL), EINVAL);
    FAILS_NULL(gust_opendir(NULL, "/"), EINVAL);
    FAILS_NULL(gust_readdir(NULL), EINVAL);
    FAILS(gust_closedir(NULL), EINVAL);
    CHECK(strstr(gust_last_error(), "gust_closedir") != NULL);

    /* ----- directories and their errors ----- */
    CHECK(gust_mkdir(fs, "/capi", 0755) == 0);
    FAILS(gust_mkdir(fs, "/capi", 0755), EEXIST);
    CHECK(strstr(gust_last_error(), "/capi") != NULL);
    CHECK(gust_stat(fs, "/capi", &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755);
    snprintf(path, sizeof path, "%s/capi", mnt); /* the same directory through the mount dir */
    CHECK(gust_stat(fs, path, &st) == 0 && S_ISDIR(st.st_mode));
    FAILS(gust_open(fs, "/capi", O_WRONLY, 0), EISDIR);
    FAILS(gust_open(fs, "/capi/nope", O_RDONLY, 0), ENOENT);
    FAILS(gust_stat(fs, "/capi/nope", &st), ENOENT);
    FAILS(gust_open(fs, "capi/relative", O_RDONLY, 0), EINVAL);
    FAILS(gust_open(fs, "", O_RDONLY, 0), ENOENT);
    FAILS(gust_rmdir(fs, "/capi/nope"), ENOENT);
    FAILS(gust_unlink(fs, "/capi"), EISDIR);

    /* ----- descriptors: write, read, seek, dup, truncate ----- */
    int fd = gust_open(fs, "/capi/small", O_CREAT | O_EXCL | O_RDWR, 0644);
    CHECK(fd >= 0);
    FAILS(gust_open(fs, "/capi/small", O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST);
    FAILS(gust_open(fs, "/capi/small", O_RDONLY | O_DIRECTORY, 0), ENOTDIR);
    FAILS(gust_rmdir(fs, "/capi/small"), ENOTDIR);
    FAILS_NULL(gust_opendir(fs, "/capi/small"), ENOTDIR);
    FAILS(gust_rmdir(fs, "/capi"), ENOTEMPTY);
    CHECK(gust_write(fs, fd, "hello, world", 12) == 12);
    CHECK(gust_lseek(fs, fd, 0, SEEK_CUR) == 12);
    CHECK(gust_lseek(fs, fd, 0, SEEK_END) == 12);
    CHECK(gust_lseek(fs, fd, 7, SEEK_SET) == 7);
    CHECK(gust_read(fs, fd, buf, sizeof buf) == 5 && memcmp(buf, "world", 5) == 0);
    CHECK(gust_read(fs, fd, buf, sizeof buf) == 0);
    FAILS(gust_lseek(fs, fd, -100, SEEK_CUR), EINVAL);
    FAILS(gust_lseek(fs, fd, 0, 12345), EINVAL);
    CHECK(gust_pwrite(fs, fd, "HELLO", 5, 0) == 5);
    CHECK(gust_pread(fs, fd, buf, 5, 0) == 5 && memcmp(buf, "HELLO", 5) == 0);
    FAILS(gust_pread(fs, fd, buf, 5, -1), EINVAL);
    CHECK(gust_lseek(fs, fd, 0, SEEK_CUR) == 12); /* pread/pwrite keep the offset */
    int fd2 = gust_dup(fs, fd);
    CHECK(fd2 >= 0 && fd2 != fd);
    CHECK(gust_lseek(fs, fd2, 2, SEEK_SET) == 2);
    CHECK(gust_lseek(fs, fd, 0, SEEK_CUR) == 2); /* shared offset */
    CHECK(gust_close(fs, fd2) == 0);
    FAILS(gust_close(fs, fd2), EBADF);
    FAILS(gust_dup(fs, fd2), EBADF);
    CHECK(gust_pwrite(fs, fd, "!", 1, 100) == 1); /* a hole from 12 to 100 */
    CHECK(gust_fstat(fs, fd, &st) == 0 && st.st_size == 101 && S_ISREG(st.st_mode));
    CHECK(gust_pread(fs, fd, buf, sizeof buf, 0) == 101);
    for (int i = 12; i < 100; i++)
        CHECK(buf[i] == 0);
    CHECK(gust_ftruncate(fs, fd, 5) == 0);
    FAILS(gust_ftruncate(fs, fd, -1), EINVAL);
    CHECK(gust_fsync(fs, fd) == 0);
    CHECK(gust_close(fs, fd) == 0);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0 && st.st_size == 5);
    CHECK(gust_truncate(fs, "/capi/small", 3) == 0);
    FAILS(gust_truncate(fs, "/capi/nope", 3), ENOENT);
    FAILS(gust_truncate(fs, "/capi", 3), EISDIR);
    FAILS(gust_truncate(fs, "/capi/small", -3), EINVAL);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0 && st.st_size == 3);
    /* Access modes: a read-only descriptor cannot write, a write-only one cannot read. */
    fd = gust_open(fs, "/capi/small", O_RDONLY, 0);
    CHECK(fd >= 0);
    FAILS(gust_write(fs, fd, "x", 1), EBADF);
    FAILS(gust_ftruncate(fs, fd, 0), EINVAL);
    CHECK(gust_close(fs, fd) == 0);
    fd = gust_open(fs, "/capi/small", O_WRONLY | O_APPEND, 0);
    CHECK(fd >= 0);
    FAILS(gust_read(fs, fd, buf, 1), EBADF);
    CHECK(gust_write(fs, fd, "LO", 2) == 2);
    CHECK(gust_close(fs, fd) == 0);
    fd = gust_open(fs, "/capi/small", O_RDONLY, 0);
    CHECK(gust_read(fs, fd, buf, sizeof buf) == 5 && memcmp(buf, "HELLO", 5) == 0);
    CHECK(gust_close(fs, fd) == 0);
    fd = gust_open(fs, "/capi/small", O_RDWR | O_TRUNC, 0);
    CHECK(fd >= 0 && gust_fstat(fs, fd, &st) == 0 && st.st_size == 0);
    CHECK(gust_close(fs, fd) == 0);
    /* Locks: the file's metadata daemon keeps them. This process's POSIX lock and
     * an OFD lock of another open file conflict; its own locks do not. */
    fd = gust_open(fs, "/capi/small", O_RDWR, 0);
    fd2 = gust_open(fs, "/capi/small", O_RDWR, 0);
    CHECK(fd >= 0 && fd2 >= 0);
    CHECK(gust_flock(fs, fd, LOCK_EX | LOCK_NB) == 0);
    FAILS(gust_flock(fs, fd2, LOCK_SH | LOCK_NB), EWOULDBLOCK);
    CHECK(gust_flock(fs, fd, LOCK_UN) == 0);
    CHECK(gust_flock(fs, fd2, LOCK_SH | LOCK_NB) == 0);
    FAILS(gust_flock(fs, fd, 77), EINVAL);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK(gust_lock(fs, fd, F_SETLK, &fl) == 0);
    fl.l_type = F_WRLCK;
    CHECK(gust_lock(fs, fd2, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK); /* its own */
    fl = (struct flock){.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    FAILS(gust_lock(fs, fd2, F_OFD_SETLK, &fl), EAGAIN);
    CHECK(gust_lock(fs, fd2, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_WRLCK && fl.l_start == 0 && fl.l_len == 10);
    FAILS(gust_lock(fs, fd, F_SETLK, NULL), EINVAL);
    CHECK(gust_close(fs, fd2) == 0); /* POSIX: any close ends the process's locks */
    fd2 = gust_open(fs, "/capi/small", O_RDONLY, 0);
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    CHECK(gust_lock(fs, fd2, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK);
    fl.l_type = F_WRLCK;
    FAILS(gust_lock(fs, fd2, F_OFD_SETLK, &fl), EBADF); /* a write lock, read-only */
    CHECK(gust_close(fs, fd2) == 0 && gust_close(fs, fd) == 0);
    /* Bad descriptors. */
    FAILS(gust_read(fs, 99999, buf, 1), EBADF);
    FAILS(gust_write(fs, 99999, buf, 1), EBADF);
    FAILS(gust_pread(fs, -1, buf, 1, 0), EBADF);
    FAILS(gust_pwrite(fs, 99999, buf, 1, 0), EBADF);
    FAILS(gust_lseek(fs, 99999, 0, SEEK_SET), EBADF);
    FAILS(gust_fstat(fs, 99999, &st), EBADF);
    FAILS(gust_fsync(fs, 99999), EBADF);
    FAILS(gust_ftruncate(fs, 99999, 0), EBADF);
    FAILS(gust_close(fs, 99999), EBADF);
    CHECK(strstr(gust_last_error(), "fd 99999") != NULL);

    /* ----- a large file over many chunks ----- */
    unsigned char *big = malloc(BIG_BYTES), *back = malloc(BIG_BYTES);
    CHECK(big != NULL && back != NULL);
    for (uint64_t i = 0; i < BIG_BYTES; i++)
        big[i] = pattern(i);
    snprintf(path, sizeof path, "%s/capi/big", mnt);
    fd = gust_open(fs, path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(fd >= 0);
    /* Odd-sized pieces so that writes start and end inside chunks. */
    for (size_t done = 0; done < BIG_BYTES;) {
        size_t n = BIG_BYTES - done < 3000017 ? BIG_BYTES - done : 3000017;
        CHECK(gust_write(fs, fd, big + done, n) == (ssize_t)n);
        done += n;
    }
    CHECK(gust_fsync(fs, fd) == 0);
    CHECK(gust_close(fs, fd) == 0);
    fd = gust_open(fs, "/capi/big", O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK(gust_fstat(fs, fd, &st) == 0 && st.st_size == BIG_BYTES);
    memset(back, 0, BIG_BYTES);
    CHECK(gust_read(fs, fd, back, BIG_BYTES) == BIG_BYTES); /* one read, all daemons */
    SAME(big, back, BIG_BYTES);
    memset(back, 0, BIG_BYTES);
    for (size_t done = 0; done < BIG_BYTES;) {
        size_t want = BIG_BYTES - done < 777777 ? BIG_BYTES - done : 777777;
        ssize_t n = gust_pread(fs, fd, back + done, want, done);
        CHECK(n > 0);
        done += n;
    }
    SAME(big, back, BIG_BYTES);
    CHECK(gust_pread(fs, fd, back, 1000, BIG_BYTES - 10) == 10); /* short at the end */
    CHECK(gust_pread(fs, fd, back, 1000, BIG_BYTES + 10) == 0);
    CHECK(gust_lseek(fs, fd, 0, SEEK_DATA) == 0 && gust_lseek(fs, fd, 0, SEEK_HOLE) == BIG_BYTES);
    FAILS(gust_lseek(fs, fd, BIG_BYTES, SEEK_DATA), ENXIO);
    CHECK(gust_close(fs, fd) == 0);
    free(back);
    free(big);

    /* ----- symlinks ----- */
    CHECK(gust_symlink(fs, "big", "/capi/link") == 0);
    FAILS(gust_symlink(fs, "big", "/capi/link"), EEXIST);
    CHECK(gust_lstat(fs, "/capi/link", &st) == 0 && S_ISLNK(st.st_mode) && st.st_size == 3);
    CHECK(gust_stat(fs, "/capi/link", &st) == 0 && S_ISREG(st.st_mode) && st.st_size == BIG_BYTES);
    memset(buf, 'x', 10);
    CHECK(gust_readlink(fs, "/capi/link", buf, sizeof buf) == 3 && memcmp(buf, "bigx", 4) == 0);
    CHECK(gust_readlink(fs, "/capi/link", buf, 2) == 2 && memcmp(buf, "bi", 2) == 0);
    FAILS(gust_readlink(fs, "/capi/link", buf, 0), EINVAL);
    FAILS(gust_readlink(fs, "/capi/small", buf, sizeof buf), EINVAL);
    FAILS(gust_readlink(fs, "/capi/nope", buf, sizeof buf), ENOENT);
    CHECK(gust_symlink(fs, "nowhere", "/capi/dangling") == 0);
    FAILS(gust_stat(fs, "/capi/dangling", &st), ENOENT);
    CHECK(gust_unlink(fs, "/capi/dangling") == 0);

    /* ----- extended attributes ----- */
    CHECK(gust_setxattr(fs, "/capi/small", "user.k", "val", 3, 0) == 0);
    CHECK(gust_getxattr(fs, "/capi/small", "user.k", NULL, 0) == 3);
    CHECK(gust_getxattr(fs, "/capi/small", "user.k", buf, sizeof buf) == 3 && memcmp(buf, "val", 3) == 0);
    FAILS(gust_getxattr(fs, "/capi/small", "user.k", buf, 2), ERANGE);
    FAILS(gust_setxattr(fs, "/capi/small", "user.k", "x", 1, 1 /* XATTR_CREATE */), EEXIST);
    FAILS(gust_setxattr(fs, "/capi/small", "security.k", "x", 1, 0), EOPNOTSUPP);
    CHECK(gust_listxattr(fs, "/capi/small", buf, sizeof buf) == 7 && memcmp(buf, "user.k", 7) == 0);
    CHECK(gust_removexattr(fs, "/capi/small", "user.k") == 0);
    FAILS(gust_getxattr(fs, "/capi/small", "user.k", buf, sizeof buf), ENODATA);
    CHECK(gust_listxattr(fs, "/capi/small", NULL, 0) == 0);

    /* ----- chmod, access, utimens ----- */
    CHECK(gust_chmod(fs, "/capi/small", 0640) == 0);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0 && (st.st_mode & 07777) == 0640 && S_ISREG(st.st_mode));
    FAILS(gust_chmod(fs, "/capi/nope", 0640), ENOENT);
    CHECK(gust_access(fs, "/capi/small", F_OK) == 0);
    CHECK(gust_access(fs, "/capi/small", R_OK | W_OK) == 0);
    FAILS(gust_access(fs, "/capi/nope", F_OK), ENOENT);
    FAILS(gust_access(fs, "/capi/small", 0100), EINVAL);
    if (geteuid() != 0) {
        CHECK(gust_chmod(fs, "/capi/small", 0400) == 0);
        FAILS(gust_access(fs, "/capi/small", W_OK), EACCES);
    }
    FAILS(gust_access(fs, "/capi/small", X_OK), EACCES); /* no x bit: denied even to root */
    struct timespec ts[2] = {{1000000000, 5}, {2000000000, 7}};
    CHECK(gust_utimens(fs, "/capi/small", ts) == 0);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0);
    CHECK(st.st_atim.tv_sec == 1000000000 && st.st_atim.tv_nsec == 5);
    CHECK(st.st_mtim.tv_sec == 2000000000 && st.st_mtim.tv_nsec == 7);
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_nsec = UTIME_NOW;
    time_t before = time(NULL);
    CHECK(gust_utimens(fs, "/capi/small", ts) == 0);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0);
    CHECK(st.st_atim.tv_sec == 1000000000 && st.st_mtim.tv_sec >= before - 1 && st.st_mtim.tv_sec <= time(NULL) + 1);
    CHECK(gust_utimens(fs, "/capi/small", NULL) == 0);
    CHECK(gust_stat(fs, "/capi/small", &st) == 0 && st.st_atim.tv_sec >= before - 1);
    ts[0].tv_nsec = 1000000000;
    FAILS(gust_utimens(fs, "/capi/small", ts), EINVAL);
    FAILS(gust_utimens(fs, "/capi/nope", NULL), ENOENT);

    /* ----- rename ----- */
    CHECK(gust_rename(fs, "/capi/small", "/capi/small2") == 0);
    FAILS(gust_stat(fs, "/capi/small", &st), ENOENT);
    CHECK(gust_stat(fs, "/capi/small2", &st) == 0 && st.st_size == 0);
    FAILS(gust_rename(fs, "/capi/small", "/capi/x"), ENOENT);
    CHECK(gust_mkdir(fs, "/capi/d1", 0700) == 0);
    CHECK(gust_mkdir(fs, "/capi/d2", 0700) == 0);
    CHECK(gust_rename(fs, "/capi/small2", "/capi/d1/s") == 0);
    FAILS(gust_rename(fs, "/capi/d2", "/capi/d1"), ENOTEMPTY);
    FAILS(gust_rename(fs, "/capi/d1", "/capi/d1/sub"), EINVAL);
    CHECK(gust_rename(fs, "/capi/d1", "/capi/d3") == 0);
    CHECK(gust_stat(fs, "/capi/d3/s", &st) == 0 && st.st_size == 0);
    CHECK(gust_unlink(fs, "/capi/d3/s") == 0);
    FAILS(gust_unlink(fs, "/capi/d3/s"), ENOENT);
    CHECK(gust_rmdir(fs, "/capi/d3") == 0 && gust_rmdir(fs, "/capi/d2") == 0);
    FAILS(gust_rmdir(fs, "/capi/d3"), ENOENT);

    /* ----- statvfs ----- */
    struct statvfs sv;
    CHECK(gust_statvfs(fs, &sv) == 0);
    CHECK(sv.f_bsize == 4096 && sv.f_blocks > 0 && sv.f_bavail <= sv.f_blocks && sv.f_namemax == 255);

    /* ----- a directory of 1,000 entries ----- */
    CHECK(gust_mkdir(fs, "/capi/many", 0755) == 0);
    for (int i = 0; i < MANY; i++) {
        snprintf(path, sizeof path, "/capi/many/e%04d", i);
        if (i % 100 == 1) {
            CHECK(gust_mkdir(fs, path, 0755) == 0);
        } else if (i % 100 == 2) {
            CHECK(gust_symlink(fs, "e0000", path) == 0);
        } else {
            fd = gust_open(fs, path, O_CREAT | O_EXCL | O_WRONLY, 0644);
            CHECK(fd >= 0 && gust_close(fs, fd) == 0);
        }
    }
    static unsigned char seen[MANY];
    gust_dir *d = gust_opendir(fs, "/capi/many");
    CHECK(d != NULL);
    int count = 0;
    const struct gust_dirent *e;
    for (;;) {
        errno = 4242; /* the end must leave errno alone */
        e = gust_readdir(d);
        if (e == NULL)
            break;
        int i = -1;
        CHECK(sscanf(e->name, "e%d", &i) == 1 && i >= 0 && i < MANY && strlen(e->name) == 5);
        CHECK(!seen[i]);
        seen[i] = 1;
        unsigned char want = i % 100 == 1 ? DT_DIR : i % 100 == 2 ? DT_LNK : DT_REG;
        CHECK(e->type == want);
        count++;
        CHECK(count <= MANY);
    }
    CHECK(errno == 4242);
    CHECK(count == MANY);
    CHECK(gust_readdir(d) == NULL && errno == 4242); /* stays at the end */
    CHECK(gust_closedir(d) == 0);
    FAILS_NULL(gust_opendir(fs, "/capi/nope"), ENOENT);
    snprintf(path, sizeof path, "%s/capi/many", mnt);
    d = gust_opendir(fs, path);
    CHECK(d != NULL && gust_readdir(d) != NULL && gust_closedir(d) == 0);
    /* A stream outlives the handle it came from. */
    gust_fs *fs2 = gust_mount(hosts);
    CHECK(fs2 != NULL);
    d = gust_opendir(fs2, "/capi/many");
    CHECK(d != NULL);
    gust_unmount(fs2);
    count = 0;
    while (gust_readdir(d) != NULL)
        count++;
    CHECK(count == MANY && gust_closedir(d) == 0);

    /* ----- 4 threads on one gust_fs ----- */
    FAILS(gust_stat(fs, "/capi/main-only", &st), ENOENT);
    int shared = gust_open(fs, "/capi/shared", O_CREAT | O_EXCL | O_RDWR, 0644);
    CHECK(shared >= 0);
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i].id = i;
        w[i].shared_fd = shared;
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(gust_fstat(fs, shared, &st) == 0 && st.st_size == (off_t)THREADS * SHARED_PART_BYTES);
    CHECK(gust_close(fs, shared) == 0);
    CHECK(strstr(gust_last_error(), "/capi/main-only") != NULL); /* the threads' failures are theirs */

    gust_unmount(fs);
    printf("CAPI-OK\n");
    return 0;
}
