/*
 * A controller program's surroundings (contract: sg_ctrl_program.h): one
 * copy of what signet-trust and signet-operator would otherwise each
 * carry.
 */
#include "sg_ctrl_program.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_names.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int sg_ctrl_client_new(sg_kube **out, const char *kubeconfig, int64_t qps, int64_t burst, long timeout_ms)
{
	sg_kube_config *cfg = NULL;
	SG_TRY(sg_kube_config_load(&cfg, kubeconfig));
	sg_kube_options ko = {.qps = (double)qps, .burst = (int)burst, .request_timeout_ms = timeout_ms};
	return sg_kube_new(out, &cfg, &ko);
}

void sg_ctrl_identity(char *out, size_t cap, const char *program)
{
	char host[256];
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "%s", program);
	host[sizeof(host) - 1] = '\0';
	unsigned r = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
	snprintf(out, cap, "%.200s_%08x", host, r);
}

int sg_ctrl_common_clients(const sg_ctrl_common *c, const char *program, const char *lease_ns_default,
                           sg_ctrl_common_run *out)
{
	memset(out, 0, sizeof(*out));
	if (c->leader_elect) {
		SG_ENSURE(c->lease_duration > c->renew_deadline && c->renew_deadline * 10 > c->retry_period * 12,
		          SG_EINVAL,
		          "leader election: lease duration > renew deadline > 1.2 x retry period is required");
		const char *ns = c->leader_election_namespace && *c->leader_election_namespace
		                     ? c->leader_election_namespace
		                     : lease_ns_default;
		SG_ENSURE(ns && sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
		          "leader-election-namespace \"%s\" is not a namespace name", ns ? ns : "");
		snprintf(out->lease_ns, sizeof(out->lease_ns), "%s", ns);
	}
	/* Writers stop before a successor can lead (sg_cluster.c has the
	 * reasoning): a write may take lease duration - renew deadline. */
	long writers_ms = (long)(c->lease_duration - c->renew_deadline) * 1000;
	long lease_ms = (long)(c->renew_deadline - c->retry_period) * 1000;
	SG_TRY(sg_ctrl_client_new(&out->kube, c->kubeconfig, c->kube_api_qps, c->kube_api_burst,
	                          c->leader_elect && writers_ms >= 1000 ? writers_ms : 0));
	if (!c->leader_elect)
		return SG_OK;
	int rc = sg_ctrl_client_new(&out->kube_lease, c->kubeconfig, c->kube_api_qps, c->kube_api_burst,
	                            lease_ms >= 1000 ? lease_ms : 1000);
	if (rc != SG_OK) {
		sg_ctrl_common_free(out);
		return rc;
	}
	sg_ctrl_identity(out->identity, sizeof(out->identity), program);
	out->mo.lease_kube = out->kube_lease;
	out->mo.lease = (sg_lease_opts){
	    .ns = out->lease_ns,
	    .name = c->leader_election_lease_name,
	    .identity = out->identity,
	    .lease_duration_ms = (unsigned)c->lease_duration * 1000u,
	    .renew_deadline_ms = (unsigned)c->renew_deadline * 1000u,
	    .retry_period_ms = (unsigned)c->retry_period * 1000u,
	};
	return SG_OK;
}

void sg_ctrl_common_free(sg_ctrl_common_run *r)
{
	sg_kube_free(r->kube_lease);
	sg_kube_free(r->kube);
	r->kube = r->kube_lease = NULL;
	r->mo.lease_kube = NULL;
}

int sg_ctrl_common_endpoints(const sg_ctrl_common *c, sg_metrics *metrics, bool (*ready)(void *arg), void *arg,
                             sg_ctrl_endpoints **out)
{
	sg_ctrl_endpoints_opts eo = {.address = c->http_address,
	                             .metrics_port = c->metrics_port,
	                             .probe_port = c->readiness_probe_port,
	                             .probe_path = c->readiness_probe_path,
	                             .metrics = metrics,
	                             .ready = ready,
	                             .arg = arg};
	return sg_ctrl_endpoints_start(out, &eo);
}

struct sg_ctrl_endpoints {
	sg_ctrl_endpoints_opts o;
	sg_http_server *metrics, *probe;
};

static int serve_metrics(sg_http_response *resp, void *arg)
{
	sg_ctrl_endpoints *e = arg;
	char *text = NULL;
	size_t len = 0;
	SG_TRY(sg_metrics_render(e->o.metrics, &text, &len));
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
	sg_http_response_take(resp, text, len);
	return SG_OK;
}

static int serve_ready(sg_http_response *resp, void *arg)
{
	sg_ctrl_endpoints *e = arg;
	if (e->o.ready(e->o.arg)) {
		sg_http_response_static(resp, "ok\n", 3);
	} else {
		resp->status = 503;
		sg_http_response_static(resp, "not ready\n", 10);
	}
	return SG_OK;
}

static int serve_health(sg_http_response *resp, void *arg)
{
	(void)arg;
	sg_http_response_static(resp, "ok\n", 3);
	return SG_OK;
}

int sg_ctrl_endpoints_start(sg_ctrl_endpoints **out, const sg_ctrl_endpoints_opts *o)
{
	*out = NULL;
	SG_ENSURE(o && o->metrics && o->ready && o->probe_path && *o->probe_path, SG_EINVAL,
	          "endpoints: need a registry, a readiness function and a probe path");
	sg_ctrl_endpoints *e = calloc(1, sizeof(*e));
	SG_ENSURE(e, SG_EINTERNAL, "out of memory");
	e->o = *o;
	const char *addr = o->address;
	if (!addr || !*addr) {
		const char *k8s = getenv("KUBERNETES_SERVICE_HOST");
		addr = k8s && *k8s ? "0.0.0.0" : "127.0.0.1";
	}
	bool same = o->metrics_port == o->probe_port;
	sg_http_route probe[] = {{o->probe_path, serve_ready, e}, {"/healthz", serve_health, e}};
	sg_http_route routes[3] = {{"/metrics", serve_metrics, e}, probe[0], probe[1]};
	sg_http_options ho = {.bind_address = addr, .port = (uint16_t)o->metrics_port, .routes = routes,
	                      .nroutes = same ? 3 : 1};
	int rc = sg_http_server_start(&e->metrics, &ho);
	if (rc == SG_OK)
		sg_log(SG_LOG_INFO, "metrics endpoint", SG_F_STR("address", addr),
		       SG_F_INT("port", sg_http_server_port(e->metrics)), SG_F_END);
	if (rc == SG_OK && !same) {
		ho.port = (uint16_t)o->probe_port;
		ho.routes = probe;
		ho.nroutes = 2;
		rc = sg_http_server_start(&e->probe, &ho);
		if (rc == SG_OK)
			sg_log(SG_LOG_INFO, "probe endpoint", SG_F_STR("address", addr),
			       SG_F_INT("port", sg_http_server_port(e->probe)), SG_F_END);
	}
	if (rc < 0) {
		sg_ctrl_endpoints_stop(e);
		return rc;
	}
	*out = e;
	return SG_OK;
}

void sg_ctrl_endpoints_stop(sg_ctrl_endpoints *e)
{
	if (!e)
		return;
	sg_http_server_stop(e->probe);
	sg_http_server_stop(e->metrics);
	free(e);
}

void sg_ctrl_signals_block(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

void sg_ctrl_run_until_signal(sg_ctrl_manager *m, void (*tick)(void *arg), void *arg)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	for (;;) {
		struct timespec one = {1, 0};
		int sig = sigtimedwait(&set, NULL, &one);
		if (sig == SIGTERM || sig == SIGINT) {
			sg_log(SG_LOG_INFO, "shutting down", SG_F_STR("signal", sig == SIGTERM ? "TERM" : "INT"), SG_F_END);
			return;
		}
		sg_ctrl_manager_tick(m);
		if (tick)
			tick(arg);
	}
}

int sg_ctrl_program_main(const sg_ctrl_program_def *d, int argc, char **argv)
{
	/* Before any thread: the informers' copies of Secrets are cleared
	 * when their last reference goes, wherever that is. */
	sg_kube_json_wipe_frees();
	sg_opt_result res = {0};
	int rc = sg_opt_parse(d->opts, d->nopts, d->settings, argc - 1, argv + 1, &res);
	if (rc == SG_OK && res.help) {
		fputs(d->usage, stdout);
		sg_opt_usage(d->opts, d->nopts, stdout);
		sg_opt_free(d->opts, d->nopts, d->settings);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", d->name, sg_error_last()->msg);
		sg_opt_free(d->opts, d->nopts, d->settings);
		return 2;
	}
	sg_log_configure((sg_log_level)*d->log_level, (sg_log_format)*d->log_format);
	sg_ctrl_signals_block();
	int status = 0;
	if (d->start(d->self) < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_log(SG_LOG_ERROR, "cannot start", SG_F_STR("error", e.msg), SG_F_END);
		fprintf(stderr, "%s: %s\n", d->name, e.msg);
		status = 1;
	} else {
		sg_ctrl_run_until_signal(*d->table, d->tick, d->self);
	}
	d->stop(d->self);
	if (status == 0)
		sg_log(SG_LOG_INFO, "stopped", SG_F_END);
	sg_opt_free(d->opts, d->nopts, d->settings);
	return status;
}
