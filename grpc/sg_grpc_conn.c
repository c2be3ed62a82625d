/*
 * The gRPC listener's connection guard (sg_grpc_conn.h says what and why).
 *
 * How accept4 is taken over: this file defines accept4. The dynamic linker
 * resolves libgrpc's reference to the symbol against the executable first,
 * so gRPC's listener calls this function; it looks the listening descriptor
 * up among the registered ones and otherwise forwards to the C library's
 * accept4 (found with dlsym(RTLD_NEXT)) untouched.
 *
 * State: one process-wide table, under one mutex (accepts are rare next to
 * requests, and every path here is short):
 *   - the registered listeners (descriptor + socket cookie, so a listener
 *     closed and its number reused is not mistaken for ours);
 *   - the accepted connections, indexed by descriptor, each with its socket
 *     cookie (SO_COOKIE: unique for the life of the system, so a closed and
 *     reused descriptor is told apart), its peer as a hash, and its reset
 *     counter; chained into buckets by peer hash for the rapid-reset lookup.
 *
 * Closing an abusive connection: gRPC owns the descriptor and may close it
 * at any moment, and the number may then be reused by an unrelated socket.
 * So we dup() it, check the cookie on our own duplicate (which cannot be
 * reused under us) and shut the socket down through that duplicate: gRPC's
 * next read sees the end of the stream and closes the transport itself.
 */
#define _GNU_SOURCE /* accept4, RTLD_NEXT */
#include "sg_grpc_conn.h"

#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57 /* Linux 4.12 */
#endif

#define MAX_LISTENERS 16
#define NBUCKETS 4096		       /* peer hash buckets (a power of two) */
#define LIMIT_SWEEP_NS 20000000ull     /* at the limit, sweep at most this often */
#define RESET_WINDOW_NS 1000000000ull  /* rapid-reset window */
#define FD_REFUSE_BATCH 1024	       /* connections refused per EMFILE episode, at most */

struct sg_grpc_guard {
	unsigned max;
	unsigned resets_per_second;
	uint64_t open, accepted, refused_limit, refused_fds, rapid_closed, last_refused_ns;
	uint64_t last_sweep_ns;
};

typedef struct conn {
	sg_grpc_guard *g; /* NULL: no connection at this descriptor */
	uint64_t cookie;
	uint64_t peer;	  /* hash of the peer address and port */
	int next;	  /* next descriptor + 1 in the bucket; 0: end */
	unsigned resets;
	uint64_t window_ns;
	bool shut; /* closed for rapid reset; gRPC has yet to notice */
} conn;

typedef struct listener {
	int fd;
	uint64_t cookie;
	sg_grpc_guard *g;
} listener;

typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

static struct {
	pthread_mutex_t mu;
	listener lis[MAX_LISTENERS];
	size_t nlis;
	conn *c; /* indexed by descriptor */
	size_t cap;
	int buckets[NBUCKETS]; /* descriptor + 1; 0: empty */
	int reserve;	       /* a spare descriptor for EMFILE; -1: none */
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .reserve = -1};

static accept4_fn real_accept4;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void)
{
	real_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
}

static uint64_t cookie_of(int fd)
{
	uint64_t v = 0;
	socklen_t len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &v, &len) != 0)
		return 0;
	return v;
}

/* Refuses a connection: a reset, not an orderly close, so the client learns
 * at once and no TIME_WAIT is left here. */
static void reset_close(int fd)
{
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

/* FNV-1a over family, address and port, IPv4-mapped IPv6 folded to IPv4 so
 * the accepted address and gRPC's peer string agree. */
static uint64_t peer_hash(int family, const void *addr, size_t alen, uint16_t port)
{
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	const uint8_t *a = addr;
	if (family == AF_INET6 && memcmp(a, v4mapped, 12) == 0) {
		family = AF_INET;
		a += 12;
		alen = 4;
	}
	uint64_t h = 1469598103934665603ull;
	uint8_t head[3] = {(uint8_t)family, (uint8_t)(port >> 8), (uint8_t)port};
	for (size_t i = 0; i < sizeof(head); i++)
		h = (h ^ head[i]) * 1099511628211ull;
	for (size_t i = 0; i < alen; i++)
		h = (h ^ a[i]) * 1099511628211ull;
	return h;
}

static uint64_t sockaddr_hash(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		return peer_hash(AF_INET, &in->sin_addr, 4, ntohs(in->sin_port));
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		return peer_hash(AF_INET6, &in6->sin6_addr, 16, ntohs(in6->sin6_port));
	}
	return 0;
}

/* "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000" -> the same hash; 0 otherwise. */
static uint64_t peer_string_hash(const char *peer)
{
	char host[64];
	const char *p;
	int family;
	if (strncmp(peer, "ipv4:", 5) == 0) {
		family = AF_INET;
		p = peer + 5;
	} else if (strncmp(peer, "ipv6:[", 6) == 0) {
		family = AF_INET6;
		p = peer + 6;
	} else {
		return 0;
	}
	const char *end = family == AF_INET ? strrchr(p, ':') : strchr(p, ']');
	if (!end || (size_t)(end - p) >= sizeof(host))
		return 0;
	memcpy(host, p, (size_t)(end - p));
	host[end - p] = '\0';
	const char *port_s = family == AF_INET ? end + 1 : (end[1] == ':' ? end + 2 : NULL);
	if (!port_s)
		return 0;
	char *stop;
	long port = strtol(port_s, &stop, 10);
	if (*stop || port < 0 || port > 65535)
		return 0;
	uint8_t a[16];
	if (inet_pton(family, host, a) != 1)
		return 0;
	return peer_hash(family, a, family == AF_INET ? 4 : 16, (uint16_t)port);
}

/* ---- the connection table (G.mu held) --------------------------------- */

static void conn_unlink(int fd)
{
	conn *c = &G.c[fd];
	int *link = &G.buckets[c->peer & (NBUCKETS - 1)];
	while (*link && *link != fd + 1)
		link = &G.c[*link - 1].next;
	if (*link)
		*link = c->next;
	c->g->open--;
	memset(c, 0, sizeof(*c));
}

static int conn_add(int fd, sg_grpc_guard *g, uint64_t cookie, uint64_t peer)
{
	if ((size_t)fd >= G.cap) {
		size_t cap = G.cap ? G.cap : 1024;
		while (cap <= (size_t)fd)
			cap *= 2;
		conn *c = realloc(G.c, cap * sizeof(*c));
		if (!c)
			return -1;
		memset(c + G.cap, 0, (cap - G.cap) * sizeof(*c));
		G.c = c;
		G.cap = cap;
	}
	if (G.c[fd].g) /* closed without our noticing, and the number reused */
		conn_unlink(fd);
	conn *c = &G.c[fd];
	*c = (conn){.g = g, .cookie = cookie, .peer = peer};
	int *head = &G.buckets[peer & (NBUCKETS - 1)];
	c->next = *head;
	*head = fd + 1;
	g->open++;
	return 0;
}

static void sweep_locked(sg_grpc_guard *g)
{
	for (size_t fd = 0; fd < G.cap; fd++)
		if (G.c[fd].g == g && cookie_of((int)fd) != G.c[fd].cookie)
			conn_unlink((int)fd);
	g->last_sweep_ns = sg_now_ns();
}

static sg_grpc_guard *listener_guard(int lfd)
{
	sg_grpc_guard *g = NULL;
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nlis; i++)
		if (G.lis[i].fd == lfd && cookie_of(lfd) == G.lis[i].cookie)
			g = G.lis[i].g;
	pthread_mutex_unlock(&G.mu);
	return g;
}

/* ---- accept ----------------------------------------------------------- */

/* Out of descriptors: refuse the waiting connections through the spare
 * descriptor (close it, accept into its slot, reset, take it back). */
static void refuse_waiting(sg_grpc_guard *g, int lfd)
{
	pthread_mutex_lock(&G.mu);
	for (int n = 0; n < FD_REFUSE_BATCH && G.reserve >= 0; n++) {
		close(G.reserve);
		G.reserve = -1;
		int fd = real_accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			reset_close(fd);
			g->refused_fds++;
			g->last_refused_ns = sg_now_ns();
		}
		G.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
	}
	pthread_mutex_unlock(&G.mu);
}

static int guarded_accept(sg_grpc_guard *g, int lfd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = real_accept4(lfd, (struct sockaddr *)&ss, &sl, flags);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				refuse_waiting(g, lfd);
				errno = EAGAIN; /* gRPC re-arms the listener on EAGAIN */
			}
			return -1;
		}
		uint64_t cookie = cookie_of(fd);
		pthread_mutex_lock(&G.mu);
		if (g->open >= g->max && sg_now_ns() - g->last_sweep_ns >= LIMIT_SWEEP_NS)
			sweep_locked(g);
		bool refuse = g->open >= g->max || conn_add(fd, g, cookie, sockaddr_hash(&ss)) < 0;
		if (refuse) {
			g->refused_limit++;
			g->last_refused_ns = sg_now_ns();
		} else {
			g->accepted++;
		}
		pthread_mutex_unlock(&G.mu);
		if (refuse) {
			reset_close(fd);
			continue;
		}
		if (addr && alen) {
			memcpy(addr, &ss, sl < *alen ? sl : *alen);
			*alen = sl;
		}
		return fd;
	}
}

/* Default visibility: the project builds with hidden symbols, and a hidden
 * accept4 would never reach the dynamic symbol table that libgrpc's
 * reference is resolved against. */
__attribute__((visibility("default"))) int accept4(int lfd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	pthread_once(&real_once, find_real);
	if (!real_accept4) {
		errno = ENOSYS;
		return -1;
	}
	sg_grpc_guard *g = listener_guard(lfd);
	if (!g)
		return real_accept4(lfd, addr, alen, flags);
	return guarded_accept(g, lfd, addr, alen, flags);
}

/* ---- the guard -------------------------------------------------------- */

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

static bool is_listener(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);
	return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v == 1;
}

/* Registers this process's listening sockets on port (G.mu held). */
static int register_listeners(sg_grpc_guard *g, int port)
{
	DIR *d = opendir("/proc/self/fd");
	SG_ENSURE(d, SG_EINTERNAL, "cannot list /proc/self/fd: %s", strerror(errno));
	size_t found = 0;
	int rc = SG_OK;
	for (struct dirent *e; (e = readdir(d));) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		if (*end || end == e->d_name || fd == dirfd(d))
			continue;
		if (!is_listener((int)fd) || bound_port((int)fd) != port)
			continue;
		if (G.nlis == MAX_LISTENERS) {
			rc = sg_error_set(SG_EINTERNAL, "more than %d guarded listeners", MAX_LISTENERS);
			break;
		}
		G.lis[G.nlis++] = (listener){.fd = (int)fd, .cookie = cookie_of((int)fd), .g = g};
		found++;
	}
	closedir(d);
	if (rc == SG_OK && found == 0)
		rc = sg_error_set(SG_ENOTFOUND, "no listening socket on port %d", port);
	return rc;
}

static void unregister_locked(sg_grpc_guard *g)
{
	size_t k = 0;
	for (size_t i = 0; i < G.nlis; i++)
		if (G.lis[i].g != g)
			G.lis[k++] = G.lis[i];
	G.nlis = k;
	for (size_t fd = 0; fd < G.cap; fd++)
		if (G.c[fd].g == g)
			conn_unlink((int)fd);
}

int sg_grpc_guard_new(sg_grpc_guard **out, int port, unsigned max_connections, unsigned resets_per_second)
{
	*out = NULL;
	SG_ENSURE(max_connections >= 1, SG_EINVAL, "max_connections must be at least 1");
	pthread_once(&real_once, find_real);
	SG_ENSURE(real_accept4, SG_EINTERNAL, "the C library's accept4 cannot be found");
	sg_grpc_guard *g = calloc(1, sizeof(*g));
	SG_ENSURE(g, SG_EINTERNAL, "out of memory for a connection guard");
	g->max = max_connections;
	g->resets_per_second = resets_per_second;
	pthread_mutex_lock(&G.mu);
	if (G.reserve < 0)
		G.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int rc = G.reserve < 0 ? sg_error_set(SG_EINTERNAL, "cannot reserve a descriptor: %s", strerror(errno))
			       : register_listeners(g, port);
	if (rc < 0)
		unregister_locked(g);
	pthread_mutex_unlock(&G.mu);
	if (rc < 0) {
		free(g);
		return rc;
	}
	*out = g;
	return SG_OK;
}

void sg_grpc_guard_free(sg_grpc_guard *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&G.mu);
	unregister_locked(g);
	pthread_mutex_unlock(&G.mu);
	free(g);
}

void sg_grpc_guard_sweep(sg_grpc_guard *g)
{
	pthread_mutex_lock(&G.mu);
	sweep_locked(g);
	if (G.reserve < 0) /* lost in an EMFILE episode: take it back */
		G.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_unlock(&G.mu);
}

void sg_grpc_guard_stats_get(sg_grpc_guard *g, sg_grpc_guard_stats *out)
{
	pthread_mutex_lock(&G.mu);
	*out = (sg_grpc_guard_stats){
		.open = g->open,
		.accepted = g->accepted,
		.refused_limit = g->refused_limit,
		.refused_fds = g->refused_fds,
		.rapid_reset_closed = g->rapid_closed,
		.last_refused_ns = g->last_refused_ns,
	};
	pthread_mutex_unlock(&G.mu);
}

/* Shuts the connection at fd down if it is still the one we accepted. */
static void shut_down(int fd, uint64_t cookie)
{
	int d = dup(fd);
	if (d >= 0) {
		if (cookie_of(d) == cookie)
			shutdown(d, SHUT_RDWR);
		close(d);
	} else if (cookie_of(fd) == cookie) { /* no descriptor to spare: a narrow race is left */
		shutdown(fd, SHUT_RDWR);
	}
}

bool sg_grpc_guard_note_reset(sg_grpc_guard *g, const char *peer)
{
	if (!g->resets_per_second || !peer)
		return false;
	uint64_t h = peer_string_hash(peer);
	if (!h)
		return false;
	bool closed = false;
	uint64_t now = sg_now_ns();
	pthread_mutex_lock(&G.mu);
	for (int i = G.buckets[h & (NBUCKETS - 1)]; i; i = G.c[i - 1].next) {
		conn *c = &G.c[i - 1];
		if (c->g != g || c->peer != h)
			continue;
		if (c->shut)
			break;
		if (now - c->window_ns >= RESET_WINDOW_NS) {
			c->window_ns = now;
			c->resets = 0;
		}
		if (++c->resets > g->resets_per_second) {
			shut_down(i - 1, c->cookie);
			g->rapid_closed++;
			c->shut = true;
			closed = true;
		}
		break;
	}
	pthread_mutex_unlock(&G.mu);
	return closed;
}
