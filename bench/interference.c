/* A fixed CPU-bound kernel, the application's compute loop in
 * bench/run_interference.sh: T threads (default: one per core the process may use),
 * each running a dependent multiply-add chain over an array that stays in L1, for D
 * seconds. Prints the iterations per second of all threads together, the kernel's
 * speed; beside a GustFS I/O load it shows what the daemons took from it.
 *
 * Build: cc -O2 -pthread bench/interference.c -o interference
 * Usage: interference SECONDS [THREADS]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds;
static atomic_int stop;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *work(void *arg) {
    unsigned long *iterations = arg;
    double a[1024];
    for (int i = 0; i < 1024; i++)
        a[i] = 1.0 + i * 1e-9;
    unsigned long n = 0;
    double x = 0.5;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 4096; k++)
            x = x * a[k & 1023] + 1e-12;
        n++;
    }
    /* Keeps the chain from being optimized away. */
    if (x == 42.0)
        fprintf(stderr, "%f\n", x);
    *iterations = n;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SECONDS [THREADS]\n", argv[0]);
        return 2;
    }
    seconds = atof(argv[1]);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    int threads = argc > 2 ? atoi(argv[2]) : CPU_COUNT(&set);
    if (threads < 1 || threads > 1024 || seconds <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    pthread_t *t = calloc(threads, sizeof *t);
    unsigned long *counts = calloc(threads, sizeof *counts);
    double start = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, work, &counts[i]);
    struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    unsigned long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        total += counts[i];
    }
    printf("%.1f\n", total / (now() - start));
    return 0;
}
