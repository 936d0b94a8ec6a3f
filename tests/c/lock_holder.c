/* A long-lived process for tests/tests/locks.rs, under the LD_PRELOAD library or on
 * a FUSE mount: reads commands on stdin, one per line, answers each on one line.
 *   open PATH            -> "fd N" (O_RDWR|O_CREAT, 0644) or "errno E"
 *   openro PATH          -> "fd N" (O_RDONLY) or "errno E"
 *   close N              -> "ok" or "errno E"
 *   flock N sh|ex|un [nb]             -> "ok" or "errno E"
 *   lock N rd|wr|un START LEN [wait]  -> fcntl F_SETLK (F_SETLKW with wait)
 *   ofd N rd|wr|un START LEN [wait]   -> fcntl F_OFD_SETLK (F_OFD_SETLKW)
 *   getlk N rd|wr START LEN           -> "unlocked" or "locked rd|wr START LEN PID"
 *   ofdgetlk N rd|wr START LEN        -> the same with F_OFD_GETLK
 *   lockf N lock|tlock|ulock|test LEN -> lockf(3) from the descriptor's offset
 *   alarm S              -> "ok": SIGALRM in S seconds, its handler installed
 *                           without SA_RESTART (a blocking lock then gets EINTR)
 *   pid                  -> "pid N"
 *   quit                 -> exits
 * Prints "ready" first. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static void on_alarm(int sig) { (void)sig; }

static int type_of(const char *s) {
    if (strcmp(s, "rd") == 0) return F_RDLCK;
    if (strcmp(s, "wr") == 0) return F_WRLCK;
    return F_UNLCK;
}

static void answer(int r) {
    if (r == 0)
        printf("ok\n");
    else
        printf("errno %d\n", errno);
}

int main(void) {
    char line[4096], a[4096], b[64], c[64];
    long long x, y;
    int fd;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        c[0] = 0;
        if (sscanf(line, "open %4095s", a) == 1 || sscanf(line, "openro %4095s", a) == 1) {
            int ro = strncmp(line, "openro", 6) == 0;
            fd = ro ? open(a, O_RDONLY) : open(a, O_RDWR | O_CREAT, 0644);
            if (fd < 0)
                printf("errno %d\n", errno);
            else
                printf("fd %d\n", fd);
        } else if (sscanf(line, "close %d", &fd) == 1) {
            answer(close(fd));
        } else if (sscanf(line, "flock %d %63s %63s", &fd, b, c) >= 2) {
            int op = strcmp(b, "sh") == 0 ? LOCK_SH : strcmp(b, "ex") == 0 ? LOCK_EX : LOCK_UN;
            if (strcmp(c, "nb") == 0) op |= LOCK_NB;
            answer(flock(fd, op));
        } else if (sscanf(line, "lock %d %63s %lld %lld %63s", &fd, b, &x, &y, c) >= 4 ||
                   sscanf(line, "ofd %d %63s %lld %lld %63s", &fd, b, &x, &y, c) >= 4) {
            int ofd = strncmp(line, "ofd", 3) == 0, wait = strcmp(c, "wait") == 0;
            struct flock fl = {.l_type = type_of(b), .l_whence = SEEK_SET, .l_start = x, .l_len = y};
            int cmd = ofd ? (wait ? F_OFD_SETLKW : F_OFD_SETLK) : (wait ? F_SETLKW : F_SETLK);
            answer(fcntl(fd, cmd, &fl));
        } else if (sscanf(line, "getlk %d %63s %lld %lld", &fd, b, &x, &y) == 4 ||
                   sscanf(line, "ofdgetlk %d %63s %lld %lld", &fd, b, &x, &y) == 4) {
            int ofd = strncmp(line, "ofd", 3) == 0;
            struct flock fl = {.l_type = type_of(b), .l_whence = SEEK_SET, .l_start = x, .l_len = y};
            if (fcntl(fd, ofd ? F_OFD_GETLK : F_GETLK, &fl) != 0)
                printf("errno %d\n", errno);
            else if (fl.l_type == F_UNLCK)
                printf("unlocked\n");
            else
                printf("locked %s %lld %lld %d\n", fl.l_type == F_WRLCK ? "wr" : "rd", (long long)fl.l_start,
                       (long long)fl.l_len, (int)fl.l_pid);
        } else if (sscanf(line, "lockf %d %63s %lld", &fd, b, &x) == 3) {
            int cmd = strcmp(b, "lock") == 0 ? F_LOCK : strcmp(b, "tlock") == 0 ? F_TLOCK
                    : strcmp(b, "ulock") == 0 ? F_ULOCK : F_TEST;
            answer(lockf(fd, cmd, x));
        } else if (sscanf(line, "alarm %lld", &x) == 1) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_alarm;
            sigaction(SIGALRM, &sa, NULL);
            alarm((unsigned)x);
            printf("ok\n");
        } else if (strcmp(line, "pid") == 0) {
            printf("pid %d\n", (int)getpid());
        } else if (strcmp(line, "quit") == 0) {
            return 0;
        } else {
            printf("unknown command\n");
        }
    }
    return 0;
}
