/* Fills a GustFS instance with a tree for the find benchmark, fast: the C API
 * (libgust.so, the client core without interception) from T threads.
 *   find_tree HOSTS_FILE ROOT FILES THREADS FILES_PER_DIR
 * makes ROOT/dK (K = 0..FILES/FILES_PER_DIR) holding files fN (0-byte; every
 * 1000th file gets 5000 bytes, so `-size +4k` selects a thousandth of them).
 * Build: cc -O2 -pthread -I crates/capi/include bench/find_tree.c -L DIR -lgust */
#include "gust.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gust_fs *fs;
static const char *root;
static long files, threads, per_dir;

static void *work(void *arg) {
    long t = (long)arg;
    static const char data[5000];
    char p[4096];
    long dirs = (files + per_dir - 1) / per_dir;
    for (long d = t; d < dirs; d += threads) {
        snprintf(p, sizeof p, "%s/d%ld", root, d);
        if (gust_mkdir(fs, p, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "%s\n", gust_last_error());
            exit(1);
        }
        for (long i = d * per_dir; i < (d + 1) * per_dir && i < files; i++) {
            snprintf(p, sizeof p, "%s/d%ld/f%ld", root, d, i);
            int fd = gust_open(fs, p, O_CREAT | O_WRONLY, 0644);
            if (fd < 0) {
                fprintf(stderr, "%s\n", gust_last_error());
                exit(1);
            }
            if (i % 1000 == 999 && gust_write(fs, fd, data, sizeof data) != (ssize_t)sizeof data) {
                fprintf(stderr, "%s\n", gust_last_error());
                exit(1);
            }
            gust_close(fs, fd);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: find_tree HOSTS_FILE ROOT FILES THREADS FILES_PER_DIR\n");
        return 2;
    }
    fs = gust_mount(argv[1]);
    if (!fs) {
        fprintf(stderr, "%s\n", gust_last_error());
        return 1;
    }
    root = argv[2];
    files = atol(argv[3]);
    threads = atol(argv[4]);
    per_dir = atol(argv[5]);
    if (gust_mkdir(fs, root, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s\n", gust_last_error());
        return 1;
    }
    pthread_t th[64];
    if (threads < 1 || threads > 64 || per_dir < 1) return 2;
    for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, work, (void *)t);
    for (long t = 0; t < threads; t++) pthread_join(th[t], NULL);
    gust_unmount(fs);
    return 0;
}
