/* scps-bench-wire: the floor of moving bytes over loopback TCP on this
 * machine, which no message over the same wire can beat. */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "scps_bench.h"
#include "scps_clock.h"

static const char usage[] =
    "usage: scps-bench-wire [--mib M[,M...]] [--rounds R]\n"
    "Moves M MiB (default 8,32) R times (default 30) from one thread to another\n"
    "over a loopback TCP connection (TCP_NODELAY, the kernel's default buffers):\n"
    "the receiver asks with one byte and reads the answer into one buffer with\n"
    "recv(). That is the least a lookup's answer of as many bytes costs here:\n"
    "the sender's copy into the kernel, the receiver's copy out, and TCP between.\n"
    "Prints one JSON line per size: median and best milliseconds and GB/s at\n"
    "the median (1 GB = 10^9 bytes).\n";

#define MAX_SIZES 8
#define MAX_ROUNDS 1000

typedef struct sender {
  int fd;
  const uint8_t *buf;
  size_t len;
  int rounds;
  int err; /* errno of the first failure, or 0 */
} sender;

static int send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : EPIPE;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : ECONNRESET;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void *sender_main(void *arg) {
  sender *s = arg;
  uint8_t ask;
  for (int r = 0; r < s->rounds && !s->err; r++) {
    s->err = recv_all(s->fd, &ask, 1);
    if (!s->err) s->err = send_all(s->fd, s->buf, s->len);
  }
  return NULL;
}

static int nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A connected pair over 127.0.0.1: *a accepted, *b connected. */
static int loopback_pair(int *a, int *b) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) return errno;
  int rc = 0;
  if (bind(l, (struct sockaddr *)&addr, sizeof addr) || listen(l, 1) || getsockname(l, (struct sockaddr *)&addr, &len))
    rc = errno;
  *b = rc ? -1 : socket(AF_INET, SOCK_STREAM, 0);
  if (!rc && *b < 0) rc = errno;
  if (!rc && connect(*b, (struct sockaddr *)&addr, sizeof addr)) rc = errno;
  *a = rc ? -1 : accept(l, NULL, NULL);
  if (!rc && *a < 0) rc = errno;
  if (!rc && (nodelay(*a) || nodelay(*b))) rc = errno;
  close(l);
  return rc;
}

static int measure(size_t len, int rounds, double *t) {
  uint8_t *out = malloc(len), *in = malloc(len);
  int a = -1, b = -1, rc = out && in ? 0 : ENOMEM;
  if (!rc) {
    /* Both buffers touched first, so no round pays for page faults. */
    for (size_t i = 0; i < len; i++) out[i] = (uint8_t)(i * 131u);
    memset(in, 0, len);
    rc = loopback_pair(&a, &b);
  }
  pthread_t th;
  sender s = {.fd = a, .buf = out, .len = len, .rounds = rounds};
  int started = !rc && !pthread_create(&th, NULL, sender_main, &s);
  if (!rc && !started) rc = EAGAIN;
  for (int r = 0; !rc && r < rounds; r++) {
    const uint8_t ask = 1;
    double t0 = scps__clock_s();
    rc = send_all(b, &ask, 1);
    if (!rc) rc = recv_all(b, in, len);
    t[r] = scps__clock_s() - t0;
  }
  if (b >= 0) shutdown(b, SHUT_RDWR);
  if (started) pthread_join(th, NULL);
  if (!rc) rc = s.err;
  if (!rc && memcmp(in, out, len)) rc = EIO;
  if (a >= 0) close(a);
  if (b >= 0) close(b);
  free(out);
  free(in);
  return rc;
}

int main(int argc, char **argv) {
  long mib[MAX_SIZES] = {8, 32};
  int n_sizes = 2, rounds = 30;
  static const struct option opts[] = {
      {"mib", required_argument, 0, 'm'}, {"rounds", required_argument, 0, 'r'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'm':
      n_sizes = 0;
      for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > 1024 || n_sizes == MAX_SIZES) {
          fprintf(stderr, "scps-bench-wire: --mib: '%s' is not a size in [1, 1024] (at most %d sizes)\n", tok,
                  MAX_SIZES);
          return 2;
        }
        mib[n_sizes++] = v;
      }
      break;
    case 'r':
      rounds = atoi(optarg);
      if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "scps-bench-wire: --rounds '%s' is not in [1, %d]\n", optarg, MAX_ROUNDS);
        return 2;
      }
      break;
    case 'h': fputs(usage, stdout); return 0;
    default: fputs(usage, stderr); return 2;
    }
  }
  if (optind < argc || n_sizes == 0) {
    fputs(usage, stderr);
    return 2;
  }
  double t[MAX_ROUNDS];
  for (int i = 0; i < n_sizes; i++) {
    size_t len = (size_t)mib[i] << 20;
    int rc = measure(len, rounds, t);
    if (rc) {
      fprintf(stderr, "scps-bench-wire: %ld MiB over loopback TCP: %s\n", mib[i], strerror(rc));
      return 1;
    }
    double med = scps_bench_median(t, (size_t)rounds);
    scps_bench_sort(t, (size_t)rounds);
    printf("{\"bench\": \"wire\", \"transport\": \"loopback tcp\", \"bytes\": %zu, \"rounds\": %d, "
           "\"ms_median\": %.3f, \"ms_best\": %.3f, \"gb_per_s\": %.3f}\n",
           len, rounds, med * 1e3, t[0] * 1e3, (double)len / med * 1e-9);
  }
  return 0;
}
