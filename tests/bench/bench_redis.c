/* scps-bench-redis: the Redis anchor of tests/bench/run.sh. Serves a
 * workload's rows from a running redis-server and times pipelined MGETs of
 * each batch's ids, pooled into activations as a Redis-backed trainer would.
 *
 * Speaks RESP over one TCP socket, so it needs no client library. The rows
 * the generated batches touch are loaded first (key "TABLE:ID", value the
 * row's embedding_dim float32s, little-endian), then per batch and feature:
 * dedup the ids (unless --no-dedup), one MGET of them, sum the returned rows
 * per sample (weights and the table's combiner applied). All features' MGETs
 * of a batch are written at once; with --depth D up to D batches are in
 * flight, so the client prepares the next batch while Redis serves this one.
 * ids/s counts the batch's ids before dedup, as scps-bench-client does. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "scps_clock.h"
#include "scps_workload.h"
#include "scps_bench.h"

static const char usage[] =
    "usage: scps-bench-redis --workload FILE --port P [--host ADDR] [--batches K]\n"
    "                        [--warmup W] [--depth D] [--no-dedup] [--seed N]\n"
    "  --workload FILE  workload whose batches are generated (shard/scps_workload)\n"
    "  --port P         port of the redis-server to use (it should be empty and\n"
    "                   without persistence: the rows are written into it)\n"
    "  --host ADDR      its IPv4 address (default 127.0.0.1)\n"
    "  --batches K      batches timed (default 20); the median is reported\n"
    "  --warmup W       batches run before timing (default 3)\n"
    "  --depth D        batches in flight at once (default 1)\n"
    "  --no-dedup       MGET every id of a feature, repeats included\n"
    "  --seed N         generator seed (default 1, as scps-bench-client)\n"
    "Loads the rows the W + K distinct batches touch, then times the batches:\n"
    "per batch one MGET per feature, all written before any reply is read.\n"
    "ms_per_batch_median is the median time between successive batch\n"
    "completions (at depth 1 the whole step); samples/s, ids/s (batch ids\n"
    "before dedup) and rows/s (rows Redis returned) derive from it. Checks the\n"
    "pooled output of the last batch against the rows it loaded. Prints one\n"
    "JSON line.\n";

/* MSET commands carry this many keys each while loading. */
#define LOAD_CHUNK 512
/* Loading reads the OK replies after this many MSETs, bounding Redis's
 * output buffer. */
#define LOAD_WINDOW 64
#define MAX_BATCHES 10000
#define MAX_DEPTH 64
#define RBUF_MIN ((size_t)1 << 22)

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The value of element k of row id of table t: what Redis is loaded with and
 * what the final check recomputes. */
static float row_value(int t, int64_t id, int k) {
  uint64_t z = ((uint64_t)t << 48) ^ ((uint64_t)id << 8) ^ (uint64_t)k;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 0.1 - 0.05);
}

/* A growable output buffer. */
typedef struct wbuf {
  char *p;
  size_t len, cap;
} wbuf;

static int wbuf_reserve(wbuf *b, size_t more, scps_error *err) {
  if (b->len + more <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 1 << 16;
  while (cap < b->len + more) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return scps_error_set(err, SCPS_ENOMEM, "cannot grow the command buffer to %zu bytes", cap);
  b->p = p;
  b->cap = cap;
  return 0;
}

/* Appends "<prefix><n>\r\n"; the caller reserved room. */
static void wbuf_num(wbuf *b, char prefix, int64_t n) {
  char tmp[24];
  int k = 0;
  uint64_t u = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;
  do tmp[k++] = (char)('0' + u % 10); while (u /= 10);
  b->p[b->len++] = prefix;
  if (n < 0) b->p[b->len++] = '-';
  while (k) b->p[b->len++] = tmp[--k];
  b->p[b->len++] = '\r';
  b->p[b->len++] = '\n';
}

static int wbuf_bulk(wbuf *b, const void *data, size_t n, scps_error *err) {
  if (wbuf_reserve(b, n + 32, err)) return SCPS_ENOMEM;
  wbuf_num(b, '$', (int64_t)n);
  memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len++] = '\r';
  b->p[b->len++] = '\n';
  return 0;
}

/* Appends the bulk string "TABLE:ID". */
static int wbuf_key(wbuf *b, const char *table, size_t tlen, int64_t id, scps_error *err) {
  char key[SCPS_NAME_MAX + 24];
  memcpy(key, table, tlen);
  key[tlen] = ':';
  int n = snprintf(key + tlen + 1, sizeof key - tlen - 1, "%lld", (long long)id);
  return wbuf_bulk(b, key, tlen + 1 + (size_t)n, err);
}

/* One connection to redis-server with a read buffer. */
typedef struct conn {
  int fd;
  char *r;
  size_t rpos, rlen, rcap;
} conn;

static int conn_open(conn *c, const char *host, int port, scps_error *err) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
    return scps_error_set(err, SCPS_EINVAL, "--host '%s' is not an IPv4 address", host);
  c->rcap = RBUF_MIN;
  c->rpos = c->rlen = 0;
  c->r = malloc(c->rcap);
  if (!c->r) return scps_error_set(err, SCPS_ENOMEM, "cannot allocate a %zu-byte read buffer", c->rcap);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) return scps_error_set(err, SCPS_EIO, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a))
    return scps_error_set(err, SCPS_EUNAVAIL, "redis at %s:%d: %s", host, port, strerror(errno));
  return 0;
}

static void conn_close(conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->r);
}

static int conn_send(conn *c, wbuf *b, scps_error *err) {
  size_t off = 0;
  while (off < b->len) {
    ssize_t n = write(c->fd, b->p + off, b->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return scps_error_set(err, SCPS_EIO, "writing to redis: %s", n ? strerror(errno) : "closed");
    off += (size_t)n;
  }
  b->len = 0;
  return 0;
}

/* Makes n bytes available at c->r + c->rpos. */
static int conn_need(conn *c, size_t n, scps_error *err) {
  if (c->rlen - c->rpos >= n) return 0;
  if (c->rpos) {
    memmove(c->r, c->r + c->rpos, c->rlen - c->rpos);
    c->rlen -= c->rpos;
    c->rpos = 0;
  }
  if (n > c->rcap) {
    char *p = realloc(c->r, n);
    if (!p) return scps_error_set(err, SCPS_ENOMEM, "cannot grow the read buffer to %zu bytes", n);
    c->r = p;
    c->rcap = n;
  }
  while (c->rlen < n) {
    ssize_t k = read(c->fd, c->r + c->rlen, c->rcap - c->rlen);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return scps_error_set(err, SCPS_EIO, "reading from redis: %s", k ? strerror(errno) : "closed");
    c->rlen += (size_t)k;
  }
  return 0;
}

/* Reads one "<type><text>\r\n" line; *line points into the buffer (valid
 * until the next read) and *len excludes the CRLF. */
static int conn_line(conn *c, const char **line, size_t *len, scps_error *err) {
  for (size_t want = 2;; want = c->rlen - c->rpos + 1) {
    if (conn_need(c, want, err)) return err->code;
    char *s = c->r + c->rpos, *e = memchr(s, '\n', c->rlen - c->rpos);
    if (e) {
      if (e == s || e[-1] != '\r') return scps_error_set(err, SCPS_EPARSE, "redis reply line without CRLF");
      *line = s;
      *len = (size_t)(e - 1 - s);
      c->rpos += (size_t)(e + 1 - s);
      return 0;
    }
  }
}

/* Reads a line of type t ('*', '$', ':') and its integer. */
static int conn_int(conn *c, char t, int64_t *out, scps_error *err) {
  const char *s;
  size_t n;
  if (conn_line(c, &s, &n, err)) return err->code;
  if (n < 2 || s[0] != t) return scps_error_set(err, SCPS_EPARSE, "redis replied '%.*s', expected a '%c' reply", (int)(n > 200 ? 200 : n), s, t);
  char tmp[32];
  size_t k = n - 1 < sizeof tmp - 1 ? n - 1 : sizeof tmp - 1;
  memcpy(tmp, s + 1, k);
  tmp[k] = 0;
  *out = strtoll(tmp, NULL, 10);
  return 0;
}

static int conn_ok(conn *c, scps_error *err) {
  const char *s;
  size_t n;
  if (conn_line(c, &s, &n, err)) return err->code;
  if (n != 3 || memcmp(s, "+OK", 3)) return scps_error_set(err, SCPS_EPARSE, "redis replied '%.*s', expected +OK", (int)(n > 200 ? 200 : n), s);
  return 0;
}

/* Reads a bulk string of exactly n bytes into dst. */
static int conn_bulk(conn *c, void *dst, size_t n, const char *what, scps_error *err) {
  int64_t len;
  if (conn_int(c, '$', &len, err)) return err->code;
  if (len != (int64_t)n) return scps_error_set(err, SCPS_EPARSE, "%s: value of %lld bytes, expected %zu", what, (long long)len, n);
  if (conn_need(c, n + 2, err)) return err->code;
  memcpy(dst, c->r + c->rpos, n);
  c->rpos += n + 2;
  return 0;
}

/* redis_version from INFO server, into out. */
static int redis_version(conn *c, char *out, size_t cap, scps_error *err) {
  wbuf b = {0};
  static const char cmd[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
  int rc = wbuf_reserve(&b, sizeof cmd, err);
  if (!rc) {
    memcpy(b.p, cmd, sizeof cmd - 1);
    b.len = sizeof cmd - 1;
    rc = conn_send(c, &b, err);
  }
  free(b.p);
  int64_t len;
  if (rc || conn_int(c, '$', &len, err) || conn_need(c, (size_t)len + 2, err)) return err->code;
  const char *s = c->r + c->rpos, *v = NULL;
  for (const char *p = s; p + 14 <= s + len; p++)
    if (!memcmp(p, "redis_version:", 14)) {
      v = p + 14;
      break;
    }
  size_t k = 0;
  while (v && k + 1 < cap && v < s + len && v[k] != '\r') {
    out[k] = v[k];
    k++;
  }
  out[k] = 0;
  c->rpos += (size_t)len + 2;
  return 0;
}

/* A workload's batches, copied out of the generator. */
typedef struct batch {
  int64_t **offsets, **ids;
  float **weights;
  int64_t n_ids; /* over every feature */
} batch;

typedef struct bench {
  const scps_workload *w;
  int *table_of;  /* [n_features] */
  int nb;
  batch *b;
  int dedup, depth;
  /* Per in-flight slot and feature: the ids sent and each batch id's index
   * among them. */
  int64_t **sent;
  uint32_t **pos;
  size_t *n_sent;
  /* Dedup hash table, sized for the largest feature. */
  int64_t *hkey;
  uint32_t *hval;
  size_t hmask;
  float **rows, **acts; /* per feature: returned rows, pooled output */
  wbuf cmd;
  int64_t rows_returned;
} bench;

static int store_batches(bench *bn, scps_workload_gen *gen, scps_error *err) {
  const scps_workload *w = bn->w;
  int nf = w->n_features;
  bn->b = calloc((size_t)bn->nb, sizeof *bn->b);
  if (!bn->b) return scps_error_set(err, SCPS_ENOMEM, "cannot allocate %d batches", bn->nb);
  for (int k = 0; k < bn->nb; k++) {
    batch *b = &bn->b[k];
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    b->offsets = calloc((size_t)nf, sizeof *b->offsets);
    b->ids = calloc((size_t)nf, sizeof *b->ids);
    b->weights = calloc((size_t)nf, sizeof *b->weights);
    if (!b->offsets || !b->ids || !b->weights) return scps_error_set(err, SCPS_ENOMEM, "batch %d", k);
    for (int f = 0; f < nf; f++) {
      size_t n = in[f].n_ids, rows = (size_t)w->batch_size + 1;
      b->offsets[f] = malloc(sizeof(int64_t) * rows);
      b->ids[f] = malloc(sizeof(int64_t) * (n ? n : 1));
      if (!b->offsets[f] || !b->ids[f]) return scps_error_set(err, SCPS_ENOMEM, "batch %d feature %d", k, f);
      memcpy(b->offsets[f], in[f].row_offsets, sizeof(int64_t) * rows);
      memcpy(b->ids[f], in[f].ids, sizeof(int64_t) * n);
      if (in[f].weights) {
        b->weights[f] = malloc(sizeof(float) * (n ? n : 1));
        if (!b->weights[f]) return scps_error_set(err, SCPS_ENOMEM, "batch %d feature %d", k, f);
        memcpy(b->weights[f], in[f].weights, sizeof(float) * n);
      }
      b->n_ids += (int64_t)n;
    }
  }
  return 0;
}

/* Writes every row the batches touch, table by table, with pipelined MSETs. */
static int load_rows(bench *bn, conn *c, int64_t *keys, scps_error *err) {
  const scps_workload *w = bn->w;
  wbuf b = {0};
  int rc = 0;
  *keys = 0;
  for (int t = 0; !rc && t < w->n_tables; t++) {
    size_t n = 0;
    for (int k = 0; k < bn->nb; k++)
      for (int f = 0; f < w->n_features; f++)
        if (bn->table_of[f] == t) n += (size_t)bn->b[k].offsets[f][w->batch_size];
    if (!n) continue;
    int64_t *ids = malloc(sizeof(int64_t) * n);
    int dim = w->tables[t].embedding_dim;
    float *row = malloc(sizeof(float) * (size_t)dim);
    if (!ids || !row) rc = scps_error_set(err, SCPS_ENOMEM, "table '%s': %zu ids", w->tables[t].name, n);
    size_t m = 0;
    for (int k = 0; !rc && k < bn->nb; k++)
      for (int f = 0; f < w->n_features; f++)
        if (bn->table_of[f] == t) {
          size_t nf = (size_t)bn->b[k].offsets[f][w->batch_size];
          memcpy(ids + m, bn->b[k].ids[f], sizeof(int64_t) * nf);
          m += nf;
        }
    if (!rc) qsort(ids, n, sizeof *ids, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; !rc && i < n; i++)
      if (!u || ids[i] != ids[u - 1]) ids[u++] = ids[i];
    const char *name = w->tables[t].name;
    size_t tlen = strlen(name), pending = 0;
    for (size_t i = 0; !rc && i < u; i += LOAD_CHUNK) {
      size_t chunk = u - i < LOAD_CHUNK ? u - i : LOAD_CHUNK;
      rc = wbuf_reserve(&b, 32, err);
      if (!rc) wbuf_num(&b, '*', (int64_t)(2 * chunk + 1));
      if (!rc) rc = wbuf_bulk(&b, "MSET", 4, err);
      for (size_t j = i; !rc && j < i + chunk; j++) {
        for (int d = 0; d < dim; d++) row[d] = row_value(t, ids[j], d);
        rc = wbuf_key(&b, name, tlen, ids[j], err);
        if (!rc) rc = wbuf_bulk(&b, row, sizeof(float) * (size_t)dim, err);
      }
      if (!rc) rc = conn_send(c, &b, err);
      if (++pending == LOAD_WINDOW)
        for (; !rc && pending; pending--) rc = conn_ok(c, err);
    }
    for (; !rc && pending; pending--) rc = conn_ok(c, err);
    *keys += (int64_t)u;
    free(ids);
    free(row);
  }
  free(b.p);
  return rc;
}

/* Slot s takes batch k: dedups each feature's ids and writes one MGET per
 * feature. */
static int send_batch(bench *bn, conn *c, int s, int k, scps_error *err) {
  const scps_workload *w = bn->w;
  const batch *b = &bn->b[k];
  int nf = w->n_features;
  for (int f = 0; f < nf; f++) {
    size_t n = (size_t)b->offsets[f][w->batch_size];
    const int64_t *ids = b->ids[f];
    int64_t *sent = bn->sent[s * nf + f];
    uint32_t *pos = bn->pos[s * nf + f];
    size_t u = 0;
    if (bn->dedup) {
      size_t mask = bn->hmask;
      memset(bn->hkey, 0xff, sizeof(int64_t) * (mask + 1));
      for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)(((uint64_t)ids[i] * 0x9E3779B97F4A7C15ull) >> 20) & mask;
        while (bn->hkey[h] != -1 && bn->hkey[h] != ids[i]) h = (h + 1) & mask;
        if (bn->hkey[h] == -1) {
          bn->hkey[h] = ids[i];
          bn->hval[h] = (uint32_t)u;
          sent[u++] = ids[i];
        }
        pos[i] = bn->hval[h];
      }
    } else {
      for (size_t i = 0; i < n; i++) {
        sent[i] = ids[i];
        pos[i] = (uint32_t)i;
      }
      u = n;
    }
    bn->n_sent[s * nf + f] = u;
    if (!u) continue;
    const char *name = w->tables[bn->table_of[f]].name;
    size_t tlen = strlen(name);
    if (wbuf_reserve(&bn->cmd, 32 + u * (tlen + 48), err)) return err->code;
    wbuf_num(&bn->cmd, '*', (int64_t)u + 1);
    memcpy(bn->cmd.p + bn->cmd.len, "$4\r\nMGET\r\n", 10);
    bn->cmd.len += 10;
    for (size_t i = 0; i < u; i++) {
      char key[SCPS_NAME_MAX + 24];
      memcpy(key, name, tlen);
      key[tlen] = ':';
      char tmp[24];
      int d = 0;
      uint64_t v = (uint64_t)sent[i];
      do tmp[d++] = (char)('0' + v % 10); while (v /= 10);
      size_t kl = tlen + 1;
      while (d) key[kl++] = tmp[--d];
      wbuf_num(&bn->cmd, '$', (int64_t)kl);
      memcpy(bn->cmd.p + bn->cmd.len, key, kl);
      bn->cmd.len += kl;
      bn->cmd.p[bn->cmd.len++] = '\r';
      bn->cmd.p[bn->cmd.len++] = '\n';
    }
  }
  return conn_send(c, &bn->cmd, err);
}

/* Reads slot s's replies (batch k) and pools them into bn->acts. */
static int finish_batch(bench *bn, conn *c, int s, int k, scps_error *err) {
  const scps_workload *w = bn->w;
  const batch *b = &bn->b[k];
  int nf = w->n_features;
  for (int f = 0; f < nf; f++) {
    size_t u = bn->n_sent[s * nf + f];
    const scps_table_spec *t = &w->tables[bn->table_of[f]];
    size_t dim = (size_t)t->embedding_dim, bytes = sizeof(float) * dim;
    float *rows = bn->rows[f], *out = bn->acts[f];
    if (u) {
      int64_t n;
      if (conn_int(c, '*', &n, err)) return err->code;
      if (n != (int64_t)u) return scps_error_set(err, SCPS_EPARSE, "MGET of table '%s' returned %lld values for %zu keys", t->name, (long long)n, u);
      for (size_t i = 0; i < u; i++)
        if (conn_bulk(c, rows + i * dim, bytes, t->name, err)) return err->code;
      bn->rows_returned += (int64_t)u;
    }
    const int64_t *off = b->offsets[f];
    const uint32_t *pos = bn->pos[s * nf + f];
    const float *wt = b->weights[f];
    memset(out, 0, bytes * (size_t)w->batch_size);
    for (int32_t r = 0; r < w->batch_size; r++) {
      float *o = out + (size_t)r * dim, sumw = 0.0f, sumw2 = 0.0f;
      for (int64_t j = off[r]; j < off[r + 1]; j++) {
        float g = wt ? wt[j] : 1.0f;
        const float *row = rows + (size_t)pos[j] * dim;
        for (size_t d = 0; d < dim; d++) o[d] += g * row[d];
        sumw += g;
        sumw2 += g * g;
      }
      float scale = 1.0f;
      if (t->combiner == SCPS_COMBINER_MEAN && sumw > 0.0f) scale = 1.0f / sumw;
      if (t->combiner == SCPS_COMBINER_SQRTN && sumw2 > 0.0f) scale = 1.0f / sqrtf(sumw2);
      if (scale != 1.0f)
        for (size_t d = 0; d < dim; d++) o[d] *= scale;
    }
  }
  return 0;
}

/* Batches first .. first + count - 1 with up to depth in flight; done[i] is
 * the completion time of batch first + i. */
static int run(bench *bn, conn *c, int first, int count, double *done, scps_error *err) {
  int depth = bn->depth, sent = 0, finished = 0;
  while (finished < count) {
    if (sent < count && sent - finished < depth) {
      if (send_batch(bn, c, sent % depth, first + sent, err)) return err->code;
      sent++;
      continue;
    }
    if (finish_batch(bn, c, finished % depth, first + finished, err)) return err->code;
    if (done) done[finished] = scps__clock_s();
    finished++;
  }
  return 0;
}

/* Recomputes batch k's pooled output from row_value and compares it with
 * what the last finish_batch produced. */
static int check_batch(const bench *bn, int k, scps_error *err) {
  const scps_workload *w = bn->w;
  for (int f = 0; f < w->n_features; f++) {
    const scps_table_spec *t = &w->tables[bn->table_of[f]];
    int dim = t->embedding_dim;
    const int64_t *off = bn->b[k].offsets[f];
    for (int32_t r = 0; r < w->batch_size; r += 97) {
      for (int d = 0; d < dim; d++) {
        double sum = 0.0, sw = 0.0, sw2 = 0.0;
        for (int64_t j = off[r]; j < off[r + 1]; j++) {
          double g = bn->b[k].weights[f] ? bn->b[k].weights[f][j] : 1.0;
          sum += g * row_value(bn->table_of[f], bn->b[k].ids[f][j], d);
          sw += g;
          sw2 += g * g;
        }
        if (t->combiner == SCPS_COMBINER_MEAN && sw > 0.0) sum /= sw;
        if (t->combiner == SCPS_COMBINER_SQRTN && sw2 > 0.0) sum /= sqrt(sw2);
        double got = bn->acts[f][(size_t)r * (size_t)dim + (size_t)d];
        if (fabs(got - sum) > 1e-4 * (1.0 + fabs(sum)))
          return scps_error_set(err, SCPS_ECORRUPT, "feature '%s' sample %d element %d: pooled %g from redis, expected %g",
                                w->features[f].name, r, d, got, sum);
      }
    }
  }
  return 0;
}

static int bench_init(bench *bn, scps_error *err) {
  const scps_workload *w = bn->w;
  int nf = w->n_features, d = bn->depth;
  bn->table_of = calloc((size_t)nf, sizeof *bn->table_of);
  bn->sent = calloc((size_t)(nf * d), sizeof *bn->sent);
  bn->pos = calloc((size_t)(nf * d), sizeof *bn->pos);
  bn->n_sent = calloc((size_t)(nf * d), sizeof *bn->n_sent);
  bn->rows = calloc((size_t)nf, sizeof *bn->rows);
  bn->acts = calloc((size_t)nf, sizeof *bn->acts);
  if (!bn->table_of || !bn->sent || !bn->pos || !bn->n_sent || !bn->rows || !bn->acts)
    return scps_error_set(err, SCPS_ENOMEM, "%d features", nf);
  size_t max_ids = 1;
  for (int f = 0; f < nf; f++) {
    int t = 0;
    while (t < w->n_tables && strcmp(w->tables[t].name, w->features[f].table)) t++;
    if (t == w->n_tables) return scps_error_set(err, SCPS_ENOENT, "feature '%s': no table '%s'", w->features[f].name, w->features[f].table);
    bn->table_of[f] = t;
    size_t n = 1;
    for (int k = 0; k < bn->nb; k++)
      if ((size_t)bn->b[k].offsets[f][w->batch_size] > n) n = (size_t)bn->b[k].offsets[f][w->batch_size];
    if (n > max_ids) max_ids = n;
    size_t dim = (size_t)w->tables[t].embedding_dim;
    bn->rows[f] = malloc(sizeof(float) * dim * n);
    bn->acts[f] = malloc(sizeof(float) * dim * (size_t)w->batch_size);
    if (!bn->rows[f] || !bn->acts[f]) return scps_error_set(err, SCPS_ENOMEM, "feature '%s': %zu rows", w->features[f].name, n);
    for (int s = 0; s < d; s++) {
      bn->sent[s * nf + f] = malloc(sizeof(int64_t) * n);
      bn->pos[s * nf + f] = malloc(sizeof(uint32_t) * n);
      if (!bn->sent[s * nf + f] || !bn->pos[s * nf + f]) return scps_error_set(err, SCPS_ENOMEM, "feature '%s'", w->features[f].name);
    }
  }
  size_t cap = 1;
  while (cap < 2 * max_ids) cap *= 2;
  bn->hmask = cap - 1;
  bn->hkey = malloc(sizeof(int64_t) * cap);
  bn->hval = malloc(sizeof(uint32_t) * cap);
  if (!bn->hkey || !bn->hval) return scps_error_set(err, SCPS_ENOMEM, "dedup table of %zu slots", cap);
  return 0;
}

static void bench_free(bench *bn) {
  int nf = bn->w ? bn->w->n_features : 0;
  for (int k = 0; bn->b && k < bn->nb; k++) {
    for (int f = 0; f < nf; f++) {
      if (bn->b[k].offsets) free(bn->b[k].offsets[f]);
      if (bn->b[k].ids) free(bn->b[k].ids[f]);
      if (bn->b[k].weights) free(bn->b[k].weights[f]);
    }
    free(bn->b[k].offsets);
    free(bn->b[k].ids);
    free(bn->b[k].weights);
  }
  for (int i = 0; i < nf * bn->depth; i++) {
    if (bn->sent) free(bn->sent[i]);
    if (bn->pos) free(bn->pos[i]);
  }
  for (int f = 0; f < nf; f++) {
    if (bn->rows) free(bn->rows[f]);
    if (bn->acts) free(bn->acts[f]);
  }
  free(bn->b);
  free(bn->table_of);
  free(bn->sent);
  free(bn->pos);
  free(bn->n_sent);
  free(bn->rows);
  free(bn->acts);
  free(bn->hkey);
  free(bn->hval);
  free(bn->cmd.p);
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "scps-bench-redis: %s '%s' is not an integer in [%ld, %ld]\n", flag, s, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  const char *workload = NULL, *host = "127.0.0.1";
  long port = 0, batches = 20, warmup = 3, depth = 1, seed = 1;
  int dedup = 1;
  static const struct option opts[] = {
      {"workload", required_argument, 0, 'w'}, {"port", required_argument, 0, 'p'},
      {"host", required_argument, 0, 'H'},     {"batches", required_argument, 0, 'n'},
      {"warmup", required_argument, 0, 'u'},   {"depth", required_argument, 0, 'd'},
      {"no-dedup", no_argument, 0, 'D'},       {"seed", required_argument, 0, 's'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int bad = 0;
    switch (o) {
    case 'w': workload = optarg; break;
    case 'H': host = optarg; break;
    case 'p': bad = parse_long("--port", optarg, 1, 65535, &port); break;
    case 'n': bad = parse_long("--batches", optarg, 1, MAX_BATCHES, &batches); break;
    case 'u': bad = parse_long("--warmup", optarg, 0, MAX_BATCHES, &warmup); break;
    case 'd': bad = parse_long("--depth", optarg, 1, MAX_DEPTH, &depth); break;
    case 's': bad = parse_long("--seed", optarg, 0, 1L << 30, &seed); break;
    case 'D': dedup = 0; break;
    case 'h': fputs(usage, stdout); return 0;
    default: bad = 1;
    }
    if (bad) {
      fputs(usage, stderr);
      return 2;
    }
  }
  if (!workload || !port || optind < argc) {
    fprintf(stderr, "scps-bench-redis: %s\n", optind < argc ? "unexpected argument" : "--workload and --port are required");
    fputs(usage, stderr);
    return 2;
  }
  scps_error err = {0};
  scps_workload *w = NULL;
  scps_workload_gen *gen = NULL;
  bench bn = {.nb = (int)(warmup + batches), .dedup = dedup, .depth = (int)depth};
  conn c = {.fd = -1};
  char version[64] = "";
  int64_t keys = 0;
  double t_load = 0.0, *done = calloc((size_t)batches + 1, sizeof *done);
  int rc = done ? 0 : scps_error_set(&err, SCPS_ENOMEM, "%ld batches", batches);
  if (!rc) rc = scps__workload_load(workload, &w, &err);
  if (!rc) rc = scps__workload_gen_create(w, (uint64_t)seed, &gen, &err);
  bn.w = w;
  if (!rc) rc = store_batches(&bn, gen, &err);
  if (!rc) rc = bench_init(&bn, &err);
  if (!rc) rc = conn_open(&c, host, (int)port, &err);
  if (!rc) rc = redis_version(&c, version, sizeof version, &err);
  if (!rc) {
    double t0 = scps__clock_s();
    rc = load_rows(&bn, &c, &keys, &err);
    t_load = scps__clock_s() - t0;
  }
  if (!rc) rc = run(&bn, &c, 0, (int)warmup, NULL, &err);
  if (!rc) {
    bn.rows_returned = 0;
    done[0] = scps__clock_s();
    rc = run(&bn, &c, (int)warmup, (int)batches, done + 1, &err);
  }
  if (!rc) rc = check_batch(&bn, bn.nb - 1, &err);
  if (rc) {
    fprintf(stderr, "scps-bench-redis: %s\n", err.msg);
  } else {
    double wall = done[batches] - done[0];
    for (long i = 0; i < batches; i++) done[i] = done[i + 1] - done[i];
    scps_bench_sort(done, (size_t)batches);
    double med = done[batches / 2];
    int64_t ids = 0;
    for (int k = (int)warmup; k < bn.nb; k++) ids += bn.b[k].n_ids;
    double ids_per_batch = (double)ids / (double)batches, rows_per_batch = (double)bn.rows_returned / (double)batches;
    printf("{\"bench\": \"redis-mget\", \"workload\": \"%s\", \"redis_version\": \"%s\", \"batches\": %ld, "
           "\"depth\": %ld, \"dedup\": %s, \"keys_loaded\": %lld, \"load_seconds\": %.3f, "
           "\"ids_per_batch\": %.0f, \"rows_per_batch\": %.0f, \"ms_per_batch_median\": %.3f, "
           "\"ms_per_batch_mean\": %.3f, \"samples_per_s\": %.0f, \"ids_per_s\": %.0f, \"rows_per_s\": %.0f}\n",
           w->name, version, batches, depth, dedup ? "true" : "false", (long long)keys, t_load, ids_per_batch,
           rows_per_batch, med * 1e3, wall / (double)batches * 1e3, w->batch_size / med, ids_per_batch / med,
           rows_per_batch / med);
  }
  conn_close(&c);
  bench_free(&bn);
  scps__workload_gen_destroy(gen);
  scps__workload_destroy(w);
  free(done);
  return rc ? 1 : 0;
}
