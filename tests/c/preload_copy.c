// copy_file_range and sendfile between GustFS and other files, as cp and other tools
// call them: huge lengths, null and explicit offsets, sources that say 0 bytes and
// hold more (/proc), pipes, and copies longer than one emulated call moves.
// Usage: preload_copy DIR LOCALDIR [gust]  (DIR on GustFS or local; LOCALDIR local;
// `gust` when DIR is GustFS: then /proc is copied too, which Linux refuses between
// two local file systems with EXDEV and the emulation serves). Prints
// C-OK on success; any failed check prints what and exits 1.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(c)                                                                   \
  do {                                                                             \
    if (!(c)) {                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__, __LINE__, \
              #c, errno, strerror(errno));                                         \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static char path_buf[4][4096];
static const char *at(int slot, const char *dir, const char *name) {
  snprintf(path_buf[slot], sizeof path_buf[slot], "%s/%s", dir, name);
  return path_buf[slot];
}

static void fill(char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (char)((i * 131 + seed) >> 3);
}

static void write_file(const char *p, const char *b, size_t n) {
  int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  CHECK(fd >= 0);
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, b + done, n - done);
    CHECK(w > 0);
    done += (size_t)w;
  }
  CHECK(close(fd) == 0);
}

static size_t read_file(const char *p, char *b, size_t cap) {
  int fd = open(p, O_RDONLY);
  CHECK(fd >= 0);
  size_t done = 0;
  for (;;) {
    ssize_t r = read(fd, b + done, cap - done);
    CHECK(r >= 0);
    if (r == 0) break;
    done += (size_t)r;
  }
  CHECK(close(fd) == 0);
  return done;
}

// cp's loop: copy_file_range with a huge length until it returns 0.
static size_t copy_all(int in, int out) {
  size_t total = 0;
  for (;;) {
    ssize_t n = copy_file_range(in, NULL, out, NULL, SSIZE_MAX, 0);
    CHECK(n >= 0);
    if (n == 0) return total;
    total += (size_t)n;
  }
}

int main(int argc, char **argv) {
  CHECK(argc == 3 || argc == 4);
  int on_gust = argc == 4;
  const char *dir = argv[1], *local = argv[2];
  const size_t big = (9u << 20) + 12345; // longer than one emulated call (8 MiB)
  char *src = malloc(big), *got = malloc(big + 1);
  CHECK(src && got);
  fill(src, big, 7);

  // 1. Small and large files, local -> dir and dir -> dir -> local, as cp does it.
  size_t sizes[] = {0, 1, 4096, 700000, big};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    write_file(at(0, local, "src"), src, n);
    int in = open(at(0, local, "src"), O_RDONLY);
    int out = open(at(1, dir, "a"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(in >= 0 && out >= 0);
    CHECK(copy_all(in, out) == n);
    CHECK(close(in) == 0 && close(out) == 0);
    in = open(at(1, dir, "a"), O_RDONLY);
    out = open(at(2, dir, "b"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(in >= 0 && out >= 0);
    CHECK(copy_all(in, out) == n);
    CHECK(close(in) == 0 && close(out) == 0);
    in = open(at(2, dir, "b"), O_RDONLY);
    out = open(at(3, local, "back"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(in >= 0 && out >= 0);
    CHECK(copy_all(in, out) == n);
    CHECK(close(in) == 0 && close(out) == 0);
    CHECK(read_file(at(3, local, "back"), got, big + 1) == n);
    CHECK(memcmp(got, src, n) == 0);
  }

  // 2. Explicit offsets: they advance; the descriptors' own offsets do not move.
  write_file(at(0, dir, "off"), src, 100000);
  int in = open(at(0, dir, "off"), O_RDONLY);
  int out = open(at(1, dir, "offout"), O_CREAT | O_TRUNC | O_RDWR, 0644);
  CHECK(in >= 0 && out >= 0);
  loff_t oi = 1000, oo = 50;
  CHECK(copy_file_range(in, &oi, out, &oo, 30000, 0) == 30000);
  CHECK(oi == 31000 && oo == 30050);
  CHECK(lseek(in, 0, SEEK_CUR) == 0 && lseek(out, 0, SEEK_CUR) == 0);
  // Asking past the end gives what is there, then 0.
  oi = 99000;
  CHECK(copy_file_range(in, &oi, out, &oo, SSIZE_MAX, 0) == 1000);
  CHECK(copy_file_range(in, &oi, out, &oo, SSIZE_MAX, 0) == 0);
  CHECK(close(in) == 0 && close(out) == 0);
  CHECK(read_file(at(1, dir, "offout"), got, big + 1) == 31050);
  CHECK(memcmp(got + 50, src + 1000, 30000) == 0 && memcmp(got + 30050, src + 99000, 1000) == 0);

  // 3. A source that says 0 bytes and holds more: /proc.
  if (on_gust) {
  in = open("/proc/self/status", O_RDONLY);
  out = open(at(0, dir, "status"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  CHECK(in >= 0 && out >= 0);
  size_t n = copy_all(in, out);
  CHECK(n > 100);
  CHECK(close(in) == 0 && close(out) == 0);
  CHECK(read_file(at(0, dir, "status"), got, big + 1) == n && memcmp(got, "Name:", 5) == 0);
  }

  // 4. sendfile from a file to a pipe, and from the current offset.
  write_file(at(0, dir, "sf"), src, 5000);
  int p[2];
  CHECK(pipe(p) == 0);
  in = open(at(0, dir, "sf"), O_RDONLY);
  CHECK(in >= 0 && lseek(in, 100, SEEK_SET) == 100);
  CHECK(sendfile(p[1], in, NULL, 60000) == 4900);
  CHECK(lseek(in, 0, SEEK_CUR) == 5000);
  CHECK(read(p[0], got, 60000) == 4900 && memcmp(got, src + 100, 4900) == 0);
  off_t so = 10;
  CHECK(sendfile(p[1], in, &so, 20) == 20 && so == 30);
  CHECK(read(p[0], got, 100) == 20 && memcmp(got, src + 10, 20) == 0);
  CHECK(close(in) == 0);

  // 5. Errors: a bad descriptor, flags, a write-only source.
  out = open(at(1, dir, "e"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  CHECK(out >= 0);
  errno = 0;
  CHECK(copy_file_range(out, NULL, out, NULL, 10, 0) == -1 && errno == EBADF);
  in = open(at(0, dir, "sf"), O_RDONLY);
  errno = 0;
  CHECK(copy_file_range(in, NULL, out, NULL, 10, 1) == -1 && errno == EINVAL);
  CHECK(close(in) == 0 && close(out) == 0);

  puts("C-OK");
  return 0;
}
