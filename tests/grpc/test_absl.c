/*
 * The gRPC adapter turns Abseil's Mutex deadlock detection off before gRPC
 * starts (grpc/sg_grpc_absl.h): on Debian's Abseil it is on, in the mode
 * that aborts the process on a lock order it has seen both ways, a
 * potential deadlock, not a real one.
 *
 * Each case runs in a child process, since the mode is process-wide and
 * stays set: the child starts what a program would (a client, a server),
 * takes two Abseil mutexes in both orders (absl_probe.cc) and exits 0; a
 * child that aborted fails the case. The first case, with nothing started,
 * tells whether this Abseil aborts at all (it does on Debian 12); when it
 * does not, the other two still run but show less.
 */
#include "sg_grpc.h"

#include "absl_probe.h"
#include "sg_test.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BARE, CLIENT, SERVER };

static void unused_handler(sg_grpc_call *call, const sg_grpc_request *req, void *arg)
{
	(void)req;
	(void)arg;
	(void)sg_grpc_call_finish(call, SG_GRPC_UNIMPLEMENTED, "not used", NULL, 0);
}

static void child(int what)
{
	sg_grpc_client *c = NULL;
	sg_grpc_server *s = NULL;
	if (what == CLIENT && sg_grpc_client_new(&c) != 0)
		_exit(3);
	if (what == SERVER) {
		sg_grpc_server_options o = {.address = "127.0.0.1:0", .handler = unused_handler, .insecure = true};
		if (sg_grpc_server_start(&s, &o) != 0)
			_exit(3);
	}
	absl_probe_inverted_order();
	_exit(0);
}

/* How the child of case `what` ended: its exit code, or 128 + signal. */
static int run(int what)
{
	fflush(NULL);
	pid_t pid = fork();
	SG_CHECK(pid >= 0);
	if (pid == 0)
		child(what);
	int st = 0;
	SG_CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void t_started_grpc_survives_both_orders(void)
{
	int bare = run(BARE);
	printf("# with nothing started, the probe %s\n",
	       bare == 128 + SIGABRT ? "aborts (detection on)" : "survives (detection off in this Abseil)");
	SG_CHECK(bare == 0 || bare == 128 + SIGABRT);
	SG_CHECK(run(CLIENT) == 0);
	SG_CHECK(run(SERVER) == 0);
}

SG_TEST_MAIN(SG_TEST(t_started_grpc_survives_both_orders))
