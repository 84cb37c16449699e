/* scps_client: libscps, the trainer's side of scps: connects to a cluster,
 * checks its configuration, preprocesses batches, fans lookups and gradient
 * pushes out to every server process and merges their answers.
 *
 * A training step, blocking:
 *
 *   scps_client *c;  scps_batch *b;  scps_error err;
 *   const char *servers[] = {"127.0.0.1:50051", "127.0.0.1:50052"};
 *   scps_client_options o;
 *   scps_client_options_init(&o);
 *   o.servers = servers;
 *   o.n_servers = 2;
 *   scps_client_create(&o, &c, &err);
 *   scps_batch_create(c, &b, &err);
 *   scps_client_prepare(c, inputs, b, &err);            // inputs[f]: feature f's ids
 *   scps_client_lookup(c, b, acts, 5000, &err);         // acts[f]: batch x width floats
 *   ... the model computes grads[f] = dLoss/dacts[f] ...
 *   scps_client_apply_gradients(c, b, grads, step, -1, 5000, &err);
 *
 * Every function returns 0 or a negative SCPS_E* code and fills err, whose
 * message names the server ("server 1 (127.0.0.1:50052): ...") when one
 * answered with an error. Thread safety: a client may be used from several
 * threads at once; a batch by one operation at a time (prepare, lookup or
 * apply on a batch still in use fails with SCPS_ESTATE). */
#ifndef SCPS_CLIENT_H
#define SCPS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_input.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scps_client scps_client;
typedef struct scps_batch scps_batch;

/* Encoding of activations and gradients on the wire (scps.proto
 * FloatFormat). bfloat16 halves the bytes of Lookup replies and
 * ApplyGradients requests; each server's partial activations and the
 * gradients are rounded to bfloat16 (about 3 significant digits), all
 * arithmetic stays float32. */
typedef enum scps_float_format { SCPS_WIRE_FLOAT32 = 0, SCPS_WIRE_BFLOAT16 = 1 } scps_float_format;

/* "float32" or "bfloat16" (as programs take it in --wire-format). */
SCPS_EXTERN int scps_float_format_from_name(const char *name, scps_float_format *out);
SCPS_EXTERN const char *scps_float_format_name(scps_float_format f);

/* How servers answer a Lookup, per stack (scps.proto
 * LookupRequest.distinct_rows). AUTO: distinct rows where they take no
 * more bytes than the pooled activations (a batch whose samples
 * share rows, such as univalent Zipf features), pooled elsewhere; libscps
 * then pools the rows itself, with the same result in float32. */
typedef enum scps_answer_mode {
  SCPS_ANSWER_AUTO = 0,
  SCPS_ANSWER_POOLED = 1,        /* always pooled activations */
  SCPS_ANSWER_DISTINCT_ROWS = 2  /* always distinct rows */
} scps_answer_mode;

/* "auto", "pooled" or "rows" (as programs take it in --answer). */
SCPS_EXTERN int scps_answer_mode_from_name(const char *name, scps_answer_mode *out);
SCPS_EXTERN const char *scps_answer_mode_name(scps_answer_mode m);

/* How a push sends a stack's gradients to each server (scps.proto
 * StackGradients). By sample: the batch's partitions and every sample's
 * gradient, the same to every server. By row: each server only the
 * distinct rows of its own partitions, each with its gradient summed here.
 * AUTO: per server and stack, by row where that takes at most 3/4 of the
 * bytes by sample (where samples share rows, such as univalent Zipf
 * features; summing here costs more than on the server, so a small saving
 * of bytes is not worth it). In float32 both give the same tables bit
 * for bit; in bfloat16 by row rounds each row's sum instead of each
 * sample's gradient. By row reads only the gradients of samples that have
 * ids; those must be finite, and so must each row's sum (by sample the
 * servers refuse a row whose sum overflows as well). A server from before
 * pushes by row (GetConfig wire_revision 0) makes AUTO push by sample, and
 * BY_ROW fail scps_client_create with SCPS_EMISMATCH naming it. */
typedef enum scps_gradient_mode {
  SCPS_GRADIENTS_AUTO = 0,
  SCPS_GRADIENTS_BY_SAMPLE = 1,
  SCPS_GRADIENTS_BY_ROW = 2
} scps_gradient_mode;

/* "auto", "sample" or "row" (as programs take it in --gradients). */
SCPS_EXTERN int scps_gradient_mode_from_name(const char *name, scps_gradient_mode *out);
SCPS_EXTERN const char *scps_gradient_mode_name(scps_gradient_mode m);

/* "error" or "drop" (scps_limit_policy, scps_input.h; as scps-trainer takes
 * it in --policy). */
SCPS_EXTERN int scps_limit_policy_from_name(const char *name, scps_limit_policy *out);
SCPS_EXTERN const char *scps_limit_policy_name(scps_limit_policy p);

/* How a client reaches servers that protect their port (scps-server's
 * --tls-* and --token-file; deploy/SECURITY.md). All zero: plaintext and
 * no token, which only a server on loopback without a token file accepts. */
typedef struct scps_client_security {
  /* TLS to every server; implied by any tls_* field below. */
  bool tls;
  /* PEM roots that verify the servers' certificates; NULL with TLS on: the
   * system's roots (gRPC's default roots file). */
  const char *tls_ca_file;
  /* This client's PEM certificate chain and its private key, for servers
   * that require client certificates (--tls-client-ca): both or neither. */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* The name the servers' certificates must be issued to, when it is not
   * the host of their address (a certificate for a DNS name, reached by IP
   * or through a tunnel); NULL: the address's host. */
  const char *tls_server_name;
  /* Bearer token sent with every call (metadata "authorization: Bearer
   * <token>"); NULL: none. Its role on the servers decides what it may
   * call: training (GetConfig, Lookup, ApplyGradients, Stats, Health) or
   * admin (everything, Checkpoint too). */
  const char *token;
} scps_client_security;

/* scps_client_options.shared_memory. */
typedef enum scps_shm_mode { SCPS_SHM_AUTO = 0, SCPS_SHM_OFF = 1 } scps_shm_mode;

/* Options of scps_client_create. Initialise them with
 * scps_client_options_init, then set what differs:
 *
 *   scps_client_options o;
 *   scps_client_options_init(&o);
 *   o.servers = servers;
 *   o.n_servers = 2;
 *
 * ABI: size, set by scps_client_options_init to the sizeof of the struct the
 * caller was compiled with, tells libscps which fields the caller knows: it
 * reads only the fields inside size and gives the rest their defaults, so a
 * later libscps appends fields (never reorders or removes one) and programs
 * built against an older header keep working unchanged. A size field keeps
 * the struct plain (fields set by name; designated initialisers work too,
 * with .size = sizeof(scps_client_options)), where an opaque builder would
 * cost a function per field. Every default is also what a zero field means. */
typedef struct scps_client_options {
  size_t size;                /* set by scps_client_options_init; 0 fails create */
  const char *const *servers; /* "host:port" of every process, in process-index order */
  int n_servers;
  /* Optional: the declaration the trainer expects, as the JSON text of a
   * workload file (the tables and features scps-server --config reads; its
   * "ids" section is not compared). Server 0's declaration is compared
   * with its tables and features, a difference failing create with
   * SCPS_EMISMATCH naming it; text that is not a valid workload fails with
   * SCPS_EPARSE or SCPS_EINVAL naming the key. NULL: adopt the servers'
   * declaration (they must still agree). */
  const char *expected_config;
  scps_limit_policy policy;   /* what preprocessing does with ids over the limits; default ERROR */
  int prep_threads;           /* preprocessing threads; 0 or 1: the caller's */
  int64_t connect_timeout_ms; /* for the configuration check; default (0) 10 s */
  scps_float_format wire_format; /* default float32; activation_format and gradient_format override it */
  scps_answer_mode answer;       /* default auto */
  scps_gradient_mode gradients;  /* default auto */
  /* Servers run with --checkpoint-every ask for cluster checkpoints through
   * their ApplyGradients answers (see scps_client_apply_gradients); true
   * leaves those requests unanswered (the servers then save alone). */
  bool ignore_checkpoint_due;
  int64_t checkpoint_timeout_ms; /* deadline of those automatic checkpoints; default (0) 600 s */
  /* true: this client's channels get connections of their own instead of
   * sharing gRPC's process-wide ones with other clients to the same servers
   * (a load generator's clients then behave as separate machines). */
  bool own_connections;
  /* Threads that take gRPC's completions and run done callbacks; default
   * (0) 2, at most 16. One is enough for a client that has one operation
   * out at a time (a load generator's clients), where a second only adds
   * wakeups. */
  int cq_threads;
  scps_client_security security; /* TLS and the bearer token; zero: neither */
  /* Lookup answers through shared memory from servers on this host that
   * offer it (scps-server --shm-socket): the answer is written straight
   * into memory this client shares with the server, and the connection
   * carries only the request and a small response. AUTO (the default)
   * uses it wherever the server's socket is reachable and belongs to that
   * server, and answers over the connection otherwise; OFF never. */
  scps_shm_mode shared_memory;
  /* Formats of the activations servers answer with and of the gradients
   * this client sends, each independently, by name: "float32",
   * "bfloat16" ("bf16"), or an eXmY format (scps_exmy.h) "eXmY" with an
   * optional bias "bN" and an optional "s" for a scale per row ("e4m3",
   * "e5m2", "e3m0b-2", "e2m1s"). eXmY activations are each server's
   * partial sums rounded to nearest; eXmY gradients are rounded
   * stochastically (unbiased; the draws a function of step, stack, server
   * for sums by row, and position); both are decoded back to float32 exactly, arithmetic stays
   * float32. Needs servers of wire_revision 3 (create fails with
   * SCPS_EMISMATCH naming one below). Empty (the default): wire_format.
   * scps_client_options_set_wire_format fills both from one text. */
  char activation_format[32];
  char gradient_format[32];
} scps_client_options;

/* Zeroes o, sets its size and every field's default. */
SCPS_EXTERN void scps_client_options_init(scps_client_options *o);

/* Sets activation_format and gradient_format from "NAME" (both) or
 * "ACTIVATIONS/GRADIENTS" ("e4m3/e3m0s"), as programs take --wire-format.
 * SCPS_EINVAL naming the text when a name is not a format; o is then
 * unchanged. */
SCPS_EXTERN int scps_client_options_set_wire_format(scps_client_options *o, const char *spec, scps_error *err);

/* Connects to every server, reads and cross-checks their configurations
 * (same declaration and fingerprint, each at its expected process index,
 * num_processes == n_servers, the servers' stacks equal to the layout built
 * here) and builds the layout, with server 0's limits in force (a restored
 * checkpoint's, which FDO may have raised). Servers still starting are waited for until
 * connect_timeout_ms. Fails with SCPS_EINVAL for an address without a port
 * (host:port; a gRPC target such as unix:PATH has its colon),
 * SCPS_EUNAVAIL naming a server that does not answer within the timeout
 * (and whether a connection was made at all), SCPS_EMISMATCH naming what
 * differs. The servers must also hold the same step (GetConfig last_step,
 * "none" included): a process restarted from an older checkpoint beside
 * others that went on would be trained from mixed states, so steps that
 * still differ after about a second of asking again (a push of another
 * trainer in flight settles in that time) fail with SCPS_EMISMATCH
 * naming each server's step and what brings them together
 * ('scps-admin checkpoint restore').
 * Security (scps_client_security): SCPS_EIO for a TLS file that
 * cannot be read, SCPS_EINVAL for one that is not what it should be (the
 * message names the field and file); SCPS_EUNAUTH when a server does not
 * know the token (or none was given), SCPS_EDENIED when the token's role
 * may not call a method; neither is retried, here or by any call below. A
 * TLS handshake that fails (wrong roots or server name, no client
 * certificate) looks like a server that does not answer: SCPS_EUNAVAIL,
 * and the message says so. Starts the
 * client's completion-queue threads (cq_threads). Options whose size is 0
 * (not initialised) or smaller than n_servers' end fail with SCPS_EINVAL. */
SCPS_EXTERN int scps_client_create(const scps_client_options *o, scps_client **out, scps_error *err);

/* 0 when addr names a server: host:port or [IPv6]:port with a port in
 * 1..65535, or a gRPC target with a scheme (unix:PATH, dns:///host:port,
 * ...), passed as it is; else SCPS_EINVAL saying what is wrong. Tools check
 * their --servers with it; scps_client_create checks every address. */
SCPS_EXTERN int scps_address_check(const char *addr, scps_error *err);

/* Splits a comma-separated list of addresses in place into out[0 .. *n),
 * each checked by scps_address_check: 0, or SCPS_EINVAL naming a bad
 * address, more than max of them, or none. */
SCPS_EXTERN int scps_address_list_split(char *list, const char **out, int max, int *n, scps_error *err);

/* Waits for operations in flight (each ends by its deadline; a push's
 * automatic checkpoint by checkpoint_timeout_ms), then closes the
 * channels. Destroy the client's batches first; never call this from a
 * done callback. */
SCPS_EXTERN void scps_client_destroy(scps_client *c);

/* The last step the servers hold the result of, as they reported it at
 * connect (a checkpoint they restored, or the highest step they applied;
 * they agree, see scps_client_create), -1 when they hold none; below 2^53,
 * the steps servers take. A trainer resumes at this step + 1. */
SCPS_EXTERN int64_t scps_client_step(const scps_client *c);

/* The number of server processes (scps_client_options.n_servers). */
SCPS_EXTERN int scps_client_n_servers(const scps_client *c);

/* Whether server `server` (0 .. n_servers-1) reported a --checkpoint-dir at
 * connect: scps_client_checkpoint saves there or below it, and a server
 * without one refuses every checkpoint. */
SCPS_EXTERN bool scps_client_server_has_checkpoint_dir(const scps_client *c, int server);

/* Payload bytes (serialized messages, before gRPC framing and compression)
 * of every call this client started, retries included, and of every reply
 * message it received, since create. Cheap: two atomic counters. */
SCPS_EXTERN void scps_client_traffic(const scps_client *c, uint64_t *sent, uint64_t *received);

/* Bytes that went through memory shared with servers on this host
 * (scps_client_options.shared_memory) since create instead of over the
 * connection: Lookup requests and gradients placed for pushes (sent) and
 * answers servers wrote (received). Not in scps_client_traffic's counts. */
SCPS_EXTERN void scps_client_shared_traffic(const scps_client *c, uint64_t *sent, uint64_t *received);

/* The features a batch holds, as the servers declare them, in the order of
 * scps_client_prepare's inputs and scps_client_lookup's acts. f is in
 * [0, scps_client_n_features); outside it the functions below return NULL
 * or SCPS_ERANGE. */
SCPS_EXTERN int scps_client_n_features(const scps_client *c);
SCPS_EXTERN const char *scps_client_feature_name(const scps_client *c, int f);
/* Feature f's index, or SCPS_ENOENT for a name no feature has. */
SCPS_EXTERN int scps_client_feature_index(const scps_client *c, const char *name);
/* The floats per sample of feature f's activations and gradients: its
 * table's embedding dim. */
SCPS_EXTERN int scps_client_feature_width(const scps_client *c, int f);
/* The samples of feature f in a batch (its inputs' rows). */
SCPS_EXTERN int scps_client_feature_batch_size(const scps_client *c, int f);
/* The table feature f looks up, and that table's vocabulary size: the
 * feature's ids must be in [0, vocabulary). */
SCPS_EXTERN const char *scps_client_feature_table(const scps_client *c, int f);
SCPS_EXTERN int64_t scps_client_feature_vocabulary(const scps_client *c, int f);

/* The samples in a batch: every feature's batch size when they agree (a
 * declaration from a workload file always does), else the largest. */
SCPS_EXTERN int scps_client_batch_size(const scps_client *c);

/* Ids preprocessing dropped over the per-partition limits since create
 * (scps_client_options.policy DROP; always 0 with ERROR, which refuses
 * the batch instead). */
SCPS_EXTERN int64_t scps_client_ids_dropped(const scps_client *c);

/* A batch holds one preprocessed batch's partitions, per server, until it is
 * prepared again or destroyed. Create as many as the pipeline needs. */
SCPS_EXTERN int scps_batch_create(scps_client *c, scps_batch **out, scps_error *err);
SCPS_EXTERN void scps_batch_destroy(scps_batch *b);

/* Preprocesses inputs[f] (feature f, scps_client_feature_name) into b and
 * encodes each server's request. Every input is checked first (shapes,
 * batch size, ids in [0, vocabulary), finite weights), failing with
 * SCPS_EINVAL naming feature, position and value; ids over a partition's
 * limits fail with SCPS_ELIMIT (policy ERROR) or are dropped (DROP); or
 * SCPS_ENOSPC when a request would exceed a server's message limit. Runs on
 * the calling thread and, with prep_threads > 1, the client's prep pool;
 * prepares of one client take turns (one prep). A stack
 * with no entry on a server is not sent to it: its partial is all zeros. */
SCPS_EXTERN int scps_client_prepare(scps_client *c, const scps_feature_input *inputs, scps_batch *b,
                                    scps_error *err);

/* Looks b up: acts[f] receives feature f's batch size x width floats
 * (row-major, caller-owned): the servers' partials summed in process order,
 * so results are deterministic (and equal an in-process engine's). Servers
 * answering UNAVAILABLE, or CANCELLED (a draining server cancels calls that
 * arrive after its drain), are retried (20 ms backoff doubling to 200 ms)
 * while deadline_ms (from now, > 0) allows; SCPS_ETIMEDOUT, SCPS_EUNAVAIL or
 * SCPS_ECANCELLED then.
 * When several servers fail, the message names the lowest and lists all. */
SCPS_EXTERN int scps_client_lookup(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms,
                                   scps_error *err);

/* Pushes grads[f] (batch size x width per feature, the loss gradient
 * of acts[f]) for b at global step `step` (>= 0); learning_rate < 0 keeps each
 * stack's rate. Gradients must be finite: a NaN or infinity fails with
 * SCPS_EINVAL naming feature, sample and column before anything is sent
 * (by row, scps_gradient_mode: among the samples that have ids, and a row
 * whose sum is not finite fails naming the stack and row). How each
 * stack goes to each server: scps_client_options.gradients.
 * Never retried: on an error some servers may have applied the step and
 * others not; the message lists both.
 *
 * When a server answers with checkpoint_due (its --checkpoint-every timer
 * fired) and the push succeeded on every server, the call then saves the
 * cluster checkpoint of `step` under the servers' --checkpoint-dir
 * (scps_client_checkpoint) before returning; the push's own result is
 * returned either way, the checkpoint's is kept for
 * scps_client_auto_checkpoint. That save has its own deadline,
 * checkpoint_timeout_ms, not the push's: such a call may return up to that
 * long after deadline_ms. The asynchronous form does the same before its
 * done runs. Pushes of one client must then not overlap (one step
 * acknowledged before the next is sent), as scps_train's schedules do. */
SCPS_EXTERN int scps_client_apply_gradients(scps_client *c, scps_batch *b, const float *const *grads, int64_t step,
                                            double learning_rate, int64_t deadline_ms, scps_error *err);

/* Looks b up as scps_client_lookup does, but leaves the activations where
 * they are instead of copying them into the caller's arrays: acts[f] is set
 * to feature f's batch size x width floats (row-major), valid until b is
 * next prepared, looked up, pushed or destroyed. With one server process
 * answering through shared memory (scps_client_options.shared_memory) in
 * float32, a feature as wide as its stack answered pooled points into the
 * server's answer itself, which no one copied; every other feature is
 * merged into memory the batch owns. The same values as
 * scps_client_lookup's. */
SCPS_EXTERN int scps_client_lookup_view(scps_client *c, scps_batch *b, const float **acts, int64_t deadline_ms,
                                       scps_error *err);

/* Asynchronous forms: return at once (0, or an error code, without a
 * message, if nothing was sent; the blocking forms check the same things and
 * say why). done(ud, status, err) runs on a client thread when every server
 * answered, after acts are filled and b is free for its next use; err is
 * valid during the call only. acts, grads and b must stay valid until then.
 * done must not block: it may start asynchronous operations, not blocking
 * ones. A blocking call is an asynchronous one waited for; its merge runs on
 * the caller's thread. */
typedef void (*scps_client_done)(void *ud, int status, const scps_error *err);
SCPS_EXTERN int scps_client_lookup_async(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms,
                                         scps_client_done done, void *ud);
SCPS_EXTERN int scps_client_apply_gradients_async(scps_client *c, scps_batch *b, const float *const *grads,
                                                  int64_t step, double learning_rate, int64_t deadline_ms,
                                                  scps_client_done done, void *ud);

/* Checkpoints. A cluster checkpoint of step s is every server's state after
 * step s, written to <directory>/step-<s, 12 digits>/ by every server at
 * once; it is complete (restorable, scps-server --restore) once all of them
 * have written it. */
typedef struct scps_client_checkpoint_result {
  int64_t step;
  char path[4096]; /* the step directory (as server 0 names it) */
  int64_t bytes;   /* data bytes written, all servers */
  int32_t files;   /* data files written, all servers */
  double seconds;  /* the slowest server's save */
} scps_client_checkpoint_result;

/* Asks every server in parallel to save step `step` (>= 0, every push of it
 * acknowledged and none later sent) under directory, relative to each
 * server's --checkpoint-dir (NULL or "": that directory itself; servers
 * without one refuse), with the prep's limits in force, and waits up
 * to deadline_ms. Servers go on answering lookups meanwhile; pushes wait
 * for the save. Errors name the servers that failed and those that saved
 * (such a checkpoint is incomplete and is never restored). SCPS_ETIMEDOUT,
 * SCPS_EUNAVAIL and SCPS_ECANCELLED alone settle nothing: a save a server had begun runs
 * to completion, so the step may yet be complete (the message says so; the
 * servers' Stats tell). SCPS_EMISMATCH
 * when a server has already applied a later step, has no --checkpoint-dir,
 * or cannot create or write the directory for another reason than
 * permissions or space (the message gives the system's, e.g. "Not a
 * directory"; a symlink below the server's --checkpoint-dir is never
 * followed); SCPS_EINVAL for a directory that is absolute, names . or ..,
 * has an empty component ("a//b", a trailing '/') or a control character,
 * or is over 4000 bytes (or too long for a path on a server), and for
 * limits outside what the servers allow (GetConfig's limits in force are
 * always allowed); SCPS_ENOSPC for a full disk or file size limit, and
 * for a save of another step sooner than a server's
 * --checkpoint-min-interval after its last; SCPS_EDENIED for permissions
 * (the token's role, or a file's; or a read-only file system). */
SCPS_EXTERN int scps_client_checkpoint(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms,
                                       scps_client_checkpoint_result *result, scps_error *err);

/* The outcome of the latest automatic checkpoint (see
 * scps_client_apply_gradients): 0 and *result, SCPS_ENOENT when there has
 * been none, or that checkpoint's error. */
SCPS_EXTERN int scps_client_auto_checkpoint(scps_client *c, scps_client_checkpoint_result *result, scps_error *err);

/* The rows and optimizer slots of ids of table `table` (its TableSpec name)
 * as the servers hold them now (scps.proto ReadRows): each id read from the
 * server that holds it, the servers asked in parallel, in pieces whose
 * answers stay under their message limit, all within deadline_ms. rows
 * receives n_ids x embedding_dim floats (the table's: the width of its
 * features, scps_client_feature_width); slots (NULL: not wanted) n_ids x
 * num_slots x embedding_dim, id i's slot k at (i * num_slots + k) *
 * embedding_dim, num_slots and their order the table optimizer's (as
 * 'scps-admin rows' names them). Ids may repeat
 * and must be in [0, vocabulary_size) (SCPS_EINVAL naming the first that
 * is not); SCPS_ENOENT for an unknown table; servers' errors as for the
 * other calls (never retried). Where servers check roles, only admin
 * callers may read rows. Pushes in flight meanwhile may be seen on some
 * servers and not yet on others, never half of a row. */
SCPS_EXTERN int scps_client_read_rows(scps_client *c, const char *table, const int64_t *ids, size_t n_ids, float *rows,
                                      float *slots, int64_t deadline_ms, scps_error *err);

/* Top-k retrieval (scps.proto TopK; TPU-KNN): for each query vector, the
 * k rows of a table with the highest score, as (id, score) pairs. */
typedef enum scps_topk_score {
  SCPS_TOPK_DOT = 0,            /* q . r */
  SCPS_TOPK_COSINE = 1,         /* q . r / (|q| |r|); 0 for a row of zeros */
  SCPS_TOPK_NEG_SQUARED_L2 = 2  /* -|q - r|^2: nearest first */
} scps_topk_score;

/* "dot", "cosine" or "l2" (as programs take it in --score). */
SCPS_EXTERN int scps_topk_score_from_name(const char *name, scps_topk_score *out);
SCPS_EXTERN const char *scps_topk_score_name(scps_topk_score s);

typedef struct scps_topk_options {
  int32_t k;                /* results per query, 1 <= k <= rows searched */
  scps_topk_score score;
  double recall_target;     /* expected recall in (0, 1]; 1: exact */
  int64_t first_id, count;  /* rows searched: ids [first_id, first_id + count); count 0: all */
  char query_format[32];    /* how queries travel: "" or "float32", "bfloat16", an eXmY name */
} scps_topk_options;

/* k 10, dot product, exact (recall 1), the whole table, float32 queries. */
SCPS_EXTERN void scps_topk_options_init(scps_topk_options *o);

/* What one TopK did besides its answer. */
typedef struct scps_topk_info {
  int32_t bins;          /* L each SparseCore reduced into; 0: exact */
  int64_t rows_scanned;  /* rows scored per query, all servers */
  double expected_recall;/* (L/k)(1 - (1 - 1/L)^k) for that L, 1 when exact: a floor, as
                          * every SparseCore keeps L bins of its own rows */
} scps_topk_info;

/* The top k rows of `table` for each of n_queries query vectors
 * (queries: n_queries x embedding_dim floats, row-major, finite): ids and
 * scores get n_queries x k entries, each query's best first (score
 * descending, then id ascending). Every server scores its own rows as they
 * are after every push acknowledged before the call (each score summed in
 * double and rounded once to float32, scps.proto TopKScore); libscps
 * merges their candidates with an exact top-k. A row whose score is NaN
 * (values past float32's range) is never answered: such an answer ends
 * with id -1, score NaN. With recall_target
 * below 1 each SparseCore keeps only the best row of each of L bins
 * (scps.proto TopKRequest.recall_target), so each true top-k row is found
 * with probability at least the target in expectation. info may be NULL.
 * SCPS_EINVAL naming the option or the query value (unknown score, k
 * outside [1, rows searched], recall outside (0, 1], a range outside the
 * vocabulary, a value that is not finite, a format that is no format) and
 * nothing is sent; SCPS_ENOENT for an unknown table; SCPS_EMISMATCH when a
 * server is below wire_revision 4. */
SCPS_EXTERN int scps_client_topk(scps_client *c, const char *table, const float *queries, size_t n_queries,
                                 const scps_topk_options *o, int64_t *ids, float *scores, scps_topk_info *info,
                                 int64_t deadline_ms, scps_error *err);

/* The asynchronous form: checks as the blocking one does (returning the
 * code without a message), then returns at once; done runs on a client
 * thread once ids, scores and info are filled. queries is copied before
 * this returns; ids, scores and info must stay valid until done. */
SCPS_EXTERN int scps_client_topk_async(scps_client *c, const char *table, const float *queries, size_t n_queries,
                                       const scps_topk_options *o, int64_t *ids, float *scores, scps_topk_info *info,
                                       int64_t deadline_ms, scps_client_done done, void *ud);

#ifdef __cplusplus
}
#endif

#endif
