/*
 * Tests for grpc/sg_grpc*.c: real gRPC over 127.0.0.1 (port 0), plaintext and
 * TLS with throwaway certificates made here with OpenSSL.
 *
 * The handler behaves by the request body: "hang..." calls are kept until
 * the test releases them; "slow..." calls are answered by a worker thread
 * after SLOW_MS; anything else is echoed by the worker after ~1 ms. So
 * every answer comes from another thread, as in signetd.
 */
#include "sg_grpc.h"

#include "sg_clock.h"
#include "sg_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOW_MS 300
#define SEC 1000000000ull
#define MS 1000000ull

/* ThreadSanitizer: libgrpc and its dependencies are not instrumented; the
 * list is tests/ra/tsan.supp (see there why), embedded so that the ctest
 * needs no TSAN_OPTIONS. Keep the two in sync. */
#if defined(__SANITIZE_THREAD__)
#define SG_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SG_TEST_TSAN 1
#endif
#endif
#ifdef SG_TEST_TSAN
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "called_from_lib:libabsl_bad_optional_access.so\n"
	       "called_from_lib:libabsl_bad_variant_access.so\n"
	       "called_from_lib:libabsl_base.so\n"
	       "called_from_lib:libabsl_city.so\n"
	       "called_from_lib:libabsl_civil_time.so\n"
	       "called_from_lib:libabsl_cord.so\n"
	       "called_from_lib:libabsl_cord_internal.so\n"
	       "called_from_lib:libabsl_cordz_functions.so\n"
	       "called_from_lib:libabsl_cordz_handle.so\n"
	       "called_from_lib:libabsl_cordz_info.so\n"
	       "called_from_lib:libabsl_debugging_internal.so\n"
	       "called_from_lib:libabsl_demangle_internal.so\n"
	       "called_from_lib:libabsl_exponential_biased.so\n"
	       "called_from_lib:libabsl_graphcycles_internal.so\n"
	       "called_from_lib:libabsl_hash.so\n"
	       "called_from_lib:libabsl_hashtablez_sampler.so\n"
	       "called_from_lib:libabsl_int128.so\n"
	       "called_from_lib:libabsl_log_severity.so\n"
	       "called_from_lib:libabsl_low_level_hash.so\n"
	       "called_from_lib:libabsl_malloc_internal.so\n"
	       "called_from_lib:libabsl_random_distributions.so\n"
	       "called_from_lib:libabsl_random_internal_platform.so\n"
	       "called_from_lib:libabsl_random_internal_pool_urbg.so\n"
	       "called_from_lib:libabsl_random_internal_randen.so\n"
	       "called_from_lib:libabsl_random_internal_randen_hwaes.so\n"
	       "called_from_lib:libabsl_random_internal_randen_hwaes_impl.so\n"
	       "called_from_lib:libabsl_random_internal_randen_slow.so\n"
	       "called_from_lib:libabsl_random_internal_seed_material.so\n"
	       "called_from_lib:libabsl_random_seed_gen_exception.so\n"
	       "called_from_lib:libabsl_random_seed_sequences.so\n"
	       "called_from_lib:libabsl_raw_hash_set.so\n"
	       "called_from_lib:libabsl_raw_logging_internal.so\n"
	       "called_from_lib:libabsl_spinlock_wait.so\n"
	       "called_from_lib:libabsl_stacktrace.so\n"
	       "called_from_lib:libabsl_status.so\n"
	       "called_from_lib:libabsl_statusor.so\n"
	       "called_from_lib:libabsl_str_format_internal.so\n"
	       "called_from_lib:libabsl_strerror.so\n"
	       "called_from_lib:libabsl_strings.so\n"
	       "called_from_lib:libabsl_strings_internal.so\n"
	       "called_from_lib:libabsl_symbolize.so\n"
	       "called_from_lib:libabsl_synchronization.so\n"
	       "called_from_lib:libabsl_throw_delegate.so\n"
	       "called_from_lib:libabsl_time.so\n"
	       "called_from_lib:libabsl_time_zone.so\n"
	       "called_from_lib:libaddress_sorting.so\n"
	       "called_from_lib:libcares.so\n"
	       "called_from_lib:libcrypto.so\n"
	       "called_from_lib:libgpr.so\n"
	       "called_from_lib:libgrpc.so\n"
	       "called_from_lib:libre2.so\n"
	       "called_from_lib:libssl.so\n"
	       "called_from_lib:libupb.so\n"
	       "called_from_lib:libstdc++.so\n";
}
#endif

/* ---- the handler and its worker ---------------------------------------- */

typedef struct job {
	sg_grpc_call *call;
	uint8_t *body;
	size_t len;
	uint64_t due;
	struct job *next;
} job;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static job *jobs;    /* due for the worker */
static job *hung;    /* kept until release_hung */
static bool worker_stop;
static pthread_t worker;
static atomic_int handled;
static atomic_int finish_late; /* finish returned SG_ETIMEOUT */
static atomic_int finish_ok;

/* What the last call carried. */
static char last_auth[256], last_cluster[256], last_identity[256];
static bool last_had_identity;
static uint64_t last_deadline_left;

/* Snapshots of what the handler saw, read under its lock (the handler runs
 * on a gRPC thread). */
static bool seen_str(const char *which, const char *want)
{
	pthread_mutex_lock(&mu);
	const char *v = strcmp(which, "auth") == 0 ? last_auth
			: strcmp(which, "cluster") == 0 ? last_cluster
							: last_identity;
	bool eq = strcmp(v, want) == 0;
	pthread_mutex_unlock(&mu);
	return eq;
}

static bool seen_identity(void)
{
	pthread_mutex_lock(&mu);
	bool had = last_had_identity;
	pthread_mutex_unlock(&mu);
	return had;
}

static uint64_t seen_deadline_left(void)
{
	pthread_mutex_lock(&mu);
	uint64_t v = last_deadline_left;
	pthread_mutex_unlock(&mu);
	return v;
}

static void *worker_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (!worker_stop || jobs) {
		uint64_t now = sg_now_ns();
		job **pp = &jobs, *due = NULL;
		while (*pp) {
			if ((*pp)->due <= now) {
				due = *pp;
				*pp = due->next;
				break;
			}
			pp = &(*pp)->next;
		}
		if (!due) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&cv, &mu, &ts);
			continue;
		}
		pthread_mutex_unlock(&mu);
		int rc = sg_grpc_call_finish(due->call, SG_GRPC_OK, NULL, due->body, due->len);
		atomic_fetch_add(rc == 0 ? &finish_ok : &finish_late, 1);
		free(due->body);
		free(due);
		pthread_mutex_lock(&mu);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

static void copy_str(char *dst, size_t cap, const char *s)
{
	snprintf(dst, cap, "%s", s ? s : "(null)");
}

static void on_call(sg_grpc_call *call, const sg_grpc_request *req, void *arg)
{
	(void)arg;
	atomic_fetch_add(&handled, 1);
	job *j = calloc(1, sizeof(*j));
	j->call = call;
	j->body = malloc(req->len ? req->len : 1);
	memcpy(j->body, req->body, req->len);
	j->len = req->len;
	bool hang = req->len >= 4 && memcmp(req->body, "hang", 4) == 0;
	bool slow = req->len >= 4 && memcmp(req->body, "slow", 4) == 0;
	j->due = sg_now_ns() + (slow ? SLOW_MS * MS : 1 * MS);
	pthread_mutex_lock(&mu);
	copy_str(last_auth, sizeof(last_auth), req->authorization);
	copy_str(last_cluster, sizeof(last_cluster), req->cluster_id);
	copy_str(last_identity, sizeof(last_identity), req->peer_identity);
	last_had_identity = req->peer_identity != NULL;
	last_deadline_left = req->deadline_ns - req->received_ns;
	if (hang) {
		j->next = hung;
		hung = j;
	} else {
		j->next = jobs;
		jobs = j;
		pthread_cond_signal(&cv);
	}
	pthread_mutex_unlock(&mu);
}

/* Whether every hung call has ended for the adapter (cancelled, expired
 * or shut down). */
static bool hung_ended(void)
{
	bool all = true;
	pthread_mutex_lock(&mu);
	for (job *j = hung; j; j = j->next)
		all = all && sg_grpc_call_ended(j->call);
	pthread_mutex_unlock(&mu);
	return all;
}

/* Finishes every hung call now (they were answered by the adapter). */
static void release_hung(void)
{
	pthread_mutex_lock(&mu);
	job *j = hung;
	hung = NULL;
	pthread_mutex_unlock(&mu);
	while (j) {
		job *next = j->next;
		int rc = sg_grpc_call_finish(j->call, SG_GRPC_OK, NULL, j->body, j->len);
		atomic_fetch_add(rc == 0 ? &finish_ok : &finish_late, 1);
		free(j->body);
		free(j);
		j = next;
	}
}

/* ---- certificates ------------------------------------------------------ */

typedef struct pki {
	EVP_PKEY *key;
	X509 *cert;
	char *cert_pem, *key_pem;
} pki;

static char *pem_of(int (*wr)(BIO *, const void *), const void *obj)
{
	BIO *b = BIO_new(BIO_s_mem());
	wr(b, obj);
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = malloc((size_t)n + 1);
	memcpy(s, p, (size_t)n);
	s[n] = '\0';
	BIO_free(b);
	return s;
}

static int wr_cert(BIO *b, const void *x)
{
	return PEM_write_bio_X509(b, (X509 *)x);
}

static int wr_key(BIO *b, const void *k)
{
	return PEM_write_bio_PrivateKey(b, (EVP_PKEY *)k, NULL, NULL, 0, NULL, NULL);
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!e)
		abort();
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
}

/* A certificate for cn, signed by issuer (self-signed when NULL). */
static pki make_cert(const char *cn, const pki *issuer, bool ca, const char *san, const char *eku)
{
	static long serial = 1;
	pki p = {0};
	p.key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_NAME *name = X509_NAME_new();
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_subject_name(x, name);
	X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : name);
	X509_NAME_free(name);
	X509_set_pubkey(x, p.key);
	X509 *iss = issuer ? issuer->cert : x;
	add_ext(x, iss, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	add_ext(x, iss, NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
	add_ext(x, iss, NID_subject_key_identifier, "hash");
	if (issuer)
		add_ext(x, iss, NID_authority_key_identifier, "keyid");
	if (san)
		add_ext(x, iss, NID_subject_alt_name, san);
	if (eku)
		add_ext(x, iss, NID_ext_key_usage, eku);
	if (!X509_sign(x, issuer ? issuer->key : p.key, EVP_sha256()))
		abort();
	p.cert = x;
	p.cert_pem = pem_of(wr_cert, x);
	p.key_pem = pem_of(wr_key, p.key);
	return p;
}

static void pki_free(pki *p)
{
	EVP_PKEY_free(p->key);
	X509_free(p->cert);
	free(p->cert_pem);
	free(p->key_pem);
}

static pki ca1, ca2, srv1, srv2, client_ca, client, rogue_ca, rogue;

/* The serving material the fetcher hands out; switched by the tests. */
static pthread_mutex_t tls_mu = PTHREAD_MUTEX_INITIALIZER;
static const pki *serving;
static uint64_t serving_version;
static atomic_int fetches;

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int fetch(void *arg, char **chain, char **key, char **client_ca_pem, uint64_t *version)
{
	(void)arg;
	atomic_fetch_add(&fetches, 1);
	pthread_mutex_lock(&tls_mu);
	*chain = dup_or_null(serving->cert_pem);
	*key = dup_or_null(serving->key_pem);
	*client_ca_pem = dup_or_null(client_ca.cert_pem);
	*version = serving_version;
	pthread_mutex_unlock(&tls_mu);
	return 0;
}

static void serve(const pki *p, uint64_t version)
{
	pthread_mutex_lock(&tls_mu);
	serving = p;
	serving_version = version;
	pthread_mutex_unlock(&tls_mu);
}

/* ---- helpers ----------------------------------------------------------- */

static sg_grpc_server *start_with(bool insecure, bool client_cert, uint64_t server_timeout_ns,
				  unsigned max_connections)
{
	sg_grpc_server_options o = {
		.max_connections = max_connections,
		.address = "127.0.0.1:0",
		.handler = on_call,
		.insecure = insecure,
		.tls_fetch = fetch,
		.request_client_cert = client_cert,
		.server_timeout_ns = server_timeout_ns,
		.min_ping_interval_ms = 500,
		.keepalive_time_ms = 1000,
		.keepalive_timeout_ms = 5000,
		.calls_per_thread = 16,
	};
	sg_grpc_server *s = NULL;
	SG_CHECK_OK(sg_grpc_server_start(&s, &o));
	SG_CHECK(s && sg_grpc_server_port(s) > 0);
	return s;
}

static sg_grpc_server *start(bool insecure, bool client_cert, uint64_t server_timeout_ns)
{
	return start_with(insecure, client_cert, server_timeout_ns, 0);
}

/* A plain TCP connection to the server (no HTTP/2 spoken), or -1. */
static int tcp_connect(const sg_grpc_server *s)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sg_grpc_server_port(s))};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* True when the server has closed or reset fd within timeout_ms. */
static bool closed_by_server(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, timeout_ms) != 1)
		return false;
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno == ECONNRESET);
}

static sg_grpc_server_stats stats_of(sg_grpc_server *s)
{
	sg_grpc_server_stats st;
	sg_grpc_server_stats_get(s, &st);
	return st;
}

static sg_grpc_channel *channel(const sg_grpc_server *s, const char *root, const pki *cert)
{
	char target[64];
	snprintf(target, sizeof(target), "127.0.0.1:%d", sg_grpc_server_port(s));
	sg_grpc_channel_options o = {
		.target = target,
		.root_pem = root,
		.client_cert_pem = cert ? cert->cert_pem : NULL,
		.client_key_pem = cert ? cert->key_pem : NULL,
		.own_connection = true,
	};
	sg_grpc_channel *ch = NULL;
	SG_CHECK_OK(sg_grpc_channel_new(&ch, &o));
	return ch;
}

/* One call; returns the status (-1 when the call could not be made). */
static int call(sg_grpc_channel *ch, const char *method, const char *body, size_t len,
		uint64_t timeout_ns, char *msg, size_t cap)
{
	sg_grpc_md md[] = {{"authorization", "Bearer abc.def.ghi"}, {"clusterid", "Kubernetes"}};
	uint8_t *resp = NULL;
	size_t resp_len = 0;
	int status = -1;
	char local[256];
	if (!msg) {
		msg = local;
		cap = sizeof(local);
	}
	if (sg_grpc_unary(ch, method, md, 2, (const uint8_t *)body, len, timeout_ns, &resp, &resp_len,
			  &status, msg, cap) < 0)
		return -1;
	/* no SG_CHECK here: load threads call this and the harness counts
	 * without locks */
	if (status == SG_GRPC_OK && (resp_len != len || (len && memcmp(resp, body, len) != 0)))
		status = -2; /* not an echo */
	free(resp);
	return status;
}

static int echo(sg_grpc_channel *ch, const char *body)
{
	return call(ch, SG_GRPC_ISTIO_METHOD, body, strlen(body), 10 * SEC, NULL, 0);
}

/* ---- tests ------------------------------------------------------------- */

static void t_setup(void)
{
	ca1 = make_cert("ca-1", NULL, true, NULL, NULL);
	ca2 = make_cert("ca-2", NULL, true, NULL, NULL);
	srv1 = make_cert("server-1", &ca1, false, "DNS:localhost,IP:127.0.0.1", "serverAuth");
	srv2 = make_cert("server-2", &ca2, false, "DNS:localhost,IP:127.0.0.1", "serverAuth");
	client_ca = make_cert("client-ca", NULL, true, NULL, NULL);
	client = make_cert("", &client_ca, false, "URI:spiffe://td/ns/vm/sa/agent", "clientAuth");
	rogue_ca = make_cert("rogue-ca", NULL, true, NULL, NULL);
	rogue = make_cert("", &rogue_ca, false, "URI:spiffe://td/ns/vm/sa/agent", "clientAuth");
	serve(&srv1, 1);
	SG_CHECK(pthread_create(&worker, NULL, worker_main, NULL) == 0);
}

static void t_insecure_echo(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	SG_CHECK(echo(ch, "hello") == SG_GRPC_OK);
	SG_CHECK(seen_str("auth", "Bearer abc.def.ghi"));
	SG_CHECK(seen_str("cluster", "Kubernetes"));
	SG_CHECK(!seen_identity());
	/* an empty message is a message */
	SG_CHECK(call(ch, SG_GRPC_ISTIO_METHOD, "", 0, 10 * SEC, NULL, 0) == SG_GRPC_OK);
	/* default server timeout 10 s reached the handler */
	SG_CHECK(seen_deadline_left() > 9 * SEC && seen_deadline_left() <= 10 * SEC);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

typedef struct load {
	sg_grpc_channel *ch;
	int id;
	int ok;
} load;

static void *load_main(void *p)
{
	load *l = p;
	for (int i = 0; i < 200; i++) {
		char body[64];
		snprintf(body, sizeof(body), "thread %d call %d", l->id, i);
		if (echo(l->ch, body) == SG_GRPC_OK)
			l->ok++;
	}
	return NULL;
}

static atomic_int async_ok, async_done;

static void on_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg)
{
	(void)msg;
	size_t want = (size_t)(uintptr_t)arg;
	if (status == SG_GRPC_OK && len == want && (len == 0 || resp[0] == 'a'))
		atomic_fetch_add(&async_ok, 1);
	atomic_fetch_add(&async_done, 1);
}

static void t_concurrent(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	pthread_t th[8];
	load l[8];
	for (int i = 0; i < 8; i++) {
		l[i] = (load){ch, i, 0};
		pthread_create(&th[i], NULL, load_main, &l[i]);
	}
	int ok = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		ok += l[i].ok;
	}
	SG_CHECK(ok == 8 * 200);

	/* asynchronous: 1000 calls in flight at once */
	sg_grpc_client *c = NULL;
	SG_CHECK_OK(sg_grpc_client_new(&c));
	char body[100];
	memset(body, 'a', sizeof(body));
	for (int i = 0; i < 1000; i++) {
		size_t n = (size_t)(i % 100);
		sg_grpc_md md[] = {{"clusterid", "c1"}};
		SG_CHECK_OK(sg_grpc_call_start(c, ch, SG_GRPC_ISTIO_METHOD, md, 1, (const uint8_t *)body, n,
					       10 * SEC, on_reply, (void *)(uintptr_t)n));
	}
	sg_grpc_client_free(c); /* waits for the calls */
	SG_CHECK(atomic_load(&async_done) == 1000);
	SG_CHECK(atomic_load(&async_ok) == 1000);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

/* How many of the n channels are connected (asking them to connect). */
static int channels_ready(sg_grpc_channel **chs, int n)
{
	int ready = 0;
	for (int i = 0; i < n; i++)
		ready += sg_grpc_channel_state(chs[i], true) == SG_GRPC_CHANNEL_READY;
	return ready;
}

/* Connections made before any call (sg_grpc_channel_state), and many
 * channels sharing one asynchronous client (perf/herd's shape). */
static void t_channel_state(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_client *c = NULL;
	SG_CHECK_OK(sg_grpc_client_new(&c)); /* its thread polls the connections */
	enum { NCH = 40 };
	sg_grpc_channel *chs[NCH];
	for (int i = 0; i < NCH; i++) {
		chs[i] = channel(s, NULL, NULL);
		SG_CHECK(sg_grpc_channel_state(chs[i], false) == SG_GRPC_CHANNEL_IDLE); /* lazy */
	}
	SG_WAIT_FOR(30000, channels_ready(chs, NCH) == NCH);
	SG_CHECK(stats_of(s).connections <= NCH);
	/* one call on each, all completed by the one shared client */
	atomic_store(&async_ok, 0);
	atomic_store(&async_done, 0);
	char body[100];
	memset(body, 'a', sizeof(body));
	for (int i = 0; i < NCH; i++)
		SG_CHECK_OK(sg_grpc_call_start(c, chs[i], SG_GRPC_ISTIO_METHOD, NULL, 0, (const uint8_t *)body,
					       (size_t)i, 10 * SEC, on_reply, (void *)(uintptr_t)i));
	sg_grpc_client_free(c);
	SG_CHECK(atomic_load(&async_done) == NCH);
	SG_CHECK(atomic_load(&async_ok) == NCH);
	for (int i = 0; i < NCH; i++)
		sg_grpc_channel_free(chs[i]);

	/* a port nobody listens on: the connection fails, and says so */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	SG_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		 getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	/* Bound and never listening: connecting is refused, and the port
	 * stays ours until the end (closed, it could be any listener's). */
	char target[64];
	snprintf(target, sizeof(target), "127.0.0.1:%d", ntohs(a.sin_port));
	SG_CHECK_OK(sg_grpc_client_new(&c));
	sg_grpc_channel_options o = {.target = target, .own_connection = true};
	sg_grpc_channel *dead = NULL;
	SG_CHECK_OK(sg_grpc_channel_new(&dead, &o));
	SG_WAIT_FOR(30000, sg_grpc_channel_state(dead, true) == SG_GRPC_CHANNEL_FAILING);
	sg_grpc_channel_free(dead);
	sg_grpc_client_free(c);
	close(fd);
	sg_grpc_server_shutdown(s, SEC);
}

/* The default connection cap follows the memory limit too: past
 * memory_limit / SG_GRPC_CONN_QUOTA idle connections gRPC's quota would
 * refuse connections before the cap does (uncounted, while ready). */
static void t_connection_cap_from_memory(void)
{
	struct rlimit rl;
	SG_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	uint64_t room = rl.rlim_cur > SG_GRPC_FD_RESERVE + 16 ? rl.rlim_cur - SG_GRPC_FD_RESERVE : 16;
	struct {
		size_t memory_limit;
		unsigned max_connections;
	} cases[] = {{8u << 20, 0}, {0, 0}, {8u << 20, 12}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_grpc_server_options o = {
			.address = "127.0.0.1:0",
			.handler = on_call,
			.insecure = true,
			.memory_limit = cases[i].memory_limit,
			.max_connections = cases[i].max_connections,
		};
		sg_grpc_server *s = NULL;
		SG_CHECK_OK(sg_grpc_server_start(&s, &o));
		uint64_t by_memory = (cases[i].memory_limit ? cases[i].memory_limit : 256u << 20) / SG_GRPC_CONN_QUOTA;
		uint64_t want = SG_GRPC_DEFAULT_MAX_CONNECTIONS;
		if (room < want)
			want = room;
		if (by_memory < want)
			want = by_memory;
		if (cases[i].max_connections) /* an explicit cap is kept */
			want = cases[i].max_connections;
		SG_CHECK(stats_of(s).max_connections == want);
		sg_grpc_server_shutdown(s, SEC);
	}
	SG_CHECK((8u << 20) / SG_GRPC_CONN_QUOTA == 170); /* what the first case asserts, by hand */
}

static void t_oversized(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	int before = atomic_load(&handled);
	size_t n = 70 * 1024;
	char *big = malloc(n);
	memset(big, 'x', n);
	char msg[256];
	int st = call(ch, SG_GRPC_ISTIO_METHOD, big, n, 5 * SEC, msg, sizeof(msg));
	SG_CHECK(st == SG_GRPC_RESOURCE_EXHAUSTED || st == SG_GRPC_INVALID_ARGUMENT);
	SG_CHECK(atomic_load(&handled) == before);
	/* exactly the limit is fine */
	SG_CHECK(call(ch, SG_GRPC_ISTIO_METHOD, big, 64 * 1024, 5 * SEC, NULL, 0) == SG_GRPC_OK);
	/* and the connection still serves */
	SG_CHECK(echo(ch, "after") == SG_GRPC_OK);
	free(big);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

static void t_unknown_method(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	for (int i = 0; i < 20; i++) { /* more than the calls requested in advance */
		uint64_t t0 = sg_now_ns();
		int st = call(ch, "/foo.Bar/Baz", "x", 1, 5 * SEC, NULL, 0);
		SG_CHECK(st == SG_GRPC_UNIMPLEMENTED);
		SG_CHECK(sg_now_ns() - t0 < SEC);
	}
	/* without a deadline too */
	SG_CHECK(call(ch, "/istio.v1.auth.IstioCertificateService/Other", "x", 1, 0, NULL, 0) ==
		 SG_GRPC_UNIMPLEMENTED);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

static void t_client_deadline(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	uint64_t t0 = sg_now_ns();
	int st = call(ch, SG_GRPC_ISTIO_METHOD, "hang", 4, 200 * MS, NULL, 0);
	uint64_t took = sg_now_ns() - t0;
	SG_CHECK(st == SG_GRPC_DEADLINE_EXCEEDED);
	SG_CHECK(took >= 190 * MS && took < 2 * SEC);
	/* The client's deadline reached the handler, not the 10 s server
	 * timeout (gRPC rounds grpc-timeout up to its unit, so allow slack). */
	SG_CHECK(seen_deadline_left() <= SEC);
	int late = atomic_load(&finish_late);
	SG_WAIT_FOR(30000, hung_ended()); /* the server side has seen the cancel */
	release_hung();
	SG_CHECK(atomic_load(&finish_late) == late + 1);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

static void t_server_timeout(void)
{
	sg_grpc_server *s = start(true, false, 300 * MS);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	uint64_t t0 = sg_now_ns();
	char msg[256];
	int st = call(ch, SG_GRPC_ISTIO_METHOD, "hang", 4, 0 /* none, like istio-agent */, msg, sizeof(msg));
	uint64_t took = sg_now_ns() - t0;
	SG_CHECK(st == SG_GRPC_DEADLINE_EXCEEDED);
	SG_CHECK(strstr(msg, "deadline") != NULL);
	SG_CHECK(took >= 290 * MS && took < 2 * SEC);
	SG_CHECK(seen_deadline_left() == 300 * MS);
	/* a longer client deadline is capped too */
	st = call(ch, SG_GRPC_ISTIO_METHOD, "hang", 4, 60 * SEC, NULL, 0);
	SG_CHECK(st == SG_GRPC_DEADLINE_EXCEEDED);
	release_hung();
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

/* At max_connections, a new connection is refused at once (reset), not
 * queued; once connections close, new ones are accepted again. */
static void t_connection_limit(void)
{
	sg_grpc_server *s = start_with(true, false, 0, 4);
	int fds[6];
	for (int i = 0; i < 6; i++)
		SG_CHECK((fds[i] = tcp_connect(s)) >= 0);
	/* The four admitted stay open (an absence: looked for over 200 ms,
	 * which a slow machine cannot turn into a failure); the two refused
	 * are waited for. */
	int refused = 0;
	for (int i = 0; i < 6; i++)
		refused += closed_by_server(fds[i], i < 4 ? 200 : 20000);
	SG_CHECK(refused == 2);
	sg_grpc_server_stats st = stats_of(s);
	SG_CHECK(st.refused_limit == 2 && st.max_connections == 4);
	SG_CHECK(st.connections == 4);
	for (int i = 0; i < 6; i++)
		close(fds[i]);
	/* The count follows once gRPC has closed its side (the guard sweeps
	 * every second, and before it refuses anything). */
	SG_WAIT_FOR(30000, stats_of(s).connections == 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	SG_CHECK(echo(ch, "after the limit") == SG_GRPC_OK);
	SG_CHECK(stats_of(s).connections == 1);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

/* Out of descriptors, gRPC 1.51 would stop accepting for good; the guard
 * refuses the waiting connection and the listener keeps working once
 * descriptors are free again. */
static void t_listener_survives_emfile(void)
{
	sg_grpc_server *s = start(true, false, 0);
	struct rlimit was;
	SG_CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0);
	/* Fill every descriptor below a lowered soft limit, then free one for
	 * the client's socket: the server's accept then has none. */
	struct rlimit low = {.rlim_cur = 512, .rlim_max = was.rlim_max};
	SG_CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	int fill[512], n = 0;
	for (int fd; n < 512 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
		fill[n++] = fd;
	SG_CHECK(n > 0 && errno == EMFILE);
	close(fill[--n]);
	int c = tcp_connect(s);
	SG_CHECK(c >= 0);
	SG_CHECK(closed_by_server(c, 20000));
	close(c);
	SG_CHECK(stats_of(s).refused_fds >= 1);
	while (n > 0)
		close(fill[--n]);
	SG_CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	SG_CHECK(echo(ch, "accepting again") == SG_GRPC_OK);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

static void t_keepalive(void)
{
	/* The server accepts pings every 500 ms; the client pings every
	 * second while idle: no GOAWAY (too_many_pings), calls keep working. */
	sg_grpc_server *s = start(true, false, 0);
	char target[64];
	snprintf(target, sizeof(target), "127.0.0.1:%d", sg_grpc_server_port(s));
	sg_grpc_channel_options o = {.target = target, .own_connection = true, .keepalive_ms = 1000};
	sg_grpc_channel *ch = NULL;
	SG_CHECK_OK(sg_grpc_channel_new(&ch, &o));
	SG_CHECK(echo(ch, "one") == SG_GRPC_OK);
	/* The idle time is what is tested (three pings' worth), not a wait
	 * for a state: a slower machine only idles longer. */
	sg_sleep_ms(3500);
	SG_CHECK(echo(ch, "two") == SG_GRPC_OK);
	sg_grpc_channel_free(ch);
	sg_grpc_server_shutdown(s, SEC);
}

static atomic_int drain_ok, drain_other, drain_done;

static void on_drain(int status, const char *msg, const uint8_t *resp, size_t len, void *arg)
{
	(void)resp, (void)len, (void)arg;
	if (status != SG_GRPC_OK)
		fprintf(stderr, "drain: status %d: %s\n", status, msg);
	atomic_fetch_add(status == SG_GRPC_OK ? &drain_ok : &drain_other, 1);
	atomic_fetch_add(&drain_done, 1);
}

static void t_shutdown_drains(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	sg_grpc_client *c = NULL;
	SG_CHECK_OK(sg_grpc_client_new(&c));
	int before = atomic_load(&handled);
	for (int i = 0; i < 20; i++)
		SG_CHECK_OK(sg_grpc_call_start(c, ch, SG_GRPC_ISTIO_METHOD, NULL, 0,
					       (const uint8_t *)"slow", 4, 10 * SEC, on_drain, NULL));
	SG_WAIT_FOR(30000, atomic_load(&handled) >= before + 20);
	/* the worker answers after SLOW_MS, i.e. after shutdown began */
	uint64_t t0 = sg_now_ns();
	sg_grpc_server_shutdown(s, 5 * SEC);
	SG_CHECK(sg_now_ns() - t0 < 4 * SEC);
	sg_grpc_client_free(c);
	SG_CHECK(atomic_load(&drain_ok) == 20);
	sg_grpc_channel_free(ch);
}

/* Releases the hung calls once their clients have a status (the grace
 * period is over and shutdown is waiting for the handler), or after 30 s
 * when they never get one (the test then fails on the count). */
static atomic_bool released;

static void *release_later(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3000 && atomic_load(&drain_other) + atomic_load(&drain_ok) < 5; i++)
		sg_sleep_ms(10);
	atomic_store(&released, true);
	release_hung();
	return NULL;
}

static void t_shutdown_grace_expires(void)
{
	sg_grpc_server *s = start(true, false, 0);
	sg_grpc_channel *ch = channel(s, NULL, NULL);
	sg_grpc_client *c = NULL;
	SG_CHECK_OK(sg_grpc_client_new(&c));
	atomic_store(&drain_ok, 0);
	atomic_store(&drain_other, 0);
	int before = atomic_load(&handled);
	for (int i = 0; i < 5; i++)
		SG_CHECK_OK(sg_grpc_call_start(c, ch, SG_GRPC_ISTIO_METHOD, NULL, 0,
					       (const uint8_t *)"hang", 4, 0, on_drain, NULL));
	SG_WAIT_FOR(30000, atomic_load(&handled) >= before + 5);
	/* The handler keeps the calls past the grace period: the clients get a
	 * clean status, and shutdown waits for the handler to release them. */
	int late = atomic_load(&finish_late);
	atomic_store(&released, false);
	pthread_t rel;
	pthread_create(&rel, NULL, release_later, NULL);
	sg_grpc_server_shutdown(s, 100 * MS);
	/* An order, not a duration: shutdown came back only after the
	 * handler let go, which it did only after the clients had their
	 * status. */
	SG_CHECK(atomic_load(&released));
	pthread_join(rel, NULL);
	sg_grpc_client_free(c);
	SG_CHECK(atomic_load(&drain_other) == 5);
	SG_CHECK(atomic_load(&finish_late) == late + 5);
	sg_grpc_channel_free(ch);
}

static void t_tls_and_rotation(void)
{
	serve(&srv1, 1);
	sg_grpc_server *s = start(false, false, 0);
	sg_grpc_channel *trust1 = channel(s, ca1.cert_pem, NULL);
	sg_grpc_channel *trust2 = channel(s, ca2.cert_pem, NULL);
	SG_CHECK(echo(trust1, "tls") == SG_GRPC_OK);
	SG_CHECK(!seen_identity());
	SG_CHECK(echo(trust2, "tls") == SG_GRPC_UNAVAILABLE); /* server-1 is not from ca-2 */
	sg_grpc_channel_free(trust1);
	sg_grpc_channel_free(trust2);

	serve(&srv2, 2); /* rotate */
	trust1 = channel(s, ca1.cert_pem, NULL);
	trust2 = channel(s, ca2.cert_pem, NULL);
	SG_CHECK(echo(trust2, "rotated") == SG_GRPC_OK);
	SG_CHECK(echo(trust1, "rotated") == SG_GRPC_UNAVAILABLE);
	sg_grpc_channel_free(trust1);
	sg_grpc_channel_free(trust2);
	SG_CHECK(atomic_load(&fetches) >= 3);
	sg_grpc_server_shutdown(s, SEC);
	serve(&srv1, 1);
}

static void t_client_certificates(void)
{
	sg_grpc_server *s = start(false, true, 0);
	sg_grpc_channel *with = channel(s, ca1.cert_pem, &client);
	SG_CHECK(echo(with, "vm") == SG_GRPC_OK);
	SG_CHECK(seen_identity() && seen_str("identity", "spiffe://td/ns/vm/sa/agent"));

	sg_grpc_channel *without = channel(s, ca1.cert_pem, NULL);
	SG_CHECK(echo(without, "pod") == SG_GRPC_OK);
	SG_CHECK(!seen_identity());

	int before = atomic_load(&handled);
	sg_grpc_channel *untrusted = channel(s, ca1.cert_pem, &rogue);
	SG_CHECK(echo(untrusted, "rogue") == SG_GRPC_UNAVAILABLE);
	SG_CHECK(atomic_load(&handled) == before);
	sg_grpc_channel_free(with);
	sg_grpc_channel_free(without);
	sg_grpc_channel_free(untrusted);
	sg_grpc_server_shutdown(s, SEC);
}

/* A raw OpenSSL client: the server must negotiate ALPN h2 with TLS 1.2 and
 * with TLS 1.3. */
static void handshake(int port, int version, const char **alpn, int *got_version)
{
	*alpn = NULL;
	*got_version = 0;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, version);
	SSL_CTX_set_max_proto_version(ctx, version);
	static const unsigned char h2[] = {2, 'h', '2'};
	SSL_CTX_set_alpn_protos(ctx, h2, sizeof(h2));
	X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca1.cert);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	SSL *ssl = NULL;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		ssl = SSL_new(ctx);
		SSL_set_fd(ssl, fd);
		SSL_set1_host(ssl, "localhost");
		if (SSL_connect(ssl) == 1) {
			const unsigned char *p;
			unsigned n;
			SSL_get0_alpn_selected(ssl, &p, &n);
			*alpn = n == 2 && memcmp(p, "h2", 2) == 0 ? "h2" : "other";
			*got_version = SSL_version(ssl);
		}
		SSL_shutdown(ssl);
		SSL_free(ssl);
	}
	close(fd);
	SSL_CTX_free(ctx);
	ERR_clear_error();
}

static void t_tls_versions_alpn(void)
{
	serve(&srv1, 1);
	sg_grpc_server *s = start(false, false, 0);
	const char *alpn;
	int v;
	handshake(sg_grpc_server_port(s), TLS1_2_VERSION, &alpn, &v);
	SG_CHECK(alpn && strcmp(alpn, "h2") == 0 && v == TLS1_2_VERSION);
	handshake(sg_grpc_server_port(s), TLS1_3_VERSION, &alpn, &v);
	SG_CHECK(alpn && strcmp(alpn, "h2") == 0 && v == TLS1_3_VERSION);
	handshake(sg_grpc_server_port(s), TLS1_1_VERSION, &alpn, &v);
	SG_CHECK(alpn == NULL); /* below TLS 1.2 is refused */
	sg_grpc_server_shutdown(s, SEC);
}

static int fail_fetch(void *arg, char **chain, char **key, char **ca, uint64_t *version)
{
	(void)arg, (void)chain, (void)key, (void)ca, (void)version;
	return sg_error_set(SG_ENOTFOUND, "no serving certificate yet");
}

static void t_bad_options(void)
{
	sg_grpc_server *s = NULL;
	sg_grpc_server_options o = {.address = "127.0.0.1:0", .handler = on_call, .tls_fetch = fail_fetch};
	SG_CHECK_RC(sg_grpc_server_start(&s, &o), SG_EINVAL);
	SG_CHECK_MSG("no serving certificate yet");
	SG_CHECK(s == NULL);
	o.tls_fetch = NULL;
	SG_CHECK_RC(sg_grpc_server_start(&s, &o), SG_EINVAL);
	o.handler = NULL;
	o.insecure = true;
	SG_CHECK_RC(sg_grpc_server_start(&s, &o), SG_EINVAL);

	/* a port in use */
	sg_grpc_server *a = start(true, false, 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", sg_grpc_server_port(a));
	sg_grpc_server_options o2 = {.address = addr, .handler = on_call, .insecure = true};
	SG_CHECK_RC(sg_grpc_server_start(&s, &o2), SG_EBUSY);
	sg_grpc_server_shutdown(a, SEC);

	SG_CHECK(sg_grpc_status_of(SG_EINVAL) == SG_GRPC_INVALID_ARGUMENT);
	SG_CHECK(sg_grpc_status_of(SG_EDENIED) == SG_GRPC_UNAUTHENTICATED);
	SG_CHECK(sg_grpc_status_of(SG_EBUSY) == SG_GRPC_UNAVAILABLE);
	SG_CHECK(strcmp(sg_grpc_status_name(16), "UNAUTHENTICATED") == 0);
}

static void t_teardown(void)
{
	release_hung();
	pthread_mutex_lock(&mu);
	worker_stop = true;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(worker, NULL);
	pki *all[] = {&ca1, &ca2, &srv1, &srv2, &client_ca, &client, &rogue_ca, &rogue};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		pki_free(all[i]);
}

SG_TEST_MAIN(SG_TEST(t_setup), SG_TEST(t_insecure_echo), SG_TEST(t_concurrent), SG_TEST(t_channel_state), SG_TEST(t_connection_cap_from_memory),
	     SG_TEST(t_oversized),
	     SG_TEST(t_unknown_method), SG_TEST(t_client_deadline), SG_TEST(t_server_timeout),
	     SG_TEST(t_connection_limit), SG_TEST(t_listener_survives_emfile), SG_TEST(t_keepalive),
	     SG_TEST(t_shutdown_drains), SG_TEST(t_shutdown_grace_expires),
	     SG_TEST(t_tls_and_rotation), SG_TEST(t_client_certificates), SG_TEST(t_tls_versions_alpn),
	     SG_TEST(t_bad_options), SG_TEST(t_teardown))
