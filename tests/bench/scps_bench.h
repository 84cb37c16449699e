/* scps_bench: the order statistics, the plain file I/O and the CPU-time
 * readings every benchmark program reports with (timed by scps_clock.h), so
 * their figures are computed one way. */
#ifndef SCPS_BENCH_H
#define SCPS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Sorts v[0..n) ascending. */
void scps_bench_sort(double *v, size_t n);

/* The median of v[0..n) (the mean of the two middle values when n is even),
 * v left as it is; NAN when n is 0 or memory runs out. */
double scps_bench_median(const double *v, size_t n);

/* The yardstick of checkpoint figures: path created (truncated) and filled
 * with bytes bytes in write() calls of chunk_len from chunk, then fsynced;
 * read back with read() calls of chunk_len into chunk (one buffer, so the
 * reads cost only the page cache's side). 0, or -errno. */
int scps_bench_plain_write(const char *path, const void *chunk, size_t chunk_len, int64_t bytes);
int scps_bench_plain_read(const char *path, void *chunk, size_t chunk_len);

/* One thread's CPU time as the kernel accounts it (/proc/PID/task/TID). */
typedef struct scps_bench_thread {
  int tid;
  char name[16];        /* comm: what the thread named itself */
  double user_s, sys_s; /* stat's utime and stime: whole clock ticks */
  double cpu_s;         /* schedstat's run time: nanoseconds, user and system */
} scps_bench_thread;

/* Fills t[0..max) with process pid's live threads (pid 0: the caller's);
 * returns how many (at most max), or -errno. Threads that have exited are
 * in scps_bench_process_cpu_s only. */
int scps_bench_threads(int pid, scps_bench_thread *t, int max);

/* CPU time in seconds of process pid (0: the caller's), every thread it
 * ever ran included, from its CPU-time clock; NAN if it cannot be read. */
double scps_bench_process_cpu_s(int pid);

/* The calling thread's CPU time in seconds. */
double scps_bench_thread_cpu_s(void);

/* A process's CPU time at one moment: the whole and each live thread's. */
#define SCPS_BENCH_MAX_THREADS 256
typedef struct scps_bench_cpu {
  double process_s;
  int n;
  scps_bench_thread t[SCPS_BENCH_MAX_THREADS];
} scps_bench_cpu;

/* Reads process pid's (0: the caller's) into *s; 0, or -errno. */
int scps_bench_cpu_take(int pid, scps_bench_cpu *s);

/* Prints to f, as one JSON object, the CPU time from before to after
 * divided by batches, in ms: "process_ms", then per thread name (threads
 * that share a name summed) {"threads", "cpu_ms", "user_ms", "sys_ms"},
 * and "exited_ms", what threads gone by the second reading used. A thread
 * born between the readings counts from zero. */
void scps_bench_cpu_print(FILE *f, const scps_bench_cpu *before, const scps_bench_cpu *after, double batches);

#endif
