/* A fixed CPU-bound kernel, the application's compute loop in
 * bench/run_interference.sh: T threads (default: one per core the process may use),
 * each running a dependent multiply-add chain over an array that stays in L1, for D
 * seconds. Prints the iterations per second of all threads together, the kernel's
 * speed, then the slowest thread's times the threads: a bulk-synchronous job's
 * speed, which waits for its slowest rank. Beside a GustFS I/O load they show what
 * the daemons took from it. With BIND set, thread i runs on the i-th core the
 * process may use only (an MPI job's ranks bound to cores).
 *
 * Build: cc -O2 -pthread bench/interference.c -o interference
 * Usage: [BIND=1] interference SECONDS [THREADS]
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
static cpu_set_t allowed;
static int bind;

struct worker {
    int index;
    unsigned long iterations;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *work(void *arg) {
    struct worker *w = arg;
    if (bind) {
        int seen = -1;
        for (int c = 0; c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &allowed) && ++seen == w->index % CPU_COUNT(&allowed)) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(c, &one);
                pthread_setaffinity_np(pthread_self(), sizeof one, &one);
                break;
            }
        }
    }
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
    w->iterations = n;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SECONDS [THREADS]\n", argv[0]);
        return 2;
    }
    seconds = atof(argv[1]);
    sched_getaffinity(0, sizeof allowed, &allowed);
    bind = getenv("BIND") != NULL;
    int threads = argc > 2 ? atoi(argv[2]) : CPU_COUNT(&allowed);
    if (threads < 1 || threads > 1024 || seconds <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    pthread_t *t = calloc(threads, sizeof *t);
    struct worker *ws = calloc(threads, sizeof *ws);
    double start = now();
    for (int i = 0; i < threads; i++) {
        ws[i].index = i;
        pthread_create(&t[i], NULL, work, &ws[i]);
    }
    struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    unsigned long total = 0, slowest = (unsigned long)-1;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        total += ws[i].iterations;
        if (ws[i].iterations < slowest)
            slowest = ws[i].iterations;
    }
    double took = now() - start;
    printf("%.1f %.1f\n", total / took, (double)slowest * threads / took);
    return 0;
}
