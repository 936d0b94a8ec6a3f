/* Exercises the file API through libgust_preload.so (and, as a control, on a local
 * directory without it). Usage: preload_api BASE_DIR [gust]. Prints C-OK on success. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s (errno %d %s)\n", __FILE__, __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)
#define FAILS(call, e) do { errno = 0; long r_ = (long)(call); if (r_ != -1 || errno != (e)) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %ld errno %d (%s), want %d\n", __FILE__, __LINE__, #call, r_, errno, strerror(errno), e); exit(1); } } while (0)

static const char *B;
static char *P(const char *rel) {
    static __thread char buf[8][512];
    static __thread int i;
    char *b = buf[i++ % 8];
    snprintf(b, 512, "%s/%s", B, rel);
    return b;
}

static void *worker(void *arg) {
    long id = (long)arg;
    char name[64], buf[100], back[100];
    for (int k = 0; k < 40; k++) {
        snprintf(name, sizeof name, "t%ld_%d", id, k);
        int fd = open(P(name), O_CREAT | O_RDWR | O_TRUNC, 0644);
        CHECK(fd >= 0);
        int n = snprintf(buf, sizeof buf, "thread %ld file %d\n", id, k);
        CHECK(write(fd, buf, n) == n);
        CHECK(lseek(fd, 0, SEEK_SET) == 0);
        CHECK(read(fd, back, sizeof back) == n && memcmp(buf, back, n) == 0);
        CHECK(close(fd) == 0);
        struct stat st;
        CHECK(stat(P(name), &st) == 0 && st.st_size == n && S_ISREG(st.st_mode));
        CHECK(unlink(P(name)) == 0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    B = argv[1];
    int gust = argc > 2 && strcmp(argv[2], "gust") == 0;
    struct stat st;
    char buf[4096];

    CHECK(mkdir(P("d"), 0755) == 0);
    FAILS(mkdir(P("d"), 0755), EEXIST);
    FAILS(open(P("missing"), O_RDONLY), ENOENT);
    FAILS(stat(P("missing"), &st), ENOENT);
    FAILS(unlink(P("missing")), ENOENT);
    FAILS(rmdir(P("missing")), ENOENT);
    int fd = open(P("d/f"), O_CREAT | O_EXCL | O_RDWR, 0644);
    CHECK(fd >= 3);
    FAILS(open(P("d/f"), O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST);
    FAILS(open(P("d/f"), O_RDONLY | O_DIRECTORY), ENOTDIR);
    FAILS(rmdir(P("d/f")), ENOTDIR);
    FAILS(chdir(P("d/f")), ENOTDIR);
    CHECK(opendir(P("d/f")) == NULL && errno == ENOTDIR);
    FAILS(open(P("d"), O_WRONLY), EISDIR);
    FAILS(rmdir(P("d")), ENOTEMPTY);
    FAILS(readlink(P("d/f"), buf, sizeof buf), EINVAL);
    FAILS(lseek(fd, -5, SEEK_SET), EINVAL);
    FAILS(pread(fd, buf, 1, -1), EINVAL);
    FAILS(read(-1, buf, 1), EBADF);

    /* data */
    CHECK(write(fd, "hello world", 11) == 11);
    CHECK(pwrite(fd, "HELLO", 5, 0) == 5);
    CHECK(pread(fd, buf, 100, 0) == 11 && memcmp(buf, "HELLO world", 11) == 0);
    struct iovec iv[2] = {{"abc", 3}, {"defg", 4}};
    CHECK(lseek(fd, 0, SEEK_END) == 11);
    CHECK(writev(fd, iv, 2) == 7);
    char a[5] = {0}, b2[20] = {0};
    struct iovec rv[2] = {{a, 4}, {b2, 20}};
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(readv(fd, rv, 2) == 18 && memcmp(a, "HELL", 4) == 0 && memcmp(b2, "O worldabcdefg", 14) == 0);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 18 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
    CHECK(ftruncate(fd, 5) == 0 && fstat(fd, &st) == 0 && st.st_size == 5);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    CHECK(truncate(P("d/f"), 3) == 0 && stat(P("d/f"), &st) == 0 && st.st_size == 3);
    CHECK(access(P("d/f"), R_OK | W_OK) == 0);
    FAILS(access(P("d/nope"), F_OK), ENOENT);

    /* descriptors: dup shares the offset, flags, close-on-exec, locks */
    CHECK(lseek(fd, 1, SEEK_SET) == 1);
    int d1 = dup(fd);
    CHECK(d1 >= 0 && d1 != fd && lseek(d1, 0, SEEK_CUR) == 1);
    CHECK(read(d1, buf, 1) == 1 && buf[0] == 'E' && lseek(fd, 0, SEEK_CUR) == 2);
    int d2 = dup2(fd, 100);
    CHECK(d2 == 100 && lseek(100, 0, SEEK_CUR) == 2);
    int d3 = dup3(fd, 101, O_CLOEXEC);
    CHECK(d3 == 101 && (fcntl(101, F_GETFD) & FD_CLOEXEC));
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC);
    int d4 = fcntl(fd, F_DUPFD, 200);
    CHECK(d4 >= 200 && lseek(d4, 0, SEEK_CUR) == 2);
    /* Record locks, as on the local file system: the process's own lock is no
     * conflict for it; an OFD lock of another open file description is. */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    fl.l_type = F_WRLCK;
    CHECK(fcntl(d1, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK);
    int other = open(P("d/f"), O_RDWR);
    struct flock ofd = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
    FAILS(fcntl(other, F_OFD_SETLK, &ofd), EAGAIN);
    CHECK(flock(other, LOCK_EX | LOCK_NB) == 0); /* flock's locks are apart */
    FAILS(flock(fd, LOCK_SH | LOCK_NB), EWOULDBLOCK);
    CHECK(close(other) == 0); /* POSIX: this close ends the process's fcntl lock too */
    other = open(P("d/f"), O_RDWR);
    CHECK(fcntl(other, F_OFD_SETLK, &ofd) == 0 && close(other) == 0);
    CHECK(close(d1) == 0 && close(d2) == 0 && close(d3) == 0 && close(d4) == 0);
    FAILS(close(d1), EBADF);
    FAILS(read(d2, buf, 1), EBADF);
    /* GustFS descriptors are real kernel descriptors: a local open never collides. */
    int nul = open("/dev/null", O_RDONLY);
    CHECK(nul >= 0 && nul != fd);
    CHECK(read(nul, buf, 1) == 0);
    CHECK(close(nul) == 0);
    CHECK(close(fd) == 0);
    FAILS(write(fd, "x", 1), EBADF);
    fd = open(P("d/f"), O_RDONLY);
    FAILS(write(fd, "x", 1), EBADF);
    CHECK(close(fd) == 0);

    /* rename, symlinks */
    CHECK(rename(P("d/f"), P("d/g")) == 0);
    FAILS(stat(P("d/f"), &st), ENOENT);
    CHECK(symlink("g", P("d/l")) == 0);
    CHECK(lstat(P("d/l"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(P("d/l"), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 3);
    ssize_t n = readlink(P("d/l"), buf, sizeof buf);
    CHECK(n == 1 && buf[0] == 'g');
    CHECK(fstatat(AT_FDCWD, P("d/l"), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
    CHECK(chmod(P("d/g"), 0600) == 0 && stat(P("d/g"), &st) == 0 && (st.st_mode & 0777) == 0600);

    /* directories, *at, cwd */
    CHECK(mkdir(P("d/sub"), 0755) == 0);
    int dfd = open(P("d"), O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    int ffd = openat(dfd, "sub/x", O_CREAT | O_WRONLY, 0644);
    CHECK(ffd >= 0 && write(ffd, "12345", 5) == 5 && close(ffd) == 0);
    CHECK(fstatat(dfd, "sub/x", &st, 0) == 0 && st.st_size == 5);
    CHECK(unlinkat(dfd, "sub/x", 0) == 0 && unlinkat(dfd, "sub", AT_REMOVEDIR) == 0);
    DIR *dir = fdopendir(dfd);
    CHECK(dir != NULL && dirfd(dir) == dfd);
    int count = 0, dots = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.') dots++;
        else count++;
    }
    CHECK(count == 2 && dots == 2);
    rewinddir(dir);
    count = 0;
    while ((e = readdir(dir)) != NULL) count++;
    CHECK(count == 4);
    CHECK(closedir(dir) == 0);
    CHECK(chdir(P("d")) == 0);
    CHECK(getcwd(buf, sizeof buf) != NULL && strcmp(buf, P("d")) == 0);
    fd = open("g", O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, 10) == 3 && close(fd) == 0);
    CHECK(chdir("/") == 0);

    /* stdio */
    FILE *fp = fopen(P("d/s.txt"), "w");
    CHECK(fp != NULL);
    for (int i = 0; i < 1000; i++) fprintf(fp, "line %d\n", i);
    CHECK(fclose(fp) == 0);
    fp = fopen(P("d/s.txt"), "r");
    CHECK(fp != NULL && fileno(fp) >= 0 && fstat(fileno(fp), &st) == 0 && st.st_size > 5000);
    int lines = 0;
    while (fgets(buf, sizeof buf, fp)) lines++;
    CHECK(lines == 1000 && fseek(fp, 5, SEEK_SET) == 0 && fgetc(fp) == '0');
    CHECK(fclose(fp) == 0);

    /* mmap read-only */
    fd = open(P("d/s.txt"), O_RDONLY);
    char *m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(m != MAP_FAILED && memcmp(m, "line 0\nline 1\n", 14) == 0);
    CHECK(munmap(m, st.st_size) == 0 && close(fd) == 0);

    /* threads, with a fork in the middle */
    pthread_t t[4];
    for (long i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int cfd = open(P("d/g"), O_RDONLY);
        if (cfd < 0 || read(cfd, buf, 10) != 3) _exit(2);
        cfd = open(P("d/child"), O_CREAT | O_WRONLY, 0644);
        if (cfd < 0 || write(cfd, "from child", 10) != 10 || close(cfd) != 0) _exit(3);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(stat(P("d/child"), &st) == 0 && st.st_size == 10);

    /* clean up */
    CHECK(unlink(P("d/child")) == 0 && unlink(P("d/s.txt")) == 0 && unlink(P("d/l")) == 0 && unlink(P("d/g")) == 0);
    CHECK(rmdir(P("d")) == 0);
    FAILS(rmdir(P("d")), ENOENT);
    printf("C-OK\n");
    return 0;
}
