/* A long-lived process under the LD_PRELOAD library for tests/tests/grants.rs:
 * reads commands on stdin, one per line, answers each on one line of stdout.
 *   stat PATH   -> "mode OCTAL size N" or "errno N"
 *   read PATH   -> "data TEXT" (the first 64 bytes) or "errno N"
 *   quit        -> exits
 * Prints "ready" first. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        } else if (strcmp(line, "quit") == 0) {
            return 0;
        } else {
            printf("unknown command\n");
        }
    }
    return 0;
}
