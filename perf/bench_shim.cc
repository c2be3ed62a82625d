// The C shim over Google Benchmark: a C benchmark function becomes a
// registered benchmark; the state is passed through as an opaque handle.
#include "bench_shim.h"

#include <benchmark/benchmark.h>

struct sg_bench_state {
	benchmark::State *s;
};

extern "C" {

bool sg_bench_next(sg_bench_state *st)
{
	return st->s->KeepRunning();
}

int64_t sg_bench_iterations(const sg_bench_state *st)
{
	return static_cast<int64_t>(st->s->iterations());
}

void sg_bench_items(sg_bench_state *st, int64_t n)
{
	st->s->SetItemsProcessed(n);
}

void sg_bench_pause(sg_bench_state *st)
{
	st->s->PauseTiming();
}

void sg_bench_resume(sg_bench_state *st)
{
	st->s->ResumeTiming();
}

int sg_bench_thread_index(const sg_bench_state *st)
{
	return st->s->thread_index();
}

int sg_bench_threads(const sg_bench_state *st)
{
	return st->s->threads();
}

void sg_bench_counter(sg_bench_state *st, const char *name, double value)
{
	st->s->counters[name] = value;
}

void sg_bench_fail(sg_bench_state *st, const char *msg)
{
	st->s->SkipWithError(msg);
}

void sg_bench_register(const char *name, sg_bench_fn fn, void *arg, const int *threads, int nthreads,
		       bool real_time)
{
	auto *b = benchmark::RegisterBenchmark(name, [fn, arg](benchmark::State &s) {
		sg_bench_state st{&s};
		fn(&st, arg);
	});
	for (int i = 0; i < nthreads; i++)
		b->Threads(threads[i]);
	if (real_time)
		b->UseRealTime();
}

int sg_bench_main(int argc, char **argv)
{
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
}
