/*
 * bench_shim: Google Benchmark for C code. The shim (bench_shim.cc) is C++
 * (as is cel/sg_cel_re2.cc); benchmarks are plain C functions registered here.
 *
 *   static void bm(sg_bench_state *st, void *arg) {
 *       while (sg_bench_next(st)) work(arg);
 *       sg_bench_items(st, sg_bench_iterations(st));
 *   }
 *   sg_bench_register("name", bm, arg, 1, 1);
 *   return sg_bench_main(argc, argv);
 */
#ifndef SG_BENCH_SHIM_H
#define SG_BENCH_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_bench_state sg_bench_state;
typedef void (*sg_bench_fn)(sg_bench_state *st, void *arg);

/* True while the benchmark should run another iteration. */
bool sg_bench_next(sg_bench_state *st);
int64_t sg_bench_iterations(const sg_bench_state *st);
/* Items processed in this thread (Google Benchmark reports items/s). */
void sg_bench_items(sg_bench_state *st, int64_t n);
void sg_bench_pause(sg_bench_state *st);
void sg_bench_resume(sg_bench_state *st);
int sg_bench_thread_index(const sg_bench_state *st);
int sg_bench_threads(const sg_bench_state *st);
void sg_bench_counter(sg_bench_state *st, const char *name, double value);
void sg_bench_fail(sg_bench_state *st, const char *msg);

/* Registers fn to run with every thread count in threads[0..nthreads);
 * real_time measures wall clock (use it when work happens on other threads,
 * e.g. the signer pool). */
void sg_bench_register(const char *name, sg_bench_fn fn, void *arg, const int *threads, int nthreads,
		       bool real_time);
int sg_bench_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
