/* Forks while another thread sends a descriptor's size: a writer thread writes and
 * fsyncs one file in a loop (each fsync sends the size it reached), the main thread
 * forks children that make a path call each and exit. A child that inherits a
 * lock held by the sender (a thread it does not have) must not wait for it.
 * Usage: fork_while_sending DIR FORKS. Prints C-OK, or what went wrong; a child not
 * done within 60 s counts as hung (it is killed). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static atomic_long sent;
static int fd;

static void *writer(void *arg) {
    (void)arg;
    for (long i = 0; !atomic_load(&stop); i++) {
        char c = (char)('a' + i % 26);
        if (pwrite(fd, &c, 1, i % 4096) != 1 || fsync(fd) != 0) {
            fprintf(stderr, "write or fsync: %s\n", strerror(errno));
            exit(1);
        }
        atomic_fetch_add(&sent, 1);
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DIR FORKS\n", argv[0]);
        return 2;
    }
    char file[4096], other[4096];
    snprintf(file, sizeof file, "%s/written", argv[1]);
    snprintf(other, sizeof other, "%s/other", argv[1]);
    int forks = atoi(argv[2]);
    fd = open(file, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", file, strerror(errno));
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, writer, NULL) != 0) return 1;
    /* The writer is sending before the first fork. */
    while (atomic_load(&sent) < 10) sched_yield();
    for (int k = 0; k < forks; k++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "fork: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            struct stat st;
            int ok = stat(file, &st) == 0 && stat(other, &st) != 0 && errno == ENOENT;
            _exit(ok ? 0 : 3);
        }
        double deadline = now() + 60;
        int status;
        pid_t w;
        while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now() < deadline) usleep(1000);
        if (w == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("child of fork %d hung\n", k);
            return 1;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("child of fork %d failed (status %d)\n", k, status);
            return 1;
        }
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    if (close(fd) != 0) return 1;
    printf("C-OK\n");
    return 0;
}
