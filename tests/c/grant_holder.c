/* A long-lived process under the LD_PRELOAD library for tests/tests/grants.rs:
 * reads commands on stdin, one per line, answers each on one line of stdout.
 *   stat PATH   -> "mode OCTAL size N" or "errno N"
 *   read PATH   -> "data TEXT" (the first 64 bytes) or "errno N"
 *   ls PATH     -> "names A B ..." (sorted, without . and ..) or "errno N"
 *   fork        -> "child": the child answers the commands from now on; at its
 *                  "quit" it exits, and the parent answers "parent" and goes on
 *   fork-leave  -> "child": the child answers from now on, the parent exits at once
 *   quit        -> exits
 * Prints "ready" first. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        printf("errno %d\n", errno);
        return;
    }
    char *names[1024];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    printf("names");
    for (size_t i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
}

int main(void) {
    char line[4096];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "stat ", 5) == 0) {
            struct stat st;
            if (stat(line + 5, &st) == 0)
                printf("mode %o size %lld\n", st.st_mode & 07777, (long long)st.st_size);
            else
                printf("errno %d\n", errno);
        } else if (strncmp(line, "read ", 5) == 0) {
            char buf[65];
            int fd = open(line + 5, O_RDONLY);
            if (fd < 0) {
                printf("errno %d\n", errno);
                continue;
            }
            ssize_t n = read(fd, buf, 64);
            int e = errno;
            close(fd);
            if (n < 0) {
                printf("errno %d\n", e);
                continue;
            }
            buf[n] = 0;
            printf("data %s\n", buf);
        } else if (strncmp(line, "ls ", 3) == 0) {
            list(line + 3);
        } else if (strcmp(line, "fork") == 0) {
            pid_t pid = fork();
            if (pid < 0) {
                printf("errno %d\n", errno);
            } else if (pid == 0) {
                printf("child\n");
            } else {
                int status;
                waitpid(pid, &status, 0);
                printf("parent\n");
            }
        } else if (strcmp(line, "fork-leave") == 0) {
            pid_t pid = fork();
            if (pid < 0)
                printf("errno %d\n", errno);
            else if (pid == 0)
                printf("child\n");
            else
                _exit(0);
        } else if (strcmp(line, "quit") == 0) {
            return 0;
        } else {
            printf("unknown command\n");
        }
    }
    return 0;
}
