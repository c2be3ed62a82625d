/*
 * policy_server_fx: policy_server.py (beside this file, Debian's
 * python3-grpcio) started once per test program and stopped when it ends:
 * srv holds its ports ("a" and "tls" answer as server A, "b" as B) and the
 * paths of its CA ("ca", which signed the TLS server's certificate for
 * policy.test and 127.0.0.1) and of another CA ("other_ca"). server()
 * starts it on first use and is false (a failed check) when it cannot.
 * Header-only: each test file is its own program. Needs POLICY_SERVER_PY
 * and PROTO_DIR defined by the build.
 */
#ifndef POLICY_SERVER_FX_H
#define POLICY_SERVER_FX_H

#include "sg_clock.h"
#include "sg_test.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
	pid_t pid;
	int to_child;  /* its stdin: closing it stops the server */
	int a, b, tls; /* ports */
	char ca[512], other_ca[512];
	char dir[512];
	bool started; /* the child runs */
	bool tried, ready;
} srv;

static void server_stop(void)
{
	if (!srv.started)
		return;
	close(srv.to_child);
	for (int i = 0; i < 200; i++) { /* 10 s */
		if (waitpid(srv.pid, NULL, WNOHANG) == srv.pid)
			return;
		sg_sleep_ms(50);
	}
	kill(srv.pid, SIGKILL);
	waitpid(srv.pid, NULL, 0);
}

/* Reads the server's one line of JSON (compiling the proto takes seconds). */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	uint64_t until = sg_now_ns() + (uint64_t)timeout_ms * 1000000u;
	while (n + 1 < cap) {
		struct pollfd p = {fd, POLLIN, 0};
		int left = (int)((until - sg_now_ns()) / 1000000u);
		if (sg_now_ns() >= until || poll(&p, 1, left > 0 ? left : 1) < 0)
			return -1;
		if (!(p.revents & (POLLIN | POLLHUP)))
			continue;
		ssize_t got = read(fd, buf + n, 1);
		if (got <= 0)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 0;
}

static bool server_start(void);

/* Starts policy_server.py once; false (a failed check) when it cannot. */
static bool server(void)
{
	if (!srv.tried) {
		srv.tried = true;
		srv.ready = server_start();
		SG_CHECK(srv.ready);
	}
	return srv.ready;
}

static bool server_start(void)
{
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(srv.dir, sizeof(srv.dir), "%s/policyserver-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(srv.dir)) {
		fprintf(stderr, "mkdtemp %s: %s\n", srv.dir, strerror(errno));
		return false;
	}
	int out[2], in[2];
	if (pipe(out) != 0 || pipe(in) != 0)
		return false;
	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		execl("/usr/bin/python3", "python3", POLICY_SERVER_PY, PROTO_DIR, srv.dir, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	srv.pid = pid;
	srv.to_child = in[1];
	srv.started = true;
	atexit(server_stop);
	char line[4096];
	int rc = read_line(out[0], line, sizeof(line), 120000);
	close(out[0]);
	json_error_t err;
	json_t *j = rc == 0 ? json_loads(line, 0, &err) : NULL;
	const char *ca = NULL, *other = NULL;
	if (!j || json_unpack(j, "{s:i, s:i, s:i, s:s, s:s}", "a", &srv.a, "b", &srv.b, "tls", &srv.tls, "ca", &ca,
	                      "other_ca", &other) != 0) {
		fprintf(stderr, "policy_server.py did not start (line: %s)\n", rc == 0 ? line : "none");
		json_decref(j);
		return false;
	}
	snprintf(srv.ca, sizeof(srv.ca), "%s", ca);
	snprintf(srv.other_ca, sizeof(srv.other_ca), "%s", other);
	json_decref(j);
	return true;
}

#endif
