/* scps._scps: the CPython binding of libscps (scps_client.h). It is thin on
 * purpose: it takes Python buffers (numpy arrays, torch tensors' .numpy()
 * views) whose type and shape the Python layer (scps/client.py) has checked
 * with messages that name the feature, and hands their memory to libscps
 * without copying; it checks again only what memory safety needs (item
 * size, contiguity, writability, element counts). Every call into libscps
 * that can wait (connect, prepare, lookup, push, checkpoint, read_rows, topk, a
 * future's wait) runs with the GIL released. Asynchronous operations never
 * call into Python from libscps's threads: their done callback only records
 * the status and signals a condition variable that the waiting Python
 * thread sleeps on, GIL released. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "scps_client.h"
#include "scps_memtune.h"

/* scps.errors.raise_from_status(code, name, description, message): the
 * Python exception factory, set once by scps/client.py at import. */
static PyObject *error_factory;

static PyObject *raise_status(int code, const char *msg) {
  if (!error_factory) {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", scps_err_name(code), msg);
    return NULL;
  }
  PyObject *exc = PyObject_CallFunction(error_factory, "isss", code, scps_err_name(code), scps_strerror(code), msg);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

static PyObject *set_error_factory(PyObject *self, PyObject *fn) {
  if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "set_error_factory: not callable");
  Py_XSETREF(error_factory, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* ---- buffers ---- */

/* Borrowed views of the buffers of one call, released together. */
typedef struct views {
  Py_buffer *v;
  int n, cap;
} views;

static void views_release(views *vs) {
  for (int i = 0; i < vs->n; i++) PyBuffer_Release(&vs->v[i]);
  PyMem_Free(vs->v);
  vs->v = NULL;
  vs->n = vs->cap = 0;
}

/* A C-contiguous view of obj (None: NULL, if allowed) holding `count`
 * items of `itemsize` bytes (count < 0: any number), writable if asked. */
static int view_of(views *vs, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, bool writable, const char *what,
                   void **out, Py_ssize_t *n_out) {
  *out = NULL;
  if (obj == Py_None) {
    if (n_out) *n_out = 0;
    return 0;
  }
  if (vs->n == vs->cap) {
    int cap = vs->cap ? 2 * vs->cap : 16;
    Py_buffer *v = PyMem_Realloc(vs->v, sizeof *v * (size_t)cap);
    if (!v) {
      PyErr_NoMemory();
      return -1;
    }
    vs->v = v;
    vs->cap = cap;
  }
  Py_buffer *b = &vs->v[vs->n];
  if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s: not a C-contiguous%s buffer", what, writable ? " writable" : "");
    return -1;
  }
  vs->n++;
  Py_ssize_t items = b->itemsize ? b->len / b->itemsize : 0;
  if (b->itemsize != itemsize || (count >= 0 && items != count)) {
    PyErr_Format(PyExc_ValueError, "%s: %zd items of %zd bytes, expected %zd of %zd bytes", what, items,
                 b->itemsize, count, itemsize);
    return -1;
  }
  *out = b->buf;
  if (n_out) *n_out = items;
  return 0;
}

/* ---- Client ---- */

/* scps_client_destroy needs the client's batches destroyed first: close()
 * only marks a client that still has batches, and the last batch to go
 * destroys it. */
typedef struct {
  PyObject_HEAD scps_client *c;
  int batches;  /* BatchObjects alive */
  bool closing; /* close() was called */
} ClientObject;

typedef struct {
  PyObject_HEAD ClientObject *client;
  scps_batch *b;
} BatchObject;

static PyTypeObject ClientType, BatchType, OpType;

static int opt_string(PyObject *o, const char *what, const char **out) {
  *out = NULL;
  if (o == Py_None) return 0;
  *out = PyUnicode_AsUTF8(o);
  if (!*out) PyErr_Format(PyExc_TypeError, "%s: expected a str or None", what);
  return *out ? 0 : -1;
}

/* 0, or -1 with SCPS_EINVAL raised naming the option and its value. */
static int bad_name(int rc, const char *option, const char *value, const char *expected) {
  if (!rc) return 0;
  char msg[256];
  snprintf(msg, sizeof msg, "%s '%s': expected %s", option, value, expected);
  raise_status(SCPS_EINVAL, msg);
  return -1;
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"servers", "expected_config", "policy", "prep_threads", "connect_timeout_ms",
                          "wire_format", "answer", "gradients", "ignore_checkpoint_due", "checkpoint_timeout_ms",
                          "own_connections", "cq_threads", "tls", "tls_ca_file", "tls_cert_file", "tls_key_file",
                          "tls_server_name", "token", "shared_memory", NULL};
  PyObject *servers, *expected = Py_None, *ca = Py_None, *cert = Py_None, *key = Py_None, *sname = Py_None,
                     *token = Py_None;
  const char *policy = "error", *wire = "float32", *answer = "auto", *gradients = "auto", *shm = "auto";
  int prep_threads = 0, ignore_due = 0, own = 0, cq_threads = 0, tls = 0;
  long long connect_ms = 0, ckpt_ms = 0;
  if (self->c) {
    PyErr_SetString(PyExc_RuntimeError, "Client already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|OsiLssspLpipOOOOOs", names, &PyTuple_Type, &servers, &expected,
                                   &policy, &prep_threads, &connect_ms, &wire, &answer, &gradients, &ignore_due,
                                   &ckpt_ms, &own, &cq_threads, &tls, &ca, &cert, &key, &sname, &token, &shm))
    return -1;
  scps_client_options o;
  scps_client_options_init(&o);
  Py_ssize_t n = PyTuple_GET_SIZE(servers);
  const char **addrs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *addrs);
  if (!addrs) {
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0;
  for (Py_ssize_t i = 0; !rc && i < n; i++)
    if (!(addrs[i] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(servers, i)))) rc = -1;
  if (!rc && (opt_string(expected, "expected_config", &o.expected_config) || opt_string(ca, "tls_ca_file", &o.security.tls_ca_file) ||
              opt_string(cert, "tls_cert_file", &o.security.tls_cert_file) ||
              opt_string(key, "tls_key_file", &o.security.tls_key_file) ||
              opt_string(sname, "tls_server_name", &o.security.tls_server_name) ||
              opt_string(token, "token", &o.security.token)))
    rc = -1;
  if (!rc && (bad_name(scps_limit_policy_from_name(policy, &o.policy), "policy", policy, "'error' or 'drop'") ||
              bad_name(scps_client_options_set_wire_format(&o, wire, NULL), "wire_format", wire,
                       "'float32', 'bfloat16' ('bf16') or an eXmY format ('e4m3', 'e5m2', 'e3m0s' with a scale per "
                       "row, 'e3m0b-2' with a bias), or 'ACTIVATIONS/GRADIENTS' ('e4m3/e3m0s')") ||
              bad_name(scps_answer_mode_from_name(answer, &o.answer), "answer", answer, "'auto', 'pooled' or 'rows'") ||
              bad_name(scps_gradient_mode_from_name(gradients, &o.gradients), "gradients", gradients,
                       "'auto', 'sample' or 'row'") ||
              bad_name(strcmp(shm, "auto") && strcmp(shm, "off") ? SCPS_EINVAL : 0, "shared_memory", shm,
                       "'auto' or 'off'")))
    rc = -1;
  if (rc) {
    PyMem_Free(addrs);
    return -1;
  }
  o.servers = addrs;
  o.n_servers = (int)n;
  o.prep_threads = prep_threads;
  o.connect_timeout_ms = connect_ms;
  o.ignore_checkpoint_due = ignore_due;
  o.checkpoint_timeout_ms = ckpt_ms;
  o.own_connections = own;
  o.cq_threads = cq_threads;
  o.shared_memory = strcmp(shm, "off") ? SCPS_SHM_AUTO : SCPS_SHM_OFF;
  o.security.tls = tls;
  scps_error err;
  scps_client *c = NULL;
  Py_BEGIN_ALLOW_THREADS rc = scps_client_create(&o, &c, &err);
  Py_END_ALLOW_THREADS PyMem_Free(addrs);
  if (rc) {
    raise_status(rc, err.msg);
    return -1;
  }
  self->c = c;
  return 0;
}

/* Destroys the client once closing and without batches (operations in
 * flight hold their batch, so there are none then either). */
static void client_release(ClientObject *self) {
  if (self->c && self->closing && !self->batches) {
    scps_client *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS scps_client_destroy(c);
    Py_END_ALLOW_THREADS
  }
}

static void Client_dealloc(ClientObject *self) {
  self->closing = true; /* batches hold a reference: none is left */
  client_release(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int live(ClientObject *self) {
  if (self->c && !self->closing) return 0;
  PyErr_SetString(PyExc_RuntimeError, "the client is closed");
  return -1;
}

static PyObject *Client_close(ClientObject *self, PyObject *unused) {
  self->closing = true;
  client_release(self);
  Py_RETURN_NONE;
}

static PyObject *Client_features(ClientObject *self, PyObject *unused) {
  if (live(self)) return NULL;
  int nf = scps_client_n_features(self->c);
  PyObject *list = PyList_New(nf);
  for (int f = 0; list && f < nf; f++) {
    PyObject *t = Py_BuildValue("(ssiiL)", scps_client_feature_name(self->c, f), scps_client_feature_table(self->c, f),
                                scps_client_feature_width(self->c, f), scps_client_feature_batch_size(self->c, f),
                                (long long)scps_client_feature_vocabulary(self->c, f));
    if (!t) Py_CLEAR(list);
    else PyList_SET_ITEM(list, f, t);
  }
  return list;
}

static PyObject *Client_info(ClientObject *self, PyObject *unused) {
  if (live(self)) return NULL;
  uint64_t sent, received, shm_sent, shm_received;
  scps_client_traffic(self->c, &sent, &received);
  scps_client_shared_traffic(self->c, &shm_sent, &shm_received);
  int n = scps_client_n_servers(self->c);
  PyObject *ckpt = PyTuple_New(n);
  for (int i = 0; ckpt && i < n; i++)
    PyTuple_SET_ITEM(ckpt, i, PyBool_FromLong(scps_client_server_has_checkpoint_dir(self->c, i)));
  if (!ckpt) return NULL;
  return Py_BuildValue("{s:L,s:i,s:i,s:L,s:K,s:K,s:K,s:K,s:N}", "step", (long long)scps_client_step(self->c),
                       "n_servers", n, "batch_size", scps_client_batch_size(self->c), "ids_dropped",
                       (long long)scps_client_ids_dropped(self->c), "bytes_sent", (unsigned long long)sent,
                       "bytes_received", (unsigned long long)received, "shared_bytes_sent",
                       (unsigned long long)shm_sent, "shared_bytes_received", (unsigned long long)shm_received,
                       "checkpoint_dirs", ckpt);
}

static PyObject *Client_batch(ClientObject *self, PyObject *unused) {
  if (live(self)) return NULL;
  BatchObject *b = PyObject_New(BatchObject, &BatchType);
  if (!b) return NULL;
  b->b = NULL;
  b->client = (ClientObject *)Py_NewRef(self);
  self->batches++;
  scps_error err;
  int rc = scps_batch_create(self->c, &b->b, &err);
  if (rc) {
    Py_DECREF(b);
    return raise_status(rc, err.msg);
  }
  return (PyObject *)b;
}

static void Batch_dealloc(BatchObject *self) {
  if (self->b) scps_batch_destroy(self->b);
  self->client->batches--;
  client_release(self->client);
  Py_XDECREF(self->client);
  PyObject_Free(self);
}

static int batch_of(ClientObject *self, PyObject *o, scps_batch **out) {
  if (live(self)) return -1;
  if (!PyObject_TypeCheck(o, &BatchType) || ((BatchObject *)o)->client != self) {
    PyErr_SetString(PyExc_TypeError, "batch: expected a batch of this client (Client.batch())");
    return -1;
  }
  *out = ((BatchObject *)o)->b;
  return 0;
}

/* prepare(batch, inputs): inputs[f] = (form, ids, weights, offsets,
 * lengths, valency, batch_size), form 0 ragged or 1 dense (scps_input.h). */
static PyObject *Client_prepare(ClientObject *self, PyObject *args) {
  PyObject *bo, *inputs;
  scps_batch *b;
  if (!PyArg_ParseTuple(args, "OO!", &bo, &PyList_Type, &inputs) || batch_of(self, bo, &b)) return NULL;
  int nf = scps_client_n_features(self->c);
  if (PyList_GET_SIZE(inputs) != nf)
    return PyErr_Format(PyExc_ValueError, "inputs: %zd features, the servers declare %d", PyList_GET_SIZE(inputs), nf);
  scps_feature_input *in = PyMem_Calloc((size_t)nf, sizeof *in);
  if (!in) return PyErr_NoMemory();
  views vs = {0};
  int rc = 0;
  for (int f = 0; !rc && f < nf; f++) {
    PyObject *ids, *w, *off, *len;
    int form, valency;
    long long batch;
    const char *name = scps_client_feature_name(self->c, f);
    if (!PyArg_ParseTuple(PyList_GET_ITEM(inputs, f), "iOOOOiL", &form, &ids, &w, &off, &len, &valency, &batch)) {
      rc = -1;
      break;
    }
    Py_ssize_t n = 0, nw, no, nl;
    void *p;
    char what[160];
    snprintf(what, sizeof what, "feature '%s' ids", name);
    rc = view_of(&vs, ids, 8, -1, false, what, &p, &n);
    in[f].ids = p;
    snprintf(what, sizeof what, "feature '%s' weights", name);
    if (!rc) rc = view_of(&vs, w, 4, n, false, what, &p, &nw);
    in[f].weights = p;
    snprintf(what, sizeof what, "feature '%s' offsets", name);
    if (!rc) rc = view_of(&vs, off, 8, form == SCPS_INPUT_RAGGED && off != Py_None ? batch + 1 : -1, false, what, &p, &no);
    in[f].row_offsets = p;
    snprintf(what, sizeof what, "feature '%s' lengths", name);
    if (!rc) rc = view_of(&vs, len, 4, form == SCPS_INPUT_RAGGED && len != Py_None ? batch : -1, false, what, &p, &nl);
    in[f].row_lengths = p;
    if (rc) break;
    if (form != SCPS_INPUT_RAGGED && form != SCPS_INPUT_DENSE) {
      PyErr_Format(PyExc_ValueError, "feature '%s': form %d", name, form);
      rc = -1;
    } else if (form == SCPS_INPUT_RAGGED && !in[f].row_offsets && !in[f].row_lengths) {
      PyErr_Format(PyExc_ValueError, "feature '%s': ragged input without offsets or lengths", name);
      rc = -1;
    } else if (form == SCPS_INPUT_DENSE && (valency < 0 || (long long)valency * batch != n)) {
      PyErr_Format(PyExc_ValueError, "feature '%s': dense ids hold %zd items, not %lld x %d", name, n, batch,
                   valency);
      rc = -1;
    }
    in[f].form = (scps_input_form)form;
    in[f].n_ids = (size_t)n;
    in[f].valency = valency;
    in[f].batch_size = batch;
  }
  scps_error err;
  if (!rc) {
    Py_BEGIN_ALLOW_THREADS rc = scps_client_prepare(self->c, in, b, &err);
    Py_END_ALLOW_THREADS if (rc) raise_status(rc, err.msg);
  }
  views_release(&vs);
  PyMem_Free(in);
  if (rc) return NULL;
  Py_RETURN_NONE;
}

/* Views of one float buffer per feature, each batch size x width floats. */
static int float_views(ClientObject *self, views *vs, PyObject *list, bool writable, const char *what, float **out) {
  int nf = scps_client_n_features(self->c);
  if (!PyList_Check(list) || PyList_GET_SIZE(list) != nf) {
    PyErr_Format(PyExc_ValueError, "%s: expected a list of %d arrays, one per feature", what, nf);
    return -1;
  }
  for (int f = 0; f < nf; f++) {
    char name[160];
    void *p;
    snprintf(name, sizeof name, "feature '%s' %s", scps_client_feature_name(self->c, f), what);
    Py_ssize_t count = (Py_ssize_t)scps_client_feature_batch_size(self->c, f) * scps_client_feature_width(self->c, f);
    if (view_of(vs, PyList_GET_ITEM(list, f), 4, count, writable, name, &p, NULL)) return -1;
    if (!p) {
      PyErr_Format(PyExc_ValueError, "%s: None", name);
      return -1;
    }
    out[f] = p;
  }
  return 0;
}

/* ---- asynchronous operations ---- */

typedef struct {
  PyObject_HEAD pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  int status;
  char msg[SCPS_ERROR_MSG_MAX];
  views vs;         /* the arrays libscps reads or writes until done */
  float **floats;   /* the pointer array handed to libscps */
  PyObject *batch;  /* kept alive until done */
  PyObject *result; /* what result() returns: the activations, or None */
} OpObject;

static void op_done(void *ud, int status, const scps_error *err) {
  OpObject *op = ud;
  pthread_mutex_lock(&op->mu);
  op->status = status;
  if (status) snprintf(op->msg, sizeof op->msg, "%s", err ? err->msg : scps_strerror(status));
  op->done = true;
  pthread_cond_broadcast(&op->cv);
  pthread_mutex_unlock(&op->mu);
}

/* Waits up to timeout seconds (< 0: for ever), GIL released: whether done. */
static bool op_wait(OpObject *op, double timeout) {
  bool done;
  Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&op->mu);
  if (timeout < 0) {
    while (!op->done) pthread_cond_wait(&op->cv, &op->mu);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + timeout;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    while (!op->done)
      if (pthread_cond_timedwait(&op->cv, &op->mu, &ts)) break;
  }
  done = op->done;
  pthread_mutex_unlock(&op->mu);
  Py_END_ALLOW_THREADS return done;
}

static void Op_dealloc(OpObject *self) {
  /* libscps writes into the views until done: never free them before. */
  op_wait(self, -1);
  views_release(&self->vs);
  PyMem_Free(self->floats);
  Py_XDECREF(self->batch);
  Py_XDECREF(self->result);
  pthread_cond_destroy(&self->cv);
  pthread_mutex_destroy(&self->mu);
  PyObject_Free(self);
}

static PyObject *Op_wait(OpObject *self, PyObject *args) {
  PyObject *timeout = Py_None;
  if (!PyArg_ParseTuple(args, "|O", &timeout)) return NULL;
  double t = -1; /* None: for ever */
  if (timeout != Py_None) {
    t = PyFloat_AsDouble(timeout);
    if (t == -1 && PyErr_Occurred()) return NULL;
    if (!(t >= 0)) t = 0;
  }
  return PyBool_FromLong(op_wait(self, t));
}

static PyObject *Op_done(OpObject *self, PyObject *unused) {
  pthread_mutex_lock(&self->mu);
  bool d = self->done;
  pthread_mutex_unlock(&self->mu);
  return PyBool_FromLong(d);
}

/* result(): the operation's result once done (waits), or raises its error. */
static PyObject *Op_result(OpObject *self, PyObject *unused) {
  op_wait(self, -1);
  if (self->status) return raise_status(self->status, self->msg);
  return Py_NewRef(self->result ? self->result : Py_None);
}

/* Starts a lookup (grads NULL) or push on b; blocking: waits for it. */
static PyObject *start(ClientObject *self, PyObject *bo, PyObject *arrays, PyObject *result, int64_t step, double lr,
                       long long deadline_ms, bool blocking) {
  scps_batch *b;
  if (batch_of(self, bo, &b)) return NULL;
  if (deadline_ms <= 0) return PyErr_Format(PyExc_ValueError, "deadline_ms %lld: expected > 0", deadline_ms);
  bool push = step >= 0;
  OpObject *op = PyObject_New(OpObject, &OpType);
  if (!op) return NULL;
  pthread_mutex_init(&op->mu, NULL);
  pthread_cond_init(&op->cv, NULL);
  op->done = true; /* until started: dealloc must not wait */
  op->status = 0;
  op->msg[0] = '\0';
  memset(&op->vs, 0, sizeof op->vs);
  op->batch = Py_NewRef(bo);
  op->result = Py_XNewRef(result);
  int nf = scps_client_n_features(self->c);
  op->floats = PyMem_Calloc((size_t)nf, sizeof *op->floats);
  if (!op->floats) {
    Py_DECREF(op);
    return PyErr_NoMemory();
  }
  if (float_views(self, &op->vs, arrays, !push, push ? "gradients" : "activations", op->floats)) {
    Py_DECREF(op);
    return NULL;
  }
  int rc;
  op->done = false;
  if (blocking) {
    scps_error err;
    Py_BEGIN_ALLOW_THREADS rc = push ? scps_client_apply_gradients(self->c, b, (const float *const *)op->floats, step, lr,
                                                                    deadline_ms, &err)
                                     : scps_client_lookup(self->c, b, op->floats, deadline_ms, &err);
    Py_END_ALLOW_THREADS op->done = true;
    if (rc) {
      Py_DECREF(op);
      return raise_status(rc, err.msg);
    }
    PyObject *r = Py_NewRef(op->result ? op->result : Py_None);
    Py_DECREF(op);
    return r;
  }
  rc = push ? scps_client_apply_gradients_async(self->c, b, (const float *const *)op->floats, step, lr, deadline_ms,
                                                op_done, op)
            : scps_client_lookup_async(self->c, b, op->floats, deadline_ms, op_done, op);
  if (rc) {
    op->done = true;
    Py_DECREF(op);
    return raise_status(rc, "the operation could not start (the blocking form says why)");
  }
  return (PyObject *)op;
}

/* lookup(batch, acts, result, deadline_ms, blocking) */
static PyObject *Client_lookup(ClientObject *self, PyObject *args) {
  PyObject *bo, *acts, *result;
  long long deadline;
  int blocking;
  if (!PyArg_ParseTuple(args, "OOOLp", &bo, &acts, &result, &deadline, &blocking) || live(self)) return NULL;
  return start(self, bo, acts, result, -1, -1, deadline, blocking);
}

/* push(batch, grads, step, learning_rate, deadline_ms, blocking) */
static PyObject *Client_push(ClientObject *self, PyObject *args) {
  PyObject *bo, *grads;
  long long step, deadline;
  double lr;
  int blocking;
  if (!PyArg_ParseTuple(args, "OOLdLp", &bo, &grads, &step, &lr, &deadline, &blocking) || live(self)) return NULL;
  if (step < 0) return PyErr_Format(PyExc_ValueError, "step %lld: expected >= 0", step);
  return start(self, bo, grads, NULL, step, lr, deadline, blocking);
}

static PyObject *checkpoint_dict(const scps_client_checkpoint_result *r) {
  return Py_BuildValue("{s:L,s:s,s:L,s:i,s:d}", "step", (long long)r->step, "path", r->path, "bytes",
                       (long long)r->bytes, "files", (int)r->files, "seconds", r->seconds);
}

/* checkpoint(step, directory or None, deadline_ms) -> dict */
static PyObject *Client_checkpoint(ClientObject *self, PyObject *args) {
  long long step, deadline;
  const char *dir = NULL;
  if (!PyArg_ParseTuple(args, "LzL", &step, &dir, &deadline) || live(self)) return NULL;
  scps_client_checkpoint_result res;
  scps_error err;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = scps_client_checkpoint(self->c, step, dir, deadline, &res, &err);
  Py_END_ALLOW_THREADS if (rc) return raise_status(rc, err.msg);
  return checkpoint_dict(&res);
}

/* auto_checkpoint() -> dict, or None when there was none */
static PyObject *Client_auto_checkpoint(ClientObject *self, PyObject *unused) {
  if (live(self)) return NULL;
  scps_client_checkpoint_result res;
  scps_error err;
  int rc = scps_client_auto_checkpoint(self->c, &res, &err);
  if (rc == SCPS_ENOENT) Py_RETURN_NONE;
  if (rc) return raise_status(rc, err.msg);
  return checkpoint_dict(&res);
}

/* read_rows(table, ids int64, rows float32 out, slots float32 out or None, deadline_ms) */
static PyObject *Client_read_rows(ClientObject *self, PyObject *args) {
  const char *table;
  PyObject *ids, *rows, *slots;
  long long deadline;
  if (!PyArg_ParseTuple(args, "sOOOL", &table, &ids, &rows, &slots, &deadline) || live(self)) return NULL;
  views vs = {0};
  void *pi, *pr, *ps;
  Py_ssize_t n, nr, ns;
  int rc = view_of(&vs, ids, 8, -1, false, "ids", &pi, &n);
  if (!rc) rc = view_of(&vs, rows, 4, -1, true, "rows", &pr, &nr);
  if (!rc) rc = view_of(&vs, slots, 4, -1, true, "slots", &ps, &ns);
  /* The Python layer sizes rows and slots from the table's width and
   * optimizer; here only that they are whole rows of at least that many. */
  if (!rc && (!pr || (n && nr % n))) {
    PyErr_SetString(PyExc_ValueError, "rows: not n_ids whole rows");
    rc = -1;
  }
  /* libscps writes as many slots as the table's optimizer has, at most 2
   * (Adam's). */
  if (!rc && ps && ns < 2 * nr) {
    PyErr_SetString(PyExc_ValueError, "slots: room for fewer than 2 slots per row");
    rc = -1;
  }
  scps_error err;
  if (!rc) {
    int f = -1;
    for (int i = 0; i < scps_client_n_features(self->c); i++)
      if (!strcmp(scps_client_feature_table(self->c, i), table)) f = i;
    if (f >= 0 && n && nr / n != scps_client_feature_width(self->c, f)) {
      PyErr_Format(PyExc_ValueError, "rows: %zd floats per id, table '%s' has %d", nr / n, table,
                   scps_client_feature_width(self->c, f));
      rc = -1;
    }
  }
  if (!rc) {
    Py_BEGIN_ALLOW_THREADS rc = scps_client_read_rows(self->c, table, pi, (size_t)n, pr, ps, deadline, &err);
    Py_END_ALLOW_THREADS if (rc) raise_status(rc, err.msg);
  }
  views_release(&vs);
  if (rc) return NULL;
  Py_RETURN_NONE;
}

/* topk(table, queries float32 [n x width], n, k, score, recall_target, first_id, count, query_format or
 * None, ids int64 out [n x k], scores float32 out [n x k], deadline_ms) -> dict of the call's info */
static PyObject *Client_topk(ClientObject *self, PyObject *args) {
  const char *table, *score, *format;
  PyObject *queries, *ids, *scores;
  Py_ssize_t n;
  int k;
  double recall;
  long long first, count, deadline;
  if (!PyArg_ParseTuple(args, "sOnisdLLzOOL", &table, &queries, &n, &k, &score, &recall, &first, &count, &format,
                        &ids, &scores, &deadline) ||
      live(self))
    return NULL;
  scps_topk_options o;
  scps_topk_options_init(&o);
  o.k = k;
  o.recall_target = recall;
  o.first_id = first;
  o.count = count;
  if (scps_topk_score_from_name(score, &o.score))
    return PyErr_Format(PyExc_ValueError, "score '%s': expected 'dot', 'cosine' or 'l2'", score);
  if (format && strlen(format) >= sizeof o.query_format)
    return PyErr_Format(PyExc_ValueError, "query_format '%s': too long for a format name", format);
  if (format) snprintf(o.query_format, sizeof o.query_format, "%s", format);
  /* libscps reads n x the table's width: the width of a feature of it. */
  int width = -1;
  for (int i = 0; i < scps_client_n_features(self->c); i++)
    if (!strcmp(scps_client_feature_table(self->c, i), table)) width = scps_client_feature_width(self->c, i);
  if (width < 0) return PyErr_Format(PyExc_ValueError, "table '%s': no feature of the servers looks it up", table);
  if (n < 1 || k < 1) return PyErr_Format(PyExc_ValueError, "n %zd, k %d: expected >= 1", n, k);
  views vs = {0};
  void *pq, *pi, *ps;
  int rc = view_of(&vs, queries, 4, n * width, false, "queries", &pq, NULL);
  if (!rc) rc = view_of(&vs, ids, 8, n * k, true, "ids", &pi, NULL);
  if (!rc) rc = view_of(&vs, scores, 4, n * k, true, "scores", &ps, NULL);
  if (!rc && (!pq || !pi || !ps)) {
    PyErr_SetString(PyExc_ValueError, "queries, ids and scores: None");
    rc = -1;
  }
  scps_topk_info info;
  scps_error err;
  if (!rc) {
    Py_BEGIN_ALLOW_THREADS rc = scps_client_topk(self->c, table, pq, (size_t)n, &o, pi, ps, &info, deadline, &err);
    Py_END_ALLOW_THREADS if (rc) raise_status(rc, err.msg);
  }
  views_release(&vs);
  if (rc) return NULL;
  return Py_BuildValue("{s:i,s:L,s:d}", "bins", (int)info.bins, "rows_scanned", (long long)info.rows_scanned,
                       "expected_recall", info.expected_recall);
}

static PyMethodDef Client_methods[] = {
    {"close", (PyCFunction)Client_close, METH_NOARGS, "Waits for operations in flight and closes the channels."},
    {"features", (PyCFunction)Client_features, METH_NOARGS, "[(name, table, width, batch_size, vocabulary)]"},
    {"info", (PyCFunction)Client_info, METH_NOARGS, "step, servers, traffic and drops as a dict"},
    {"batch", (PyCFunction)Client_batch, METH_NOARGS, "A new batch (scps_batch_create)."},
    {"prepare", (PyCFunction)Client_prepare, METH_VARARGS, "prepare(batch, inputs)"},
    {"lookup", (PyCFunction)Client_lookup, METH_VARARGS, "lookup(batch, acts, result, deadline_ms, blocking)"},
    {"push", (PyCFunction)Client_push, METH_VARARGS, "push(batch, grads, step, lr, deadline_ms, blocking)"},
    {"checkpoint", (PyCFunction)Client_checkpoint, METH_VARARGS, "checkpoint(step, directory, deadline_ms)"},
    {"auto_checkpoint", (PyCFunction)Client_auto_checkpoint, METH_NOARGS, "the latest automatic checkpoint"},
    {"read_rows", (PyCFunction)Client_read_rows, METH_VARARGS, "read_rows(table, ids, rows, slots, deadline_ms)"},
    {"topk", (PyCFunction)Client_topk, METH_VARARGS,
     "topk(table, queries, n, k, score, recall_target, first_id, count, query_format, ids, scores, deadline_ms)"},
    {NULL, NULL, 0, NULL}};

static PyMethodDef Op_methods[] = {
    {"wait", (PyCFunction)Op_wait, METH_VARARGS, "wait(timeout=None) -> whether done (GIL released)"},
    {"done", (PyCFunction)Op_done, METH_NOARGS, "whether done"},
    {"result", (PyCFunction)Op_result, METH_NOARGS, "waits; the result, or raises the error"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scps._scps.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "libscps's scps_client (use scps.Client)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_methods = Client_methods,
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scps._scps.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "libscps's scps_batch: one preprocessed batch",
    .tp_dealloc = (destructor)Batch_dealloc,
};

static PyTypeObject OpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "scps._scps.Operation",
    .tp_basicsize = sizeof(OpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an asynchronous lookup or push in flight",
    .tp_dealloc = (destructor)Op_dealloc,
    .tp_methods = Op_methods,
};

static PyObject *memtune_apply(PyObject *self, PyObject *unused) {
  scps_memtune_apply();
  Py_RETURN_NONE;
}

static PyObject *version(PyObject *self, PyObject *unused) { return PyUnicode_FromString(scps_version()); }

static PyMethodDef module_methods[] = {
    {"set_error_factory", set_error_factory, METH_O, "the callable that builds exceptions from a status"},
    {"memtune_apply", memtune_apply, METH_NOARGS, "scps_memtune_apply(): libscps's allocator settings"},
    {"version", version, METH_NOARGS, "libscps's version"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "scps._scps", "libscps binding (use the scps package)", -1,
                                    module_methods, NULL, NULL, NULL, NULL};

/* The one symbol the extension exports; its name is CPython's rule. */
PyMODINIT_FUNC PyInit__scps(void);
PyMODINIT_FUNC PyInit__scps(void) {
  if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&BatchType) < 0 || PyType_Ready(&OpType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
      PyModule_AddObjectRef(m, "Batch", (PyObject *)&BatchType) < 0 ||
      PyModule_AddObjectRef(m, "Operation", (PyObject *)&OpType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
