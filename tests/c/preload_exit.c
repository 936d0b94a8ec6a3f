/* Writes that a process makes as it ends, run under the preload library
 * (tests/tests/preload_exit.rs). Usage: preload_exit DIR MODE
 *   atexit  a write from the program's own atexit handler to a descriptor opened
 *           in main and never closed, a file created in that handler, and a stdio
 *           stream left unflushed (glibc flushes it after every handler)
 *   _exit   writes (a small file and one past the inline bound), then _exit
 *   fork    an O_APPEND file written by a parent, a forked child that ends with
 *           _exit, and the parent again; a vfork child that only calls _exit
 * Prints nothing on success; the test reads the files back through the client. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];
static int kept_fd = -1;

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void put(int fd, const char *s) {
    if (write(fd, s, strlen(s)) != (ssize_t)strlen(s)) die("write");
}

static int open_in(const char *name, int flags) {
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, flags, 0644);
    if (fd < 0) die(p);
    return fd;
}

static void handler(void) {
    put(kept_fd, "from-handler\n");
    int fd = open_in("made-in-handler", O_WRONLY | O_CREAT | O_TRUNC);
    put(fd, "made\n");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: preload_exit DIR atexit|_exit|fork\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    if (!strcmp(argv[2], "atexit")) {
        kept_fd = open_in("kept", O_WRONLY | O_CREAT | O_TRUNC);
        put(kept_fd, "from-main\n");
        char p[8192];
        snprintf(p, sizeof p, "%s/stream", dir);
        FILE *s = fopen(p, "w");
        if (!s) die(p);
        fputs("buffered-in-stdio\n", s); /* left for exit's last flush */
        atexit(handler);
        return 0;
    }
    if (!strcmp(argv[2], "_exit")) {
        int fd = open_in("small", O_WRONLY | O_CREAT | O_TRUNC);
        put(fd, "before-_exit\n");
        int big = open_in("big", O_WRONLY | O_CREAT | O_TRUNC);
        static char buf[600 * 1024];
        memset(buf, 'b', sizeof buf);
        if (write(big, buf, sizeof buf) != (ssize_t)sizeof buf) die("write big");
        if (pwrite(big, "end", 3, 1 << 20) != 3) die("pwrite big");
        _exit(0);
    }
    if (!strcmp(argv[2], "fork")) {
        int fd = open_in("appended", O_WRONLY | O_CREAT | O_TRUNC | O_APPEND);
        put(fd, "parent-1\n");
        pid_t c = fork();
        if (c < 0) die("fork");
        if (c == 0) {
            put(fd, "child\n");
            _exit(0);
        }
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("child");
        pid_t v = vfork();
        if (v < 0) die("vfork");
        if (v == 0) _exit(3);
        if (waitpid(v, &st, 0) != v || !WIFEXITED(st) || WEXITSTATUS(st) != 3) die("vfork child");
        put(fd, "parent-2\n");
        if (close(fd) != 0) die("close");
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 2;
}
