/*
 * wakecost: what one sleep and wake-up costs this host in CPU time, and so
 * the best a server whose threads sleep once per request can do here
 * against the same server whose threads never sleep.
 *
 * Why: a token that answers C_Sign after a wait (a network HSM) puts the
 * signing thread to sleep once per certificate; nothing in user space
 * removes that sleep, because PKCS#11 has no asynchronous call. What the
 * sleep costs is the host's, its timer and its interrupt: 25-40 us of
 * CPU on the two-vCPU guest of perf/README.md section 13, where both go
 * through the hypervisor. perf/hsmlatency.sh compares signetd on a delayed token with
 * the same signetd undelayed; this program measures, beside it, what any
 * program pays here for one sleep per unit of work, so the ratio can be
 * read against the host's ceiling rather than against 1.
 *
 * How: a unit of work is an ECDSA P-256 signature and its verification
 * (OpenSSL; the same kind of work as a certificate's). Two phases
 * alternate, `rounds` times each, `seconds` each:
 *   - awake: one thread per online CPU, units back to back (no sleep);
 *   - asleep: enough threads to keep the CPUs busy while each sleeps
 *     `sleep-us` after every unit (twice Little's law, as the signer pool
 *     sizes itself; --threads overrides, --max-threads bounds), so the
 *     CPUs stay busy and the CPU time per unit is the unit plus what one
 *     sleep costs. (Bounded below what keeps them busy, as a server with
 *     few requests in flight on a slow token is, the cost also counts the
 *     CPUs' idle entries and exits.)
 * The process's CPU time (its CPU clock: user and system, all threads) over
 * the measured window divided by the units done gives each phase's CPU per
 * unit; the difference of the medians is the cost of one sleep. The units
 * per second of the best round of each phase give the throughput ratio;
 * a server doing u ms of CPU per request can reach at best u / (u + cost)
 * of its undelayed rate with one sleep per request.
 *
 * It is a benchmark tool, not part of the product: it runs what it is
 * told for as long as it is told (bounded: at most 60 s a phase and 20
 * rounds) and touches nothing but its own threads.
 */
#include "sg_clock.h"
#include "sg_error.h"
#include "sg_guard.h"
#include "sg_opt.h"

#include <openssl/ec.h>
#include <openssl/evp.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct wc_args {
	int64_t sleep_us;
	int64_t seconds;
	int64_t rounds;
	int64_t threads;
	int64_t max_threads;
	bool json;
} wc_args;

#define ROW(name, type, field, def, min, max, help)                                                                    \
	{                                                                                                              \
		name, type, offsetof(wc_args, field), def, min, max, NULL, help, true                                  \
	}

static const sg_opt opts[] = {
    ROW("sleep-us", SG_OPT_INT, sleep_us, "2000", 1, 1000000, "the sleep after each unit in the asleep phase (us)"),
    ROW("seconds", SG_OPT_INT, seconds, "2", 1, 60, "measured time of each phase in each round"),
    ROW("rounds", SG_OPT_INT, rounds, "3", 1, 20, "rounds; the phases alternate, awake first"),
    ROW("threads", SG_OPT_INT, threads, "0", 0, 1024,
        "threads of the asleep phase (0: twice what keeps the CPUs busy, from the awake phase's unit time)"),
    ROW("max-threads", SG_OPT_INT, max_threads, "1024", 1, 1024,
        "with --threads 0, at most this many asleep threads (a server has no more signatures in flight than requests)"),
    ROW("json", SG_OPT_BOOL, json, "false", 0, 0, "print the result as one JSON line"),
};

#define N(t) (sizeof(t) / sizeof((t)[0]))
#define WARMUP_MS 300 /* threads started and caches warm before the window opens */
#define MAX_ROUNDS 20

typedef struct phase {
	EVP_PKEY *key;
	uint64_t sleep_ns; /* 0: awake */
	atomic_bool stop;
	atomic_uint_fast64_t units;
	atomic_int failed;
} phase;

static void *unit_loop(void *arg)
{
	phase *ph = arg;
	unsigned char msg[512], sig[80];
	memset(msg, 0x5a, sizeof(msg));
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	struct timespec nap = {(time_t)(ph->sleep_ns / 1000000000u), (long)(ph->sleep_ns % 1000000000u)};
	while (ctx && !atomic_load_explicit(&ph->stop, memory_order_relaxed)) {
		size_t n = sizeof(sig);
		msg[0]++; /* a different message each time, as each certificate is */
		if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, ph->key) != 1 ||
		    EVP_DigestSign(ctx, sig, &n, msg, sizeof(msg)) != 1 ||
		    EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, ph->key) != 1 ||
		    EVP_DigestVerify(ctx, sig, n, msg, sizeof(msg)) != 1) {
			atomic_store(&ph->failed, 1);
			break;
		}
		atomic_fetch_add_explicit(&ph->units, 1, memory_order_relaxed);
		if (ph->sleep_ns)
			nanosleep(&nap, NULL);
	}
	if (!ctx)
		atomic_store(&ph->failed, 1);
	EVP_MD_CTX_free(ctx);
	return NULL;
}

typedef struct measured {
	double units_per_s, cpu_us_per_unit;
} measured;

/* One phase: `threads` threads for WARMUP_MS, then a window of `window_ms`. */
static int run_phase(EVP_PKEY *key, unsigned threads, uint64_t sleep, unsigned window_ms, measured *m)
{
	phase ph = {.key = key, .sleep_ns = sleep};
	pthread_t *th = calloc(threads, sizeof(*th));
	SG_ENSURE(th, SG_EINTERNAL, "out of memory");
	unsigned started = 0;
	for (; started < threads; started++)
		if (pthread_create(&th[started], NULL, unit_loop, &ph) != 0)
			break;
	int rc = SG_OK;
	if (started < threads) {
		rc = sg_error_set(SG_EINTERNAL, "could start only %u of %u threads", started, threads);
	} else {
		sg_sleep_ms(WARMUP_MS);
		uint64_t u0 = atomic_load(&ph.units), c0 = sg_process_cpu_ns(), t0 = sg_now_ns();
		sg_sleep_ms(window_ms);
		uint64_t u1 = atomic_load(&ph.units), c1 = sg_process_cpu_ns(), t1 = sg_now_ns();
		if (u1 == u0)
			rc = sg_error_set(SG_EINTERNAL, "no unit of work finished in the window");
		else {
			m->units_per_s = (double)(u1 - u0) * 1e9 / (double)(t1 - t0);
			m->cpu_us_per_unit = (double)(c1 - c0) / 1e3 / (double)(u1 - u0);
		}
	}
	atomic_store(&ph.stop, true);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	if (rc == SG_OK && atomic_load(&ph.failed))
		rc = sg_error_set(SG_EINTERNAL, "an OpenSSL signature or verification failed");
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run(const wc_args *a)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned cpus = ncpu > 0 ? (unsigned)ncpu : 1;
	EVP_PKEY *key = EVP_EC_gen("P-256");
	SG_ENSURE(key, SG_EINTERNAL, "cannot make a P-256 key");
	unsigned window = (unsigned)a->seconds * 1000u;
	uint64_t sleep = (uint64_t)a->sleep_us * 1000u;
	int rounds = (int)a->rounds;
	double awake_cpu[MAX_ROUNDS], asleep_cpu[MAX_ROUNDS], best_awake = 0, best_asleep = 0;
	unsigned threads = (unsigned)a->threads;
	int rc = SG_OK;
	for (int r = 0; r < rounds && rc == SG_OK; r++) {
		measured aw, as;
		rc = run_phase(key, cpus, 0, window, &aw);
		if (rc != SG_OK)
			break;
		if (!threads) {
			/* Little's law: a unit takes unit + sleep of wall time and
			 * unit of a CPU, so cpus * (unit + sleep) / unit threads
			 * keep the CPUs busy; twice that, as the signer pool. */
			double unit_us = aw.cpu_us_per_unit;
			double t = 2.0 * cpus * (unit_us + (double)a->sleep_us) / unit_us;
			threads = t + 1 >= (double)a->max_threads ? (unsigned)a->max_threads : (unsigned)t + 1;
		}
		rc = run_phase(key, threads, sleep, window, &as);
		if (rc != SG_OK)
			break;
		awake_cpu[r] = aw.cpu_us_per_unit;
		asleep_cpu[r] = as.cpu_us_per_unit;
		if (aw.units_per_s > best_awake)
			best_awake = aw.units_per_s;
		if (as.units_per_s > best_asleep)
			best_asleep = as.units_per_s;
		if (!a->json)
			printf(
			    "round %d: awake %u threads %.0f units/s %.1f us CPU/unit; asleep %u threads %.0f units/s "
			    "%.1f us CPU/unit\n",
			    r + 1, cpus, aw.units_per_s, aw.cpu_us_per_unit, threads, as.units_per_s,
			    as.cpu_us_per_unit);
	}
	EVP_PKEY_free(key);
	if (rc != SG_OK)
		return rc;
	double ma = median(awake_cpu, rounds), ms = median(asleep_cpu, rounds);
	double cost = ms > ma ? ms - ma : 0;
	if (a->json)
		printf("{\"cpus\":%u,\"sleep_us\":%lld,\"threads\":%u,\"rounds\":%d,\"awake_cpu_us_per_unit\":%.2f,"
		       "\"asleep_cpu_us_per_unit\":%.2f,\"cost_us_per_sleep\":%.2f,\"best_awake_units_per_s\":%.1f,"
		       "\"best_asleep_units_per_s\":%.1f,\"ratio\":%.3f}\n",
		       cpus, (long long)a->sleep_us, threads, rounds, ma, ms, cost, best_awake, best_asleep,
		       best_asleep / best_awake);
	else
		printf(
		    "median CPU per unit: awake %.1f us, asleep %.1f us: one sleep of %lld us costs %.1f us of CPU;\n"
		    "best units/s asleep against awake: %.0f / %.0f = %.3f\n",
		    ma, ms, (long long)a->sleep_us, cost, best_asleep, best_awake, best_asleep / best_awake);
	return SG_OK;
}

int main(int argc, char **argv)
{
	wc_args a;
	memset(&a, 0, sizeof(a));
	int status;
	if (!sg_opt_program("wakecost",
	                    "usage: wakecost [options]\n\n"
	                    "What one sleep and wake-up costs this host in CPU: units of work (an ECDSA P-256\n"
	                    "signature and its verification) with no sleep, against enough threads that each\n"
	                    "sleep --sleep-us after every unit to keep the CPUs busy; the phases alternate.\n\n",
	                    opts, N(opts), &a, argc, argv, NULL, &status))
		return status;
	int rc = run(&a);
	fflush(stdout);
	if (rc < 0)
		fprintf(stderr, "wakecost: %s\n", sg_error_last()->msg);
	sg_opt_free(opts, N(opts), &a);
	return rc < 0 ? 1 : 0;
}
