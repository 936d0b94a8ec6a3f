/* POSIX asynchronous I/O on a file of DIR (argv[1]): aio_write, aio_suspend,
 * aio_error, aio_return, aio_read, lio_listio (LIO_WAIT and LIO_NOWAIT with a
 * signal), aio_fsync, aio_cancel and a failed request's errno. Prints C-OK. */
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c)                                                                 \
    do {                                                                         \
        if (!(c)) {                                                              \
            fprintf(stderr, "line %d: %s failed (errno %d)\n", __LINE__, #c, errno); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static volatile sig_atomic_t signalled;
static void on_signal(int s) { (void)s; signalled++; }

/* Waits for one request and returns its result. */
static ssize_t finish(struct aiocb *cb) {
    const struct aiocb *list[1] = {cb};
    while (aio_error(cb) == EINPROGRESS) CHECK(aio_suspend(list, 1, NULL) == 0 || errno == EINTR);
    return aio_return(cb);
}

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/aio.dat", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    char a[8192], b[8192], back[16384];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);

    struct aiocb w = {0};
    w.aio_fildes = fd, w.aio_buf = a, w.aio_nbytes = sizeof a, w.aio_offset = 0;
    CHECK(aio_write(&w) == 0);
    CHECK(finish(&w) == (ssize_t)sizeof a);

    /* Two writes in one list, waited for. */
    struct aiocb l1 = {0}, l2 = {0};
    l1.aio_fildes = fd, l1.aio_buf = b, l1.aio_nbytes = 4096, l1.aio_offset = 8192, l1.aio_lio_opcode = LIO_WRITE;
    l2.aio_fildes = fd, l2.aio_buf = b, l2.aio_nbytes = 4096, l2.aio_offset = 12288, l2.aio_lio_opcode = LIO_WRITE;
    struct aiocb *list[2] = {&l1, &l2};
    CHECK(lio_listio(LIO_WAIT, list, 2, NULL) == 0);
    CHECK(aio_error(&l1) == 0 && aio_return(&l1) == 4096);
    CHECK(aio_error(&l2) == 0 && aio_return(&l2) == 4096);

    /* A list not waited for, its completion signalled. */
    signal(SIGUSR1, on_signal);
    struct aiocb r = {0};
    r.aio_fildes = fd, r.aio_buf = back, r.aio_nbytes = sizeof back, r.aio_offset = 0, r.aio_lio_opcode = LIO_READ;
    struct aiocb *rl[1] = {&r};
    struct sigevent ev = {0};
    ev.sigev_notify = SIGEV_SIGNAL, ev.sigev_signo = SIGUSR1;
    CHECK(lio_listio(LIO_NOWAIT, rl, 1, &ev) == 0);
    CHECK(finish(&r) == (ssize_t)sizeof back);
    for (int i = 0; i < 1000000 && !signalled; i++) usleep(1000);
    CHECK(signalled == 1);
    CHECK(memcmp(back, a, sizeof a) == 0 && memcmp(back + 8192, b, 8192) == 0);

    /* aio_read past the end: a short read. */
    struct aiocb tail = {0};
    tail.aio_fildes = fd, tail.aio_buf = back, tail.aio_nbytes = 100, tail.aio_offset = 16380;
    CHECK(aio_read(&tail) == 0);
    CHECK(finish(&tail) == 4);

    struct aiocb s = {0};
    s.aio_fildes = fd;
    CHECK(aio_fsync(O_SYNC, &s) == 0);
    CHECK(finish(&s) == 0);
    CHECK(aio_cancel(fd, NULL) == AIO_ALLDONE);

    /* A failed request: its errno from aio_error, -1 from aio_return. */
    struct aiocb bad = {0};
    bad.aio_fildes = fd, bad.aio_buf = back, bad.aio_nbytes = 10, bad.aio_offset = -1;
    if (aio_write(&bad) == 0) {
        while (aio_error(&bad) == EINPROGRESS) usleep(1000);
        CHECK(aio_error(&bad) == EINVAL);
        CHECK(aio_return(&bad) == -1);
    } else {
        CHECK(errno == EINVAL);
    }
    CHECK(close(fd) == 0);

    /* What was written is the file, read back with plain read. */
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    memset(back, 0, sizeof back);
    CHECK(read(fd, back, sizeof back) == (ssize_t)sizeof back);
    CHECK(memcmp(back, a, sizeof a) == 0 && memcmp(back + 8192, b, 8192) == 0);
    close(fd);
    printf("C-OK\n");
    return 0;
}
