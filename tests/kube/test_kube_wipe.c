/*
 * A Secret's bytes in the heap of a controller program: against a real
 * kube-apiserver, a Secret is created, listed and watched by an informer,
 * updated, read, deleted, and everything of it released; no block freed
 * meanwhile may still hold its data. Also the pieces alone: a response
 * buffer (sg_strbuf with wipe) growing past several blocks, the watch
 * parser growing its line over chunks, and jansson's frees once
 * sg_kube_json_wipe_frees has run, as sg_ctrl_program_main makes it run
 * first thing (its --help is enough to see that).
 *
 * How freed memory is looked at without reading it after the free: the
 * executable is linked with --wrap=free and --wrap=realloc, so every free
 * and realloc made by signet's own code (jansson's frees too, once they
 * are ours) comes here first, while the block is still allocated, and the
 * block is searched for the marker over its usable size (a realloc may
 * free it as it is). libcurl's and OpenSSL's own buffers are freed inside
 * their libraries and are out of reach, of this test and of signet; so
 * that their stale bytes, in memory a later malloc hands to signet, are
 * not taken for signet's, --wrap=malloc fills every new block (and a
 * realloc its new part) with a pattern.
 */
#define _GNU_SOURCE /* memmem */
#include "sg_ctrl_program.h"
#include "sg_kube_informer.h"
#include "sg_strbuf.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <malloc.h>
#include <stdatomic.h>
#include <string.h>

/* Base64 text (36 characters of its alphabet): a Secret's data value as
 * the API server stores and answers it, so that the same bytes travel in
 * every request, response, event and parsed copy. */
#define MARKER "signetWipeTest5f1c0eMarkerB64text000"

void __real_free(void *p);
void __wrap_free(void *p);
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);

static atomic_bool armed;
static atomic_uint leaked, seen;
static const char *marker = MARKER;

/* p is about to be freed (or may be, by a realloc): counted, and counted
 * as leaked when it holds the marker. */
static void look(void *p)
{
	if (p && atomic_load(&armed)) {
		size_t n = malloc_usable_size(p);
		atomic_fetch_add(&seen, 1);
		if (memmem(p, n, marker, strlen(marker)))
			atomic_fetch_add(&leaked, 1);
	}
}

void __wrap_free(void *p)
{
	look(p);
	__real_free(p);
}

#define FILL 0xa5

void *__wrap_malloc(size_t n)
{
	void *p = __real_malloc(n);
	if (p)
		memset(p, FILL, malloc_usable_size(p));
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	look(p);
	size_t old = p ? malloc_usable_size(p) : 0;
	void *q = __real_realloc(p, n);
	size_t now = q ? malloc_usable_size(q) : 0;
	if (now > old)
		memset((char *)q + old, FILL, now - old);
	return q;
}

/* Through a pointer, so that the compiler cannot pair a malloc with its
 * free and leave both out. */
static void (*volatile free_fn)(void *) = free;

static void arm(void)
{
	atomic_store(&leaked, 0);
	atomic_store(&seen, 0);
	atomic_store(&armed, true);
}

static unsigned disarm(void)
{
	atomic_store(&armed, false);
	return atomic_load(&leaked);
}

static sg_kube *k;

/* The search itself: a block freed with the marker in it is counted. */
static void t_search_works(void)
{
	arm();
	char *p = malloc(100);
	SG_CHECK(p != NULL);
	if (!p)
		return;
	memset(p, 'x', 100);
	memcpy(p + 30, MARKER, strlen(MARKER));
	free_fn(p);
	SG_CHECK(disarm() == 1);
	SG_CHECK(atomic_load(&seen) >= 1);
}

/* Whether jansson's free is ours and clears the block: a marked block
 * and a string freed through it are seen here, without the marker.
 * (Before sg_kube_json_wipe_frees, jansson frees inside its library, and
 * nothing is seen.) */
static bool json_frees_cleared(void)
{
	json_malloc_t m = NULL;
	json_free_t f = NULL;
	json_get_alloc_funcs(&m, &f);
	if (!m || !f)
		return false;
	arm();
	char *p = m(100);
	if (!p)
		return disarm(), false;
	memcpy(p, MARKER, strlen(MARKER) + 1);
	f(p);
	json_t *s = json_string(MARKER);
	json_decref(s);
	unsigned left = disarm();
	printf("json frees: %u seen, %u held the marker\n", atomic_load(&seen), left);
	/* the block, the string's copy and its struct */
	return atomic_load(&seen) >= 3 && left == 0;
}

/* A controller program's main makes jansson's frees clear, before
 * anything else (--help returns right after the flags are parsed). */
static void t_ctrl_program_main(void)
{
	SG_CHECK(!json_frees_cleared()); /* not yet: the default free */
	static int level, format;
	sg_ctrl_program_def d = {
	    .name = "wipe-test", .usage = "", .log_level = &level, .log_format = &format, .settings = &level};
	char *argv[] = {"wipe-test", "--help", NULL};
	SG_CHECK(sg_ctrl_program_main(&d, 2, argv) == 0);
	SG_CHECK(json_frees_cleared());
}

/* sg_kube_json_wipe_frees again: nothing changes. */
static void t_json_frees(void)
{
	sg_kube_json_wipe_frees();
	SG_CHECK(json_frees_cleared());
}

/* A wiping builder fed past several growths leaves no block with the
 * marker; one without wipe does (the difference the flag makes). */
static void t_strbuf(void)
{
	for (int wipe = 0; wipe < 2; wipe++) {
		arm();
		sg_strbuf b = {.first = 16, .wipe = wipe};
		SG_CHECK(sg_strbuf_puts(&b, "{\"data\":\"" MARKER));
		for (int i = 0; i < 64; i++)
			SG_CHECK(sg_strbuf_puts(&b, "0123456789abcdef"));
		SG_CHECK(b.cap > 512); /* grown several times */
		sg_strbuf_free(&b);
		unsigned left = disarm();
		printf("strbuf wipe=%d: %u freed blocks held the marker\n", wipe, left);
		SG_CHECK(wipe ? left == 0 : left >= 1);
	}
}

static int count_event(sg_kube_event_type t, json_t *obj, void *arg)
{
	(void)t;
	const char *d = json_string_value(json_object_get(json_object_get(obj, "data"), "k"));
	if (d && strcmp(d, MARKER) == 0)
		(*(int *)arg)++;
	return SG_OK;
}

/* A Secret's event fed in 7-byte chunks (the line grows past its first
 * block with the data already in it), then a second event whole:
 * dispatched twice, and no block freed by the parser or by jansson holds
 * the data. */
static void t_watch_parser(void)
{
	arm();
	int got = 0;
	sg_kube_watch_parser *p = NULL;
	SG_CHECK_OK(sg_kube_watch_parser_new(&p, 0, count_event, &got));
	char line[8192];
	int n = snprintf(line, sizeof(line),
	                 "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Secret\",\"apiVersion\":\"v1\","
	                 "\"data\":{\"k\":\"" MARKER "\"},"
	                 "\"metadata\":{\"name\":\"s\",\"annotations\":{\"pad\":\"%0*d\"}}}}\n",
	                 6000, 0);
	SG_CHECK(n > 6000 && n < (int)sizeof(line));
	for (int off = 0; off < n; off += 7)
		SG_CHECK_OK(sg_kube_watch_parser_feed(p, line + off, (size_t)(n - off < 7 ? n - off : 7)));
	SG_CHECK_OK(sg_kube_watch_parser_feed(p, line, (size_t)n));
	SG_CHECK_OK(sg_kube_watch_parser_finish(p));
	sg_kube_watch_parser_free(p);
	SG_CHECK(got == 2);
	SG_CHECK(disarm() == 0);
}

/* Whether the informer's copy has the update's second key. */
static bool holds_k2(sg_kube_informer *inf)
{
	json_t *c = sg_kube_informer_get(inf, "default", "wipe-test");
	bool two = json_object_get(json_object_get(c, "data"), "k2") != NULL;
	json_decref(c);
	return two;
}

/* The Secret through the API server and an informer. */
static void t_secret_round_trip(void)
{
	sg_kube_ref one = {.version = "v1", .resource = "secrets", .ns = "default", .name = "wipe-test"};
	sg_kube_ref coll = {.version = "v1", .resource = "secrets", .ns = "default"};
	arm();
	/* "pad" (48 KiB, after "k" in the server's order) makes each answer
	 * come in several of curl's writes (16 KiB at most each), so that the
	 * response buffer grows with the data already in it. */
	static char pad[48 * 1024 + 1];
	memset(pad, 'A', sizeof(pad) - 1);
	json_t *sec =
	    json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:s}}", "apiVersion", "v1", "kind", "Secret", "metadata",
	              "name", "wipe-test", "labels", "app", "wipe-test", "data", "k", MARKER, "pad", pad);
	SG_CHECK_OK(sg_kube_apply(k, &one, sec, "wipe-test", true, NULL));
	sg_kube_secret_release(&sec);

	sg_kube_informer *inf = NULL;
	sg_kube_informer_opts o = {.label_selector = "app=wipe-test", .backoff_max_ms = 2000};
	sg_kube_handlers h = {0};
	SG_CHECK_OK(sg_kube_informer_new(&inf, k, &coll, &o, &h));
	SG_CHECK_OK(sg_kube_informer_start(inf));
	SG_CHECK_OK(sg_kube_informer_wait_synced(inf, 10000));
	SG_CHECK(sg_kube_informer_size(inf) == 1);

	/* An update through the watch: the informer drops its first copy. */
	json_t *upd = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "Secret",
	                        "metadata", "name", "wipe-test", "labels", "app", "wipe-test", "data", "k", MARKER,
	                        "k2", MARKER, "pad", pad);
	SG_CHECK_OK(sg_kube_apply(k, &one, upd, "wipe-test", true, NULL));
	sg_kube_secret_release(&upd);
	SG_WAIT_FOR(10000, holds_k2(inf));

	/* A GET, released without sg_kube_secret_wipe: jansson's free does it. */
	json_t *got = NULL;
	SG_CHECK_OK(sg_kube_get(k, &one, &got));
	SG_CHECK(json_is_string(json_object_get(json_object_get(got, "data"), "k")) &&
	         strcmp(json_string_value(json_object_get(json_object_get(got, "data"), "k")), MARKER) == 0);
	json_decref(got);

	json_t *gone = NULL;
	SG_CHECK_OK(sg_kube_delete(k, &one, &gone));
	sg_kube_secret_release(&gone);
	SG_WAIT_FOR(10000, sg_kube_informer_size(inf) == 0);
	sg_kube_informer_free(inf);
	unsigned left = disarm();
	printf("secret round trip: %u of %u freed blocks held the data\n", left, atomic_load(&seen));
	SG_CHECK(left == 0);
	SG_CHECK(atomic_load(&seen) > 100); /* what passed through here: jansson's frees among them */
}

static void t_start(void)
{
	sg_kube_json_wipe_frees(); /* whatever ran before */
	k = kube_fx_start(SG_LOG_WARN);
}

static void t_zz_cleanup(void)
{
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_search_works), SG_TEST(t_strbuf), SG_TEST(t_ctrl_program_main), SG_TEST(t_json_frees),
             SG_TEST(t_start), SG_TEST(t_watch_parser), SG_TEST(t_secret_round_trip), SG_TEST(t_zz_cleanup))
