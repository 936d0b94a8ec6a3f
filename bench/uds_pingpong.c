/* The floor under any synchronous RPC on this machine: processes doing
 * request/response ping-pong of 64-byte messages over Unix stream sockets, the same
 * kernel path a GustFS client and a daemon on one node use.
 *
 *   uds_pingpong P ITERS        P pairs, each client talking to its own server.
 *   uds_pingpong P ITERS S      P clients and S servers, every client connected to
 *                               every server and asking them in turn, each server
 *                               one thread waiting in epoll on its P connections:
 *                               the shape of `gust bench md -p P` on an instance of
 *                               S daemons on one node (a daemon that does nothing).
 *
 * Build and run:  cc -O2 -o /tmp/uds_pingpong bench/uds_pingpong.c && /tmp/uds_pingpong 4 200000 4
 * Prints round trips per second summed over all clients. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* One server: answers every message on its connections until all are closed. */
static void serve(int *fds, int n) {
  char buf[64];
  int ep = epoll_create1(0);
  for (int i = 0; i < n; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0) _exit(1);
  }
  for (int open = n; open > 0;) {
    struct epoll_event evs[16];
    int k = epoll_wait(ep, evs, 16, -1);
    for (int i = 0; i < k; i++) {
      ssize_t r = read(evs[i].data.fd, buf, sizeof buf);
      if (r <= 0) {
        close(evs[i].data.fd);
        open--;
        continue;
      }
      if (write(evs[i].data.fd, buf, r) != r) _exit(1);
    }
  }
  _exit(0);
}

int main(int argc, char **argv) {
  int clients = argc > 1 ? atoi(argv[1]) : 4;
  long iters = argc > 2 ? atol(argv[2]) : 200000;
  int servers = argc > 3 ? atoi(argv[3]) : 0; /* 0: pairs */
  int links = servers ? servers : 1;
  char buf[64] = {0};
  /* fd[c][s]: client c's end and server s's end of their connection. */
  int cl[64][64], sv[64][64];
  if (clients < 1 || clients > 64 || links > 64) return 2;
  for (int c = 0; c < clients; c++)
    for (int s = 0; s < links; s++) {
      int p[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0) return 1;
      cl[c][s] = p[0];
      sv[c][s] = p[1];
    }
  double t0 = now();
  int nserv = servers ? servers : clients;
  for (int s = 0; s < nserv; s++) {
    if (fork() == 0) {
      int mine[64], n = 0;
      for (int c = 0; c < clients; c++)
        for (int t = 0; t < links; t++) {
          close(cl[c][t]);
          if (servers ? t == s : c == s) mine[n++] = sv[c][t];
          else close(sv[c][t]);
        }
      serve(mine, n);
    }
  }
  for (int c = 0; c < clients; c++) {
    if (fork() == 0) {
      for (int d = 0; d < clients; d++)
        for (int t = 0; t < links; t++) {
          close(sv[d][t]);
          if (d != c) close(cl[d][t]);
        }
      for (long i = 0; i < iters; i++) {
        int fd = cl[c][i % links];
        if (write(fd, buf, sizeof buf) != sizeof buf) _exit(1);
        if (read(fd, buf, sizeof buf) <= 0) _exit(1);
      }
      for (int t = 0; t < links; t++) close(cl[c][t]);
      _exit(0);
    }
  }
  for (int c = 0; c < clients; c++)
    for (int t = 0; t < links; t++) {
      close(cl[c][t]);
      close(sv[c][t]);
    }
  while (wait(NULL) > 0) {}
  double dt = now() - t0;
  if (servers)
    printf("%d clients, %d servers: %.0f round trips/s\n", clients, servers, clients * iters / dt);
  else
    printf("%d pairs: %.0f round trips/s\n", clients, clients * iters / dt);
  return 0;
}
