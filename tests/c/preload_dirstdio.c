/* scandir, readdir_r and freopen on a directory given as argv[1]: run under the
 * preload library on a GustFS directory, and plainly on a local one as a control.
 * Prints "C-OK" on stderr when every check passed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)

static int no_dots(const struct dirent *e) { return e->d_name[0] != '.'; }

int main(int argc, char **argv) {
  CHECK(argc == 2);
  const char *dir = argv[1];
  char p[4096];
  const char *names[] = {"b", "a", "c"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
    CHECK(fd >= 0);
    CHECK(close(fd) == 0);
  }
  /* scandir: filtered and sorted. */
  struct dirent **list;
  int n = scandir(dir, &list, no_dots, alphasort);
  CHECK(n == 3);
  CHECK(strcmp(list[0]->d_name, "a") == 0 && strcmp(list[1]->d_name, "b") == 0 && strcmp(list[2]->d_name, "c") == 0);
  for (int i = 0; i < n; i++) free(list[i]);
  free(list);
  snprintf(p, sizeof p, "%s/missing", dir);
  CHECK(scandir(p, &list, NULL, NULL) == -1 && errno == ENOENT);
  /* readdir_r: every entry once, including . and .. */
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  struct dirent ent, *res;
  int count = 0, seen = 0;
  while (readdir_r(d, &ent, &res) == 0 && res != NULL) {
    count++;
    if (strcmp(res->d_name, "a") == 0 || strcmp(res->d_name, "b") == 0 || strcmp(res->d_name, "c") == 0) seen++;
  }
  CHECK(res == NULL);
  CHECK(count == 5 && seen == 3);
  CHECK(closedir(d) == 0);
  /* freopen of a non-standard stream. */
  snprintf(p, sizeof p, "%s/x", dir);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  snprintf(p, sizeof p, "%s/y", dir);
  f = freopen(p, "w", f);
  CHECK(f != NULL);
  CHECK(fputs("why\n", f) >= 0);
  CHECK(fclose(f) == 0);
  char buf[64] = {0};
  f = fopen(p, "r");
  CHECK(f != NULL && fgets(buf, sizeof buf, f) != NULL && strcmp(buf, "why\n") == 0);
  fclose(f);
  /* freopen of stdout: printf lands in the file. */
  snprintf(p, sizeof p, "%s/out", dir);
  CHECK(freopen(p, "w", stdout) != NULL);
  printf("to the file %d\n", 42);
  CHECK(fflush(stdout) == 0);
  f = fopen(p, "r");
  memset(buf, 0, sizeof buf);
  CHECK(f != NULL && fgets(buf, sizeof buf, f) != NULL);
  CHECK(strcmp(buf, "to the file 42\n") == 0);
  fclose(f);
  fprintf(stderr, "C-OK\n");
  return 0;
}
