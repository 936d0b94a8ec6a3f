/* The floor under any synchronous RPC on this machine: P pairs of processes doing
 * request/response ping-pong of 64-byte messages over Unix stream sockets, the same
 * kernel path a GustFS client and a daemon on one node use.
 * Build and run:  cc -O2 -o /tmp/uds_pingpong bench/uds_pingpong.c && /tmp/uds_pingpong 4 200000
 * Prints round trips per second summed over all pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int pairs = argc > 1 ? atoi(argv[1]) : 4;
  long iters = argc > 2 ? atol(argv[2]) : 200000;
  char buf[64] = {0};
  double t0 = now();
  for (int p = 0; p < pairs; p++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    if (fork() == 0) { /* server */
      close(sv[0]);
      for (long i = 0; i < iters; i++) {
        if (read(sv[1], buf, sizeof buf) <= 0) _exit(1);
        if (write(sv[1], buf, sizeof buf) != sizeof buf) _exit(1);
      }
      _exit(0);
    }
    if (fork() == 0) { /* client */
      close(sv[1]);
      for (long i = 0; i < iters; i++) {
        if (write(sv[0], buf, sizeof buf) != sizeof buf) _exit(1);
        if (read(sv[0], buf, sizeof buf) <= 0) _exit(1);
      }
      _exit(0);
    }
    close(sv[0]);
    close(sv[1]);
  }
  while (wait(NULL) > 0) {}
  double dt = now() - t0;
  printf("%d pairs: %.0f round trips/s\n", pairs, pairs * iters / dt);
  return 0;
}
