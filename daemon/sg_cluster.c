/*
 * sg_cluster: how signetd uses a Kubernetes cluster (contract: sg_cluster.h).
 *
 * Everything here is assembly: the parts live in their own modules
 * (sg_authn_kube.h TokenReview, sg_jwks_kube.h key discovery, sg_workload.h
 * pod and service-account index, sg_rootdist.h, sg_istiodcert.h, sg_lease.h)
 * and this file decides which of them the settings ask for and in what
 * order they start and stop.
 *
 * The root bundle goes out up to three times, through sg_rootdist
 * instances fed the same PEM: istio-ca-root-cert in the selected
 * namespaces ("rootdist", for Istio), roots-configmap in trust-namespace
 * ("rootpub", one ConfigMap for trust bundles to read), and, when asked,
 * Secret external-ca-cert in istiod's namespace ("istiodraroots", the
 * roots istiod's RA trusts for the Kubernetes signers). All follow
 * sg_cluster_set_root, so a rotation's bundle (old and new root) reaches
 * each.
 *
 * The controllers are rows of one table (`controllers` below) run by the
 * runtime's manager (sg_ctrl.h): it holds the leader-election Lease,
 * starts the leader-only rows when this replica leads and stops them, all
 * at once, before the Lease is released. The request path never waits for
 * any of this.
 */
#include "sg_cluster.h"
#include "sg_authn_impl.h"
#include "sg_authn_kube.h"
#include "sg_approver.h"
#include "sg_extpolicy.h"
#include "sg_policyserver.h"
#include "sg_cmissuer.h"
#include "sg_crypto.h"
#include "sg_ctrl.h"
#include "sg_guard.h"
#include "sg_istiodcert.h"
#include "sg_jwks_kube.h"
#include "sg_kubecsr.h"
#include "sg_kube.h"
#include "sg_lease.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_rootdist.h"
#include "sg_signetissuer.h"
#include "sg_workload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYNC_WAIT_MS 10000
#define IDENTITY_MAX 128

struct sg_cluster {
	const sg_settings *s;
	const sg_daemon_settings *d;
	sg_kube *kube;
	sg_kube *kube_reviews;     /* TokenReviews only: their bursts must not delay Lease renewals */
	sg_kube *kube_lease;       /* the elector: a renewal may not outlast the renew deadline */
	sg_kube *kube_writers;     /* the writers: a request in flight when leadership ends is short */
	sg_workload *workload;     /* pods (node authorization) and/or service accounts (bound tokens) */
	sg_jwks_kube *jwks;        /* jwks mode without a file */
	void *tokenreview;         /* the tokenreview authenticator's self, for stats (owned by the caller) */
	void *route;               /* auto with discovery: the router's self, for stats (owned by the caller) */
	int mode;                  /* SG_TOKEN_AUTH_*: auto until decide_auto has run */
	bool split;                /* auto chose jwks for the API server's tokens, tokenreview for the rest */
	sg_rootdist *rootdist;
	sg_rootdist *rootpub;      /* roots-configmap in trust-namespace */
	sg_rootdist *raroots;      /* istiod-ra-root-secret-name in istiod-cert-namespace */
	sg_istiodcert *istiodcert;
	sg_kubesign_ca cas[SG_CLUSTER_CAS_MAX]; /* the CAs issuers may name: "default" first */
	size_t ncas;
	sg_signetissuer *issuers;
	sg_cmissuer *cmissuer;
	sg_approver *approver;
	sg_policyserver *policyservers; /* --external-policy-servers and the objects, for the approver */
	sg_extpolicy *extpolicy;        /* the ExternalPolicyServer objects */
	sg_kubecsr *kubecsr;
	sg_kube *kube_forward;     /* RA mode: its own rate limit, apart from the controllers' */
	sg_forward *forward;
	sg_ctrl_manager *ctrls;    /* the table, and the Lease */
	char identity[IDENTITY_MAX];
	char **audiences;
	size_t n_audiences;
};

bool sg_cluster_configured(const sg_daemon_settings *d)
{
	const char *kc = getenv("KUBECONFIG");
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	return (d->kubeconfig && *d->kubeconfig) || (kc && *kc) || (host && *host);
}

/* client-go's identity: the host name plus a random suffix, so a restarted
 * replica on the same host is a new candidate. */
static int make_identity(char *out, size_t cap)
{
	char host[64] = "signet";
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "signet");
	host[sizeof(host) - 1] = 0;
	unsigned char r[8];
	SG_TRY(sg_crypto_random(r, sizeof(r)));
	snprintf(out, cap, "%s_%02x%02x%02x%02x%02x%02x%02x%02x", host, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
	return SG_OK;
}

/* ---- construction ------------------------------------------------------------ */

static int resolved_mode(const sg_cluster *c)
{
	return c->mode;
}

/* A client of its own per user, so that no user's requests queue behind
 * another's rate limit or timeout. timeout_ms 0: the client's default.
 * reviews: the TokenReview client, whose limit is the authenticator's
 * adaptive budget (sg_authn_kube.h), not kube-api-qps: no QPS limiter, and
 * an easy handle kept for every review the budget may have in flight. */
static int new_client(const sg_daemon_settings *d, sg_kube **out, long timeout_ms, bool reviews, char *server,
                      size_t cap)
{
	sg_kube_config *cfg = NULL;
	SG_TRY(sg_kube_config_load(&cfg, d->kubeconfig));
	snprintf(server, cap, "%s", sg_kube_config_server(cfg));
	bool unlimited = d->disable_kubernetes_client_rate_limiter || reviews;
	sg_kube_options ko = {
		.qps = unlimited ? -1 : (double)d->kube_api_qps,
		.burst = (int)d->kube_api_burst,
		.request_timeout_ms = timeout_ms,
		.idle_handles = reviews ? (unsigned)d->token_review_max_inflight : 0,
	};
	return sg_kube_new(out, &cfg, &ko); /* consumes cfg */
}

static bool any_controller(const sg_daemon_settings *d);

/* client-go bounds each renewal by the renew deadline; here a renewal may
 * take renew_deadline - retry_period, and a writer's request at most what
 * separates the end of our leadership from a successor's start
 * (lease_duration - renew_deadline), so a replica that loses the Lease has
 * stopped writing before anyone else can lead. */
static int make_clients(sg_cluster *c)
{
	const sg_daemon_settings *d = c->d;
	char server[256];
	long lease_ms = (long)(d->leader_election_renew_deadline - d->leader_election_retry_period) * 1000;
	long writers_ms = (long)(d->leader_election_lease_duration - d->leader_election_renew_deadline) * 1000;
	SG_TRY(new_client(d, &c->kube, 0, false, server, sizeof(server)));
	/* auto may fall back to reviews, for some tokens or for all */
	if (resolved_mode(c) != SG_TOKEN_AUTH_JWKS)
		SG_TRY(new_client(d, &c->kube_reviews, 0, true, server, sizeof(server)));
	if (any_controller(d)) {
		SG_TRY(new_client(d, &c->kube_writers, d->leader_election && writers_ms >= 1000 ? writers_ms : 0, false,
				  server, sizeof(server)));
		if (d->leader_election)
			SG_TRY(new_client(d, &c->kube_lease, lease_ms >= 1000 ? lease_ms : 1000, false, server,
					  sizeof(server)));
	}
	sg_log(SG_LOG_INFO, "kubernetes API", SG_F_STR("server", server), SG_F_STR("namespace", sg_kube_namespace(c->kube)),
	       SG_F_END);
	return SG_OK;
}

/* ---- the controllers ----------------------------------------------------------- */

static bool want_rootdist(const sg_daemon_settings *d)
{
	return d->root_ca_configmap;
}

static bool want_rootpub(const sg_daemon_settings *d)
{
	return d->roots_configmap && *d->roots_configmap;
}

static bool want_raroots(const sg_daemon_settings *d)
{
	return d->istiod_ra_root_secret;
}

static bool want_istiodcert(const sg_daemon_settings *d)
{
	return d->istiod_cert_enabled;
}

static int make_rootdist(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	sg_rootdist_options ro = {.kube = c->kube_writers, .namespace_selector = c->d->configmap_namespace_selector};
	SG_TRY(sg_rootdist_new(&c->rootdist, &ro, o->root_pem, o->root_len));
	*ctrl = sg_rootdist_controller(c->rootdist);
	return SG_OK;
}

/* The roots for trust bundles: one ConfigMap in one namespace. Its names
 * are checked here, so that a typo names the setting. */
static int make_rootpub(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	const sg_daemon_settings *d = c->d;
	const char *ns = d->trust_namespace ? d->trust_namespace : "";
	SG_ENSURE(sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trust-namespace: \"%s\" is not a namespace name (a DNS-1123 label: 1..%d bytes of [a-z0-9-], "
	          "alphanumeric at both ends)",
	          ns, SG_NAMES_LABEL_MAX);
	SG_ENSURE(sg_names_dns_subdomain(d->roots_configmap, strlen(d->roots_configmap)), SG_EINVAL,
	          "roots-configmap: \"%s\" is not a ConfigMap name (a DNS-1123 subdomain: 1..%d bytes of [a-z0-9-.], "
	          "alphanumeric at both ends of each label)",
	          d->roots_configmap, SG_NAMES_SUBDOMAIN_MAX);
	sg_rootdist_options ro = {
		.kube = c->kube_writers,
		.ns = ns,
		.name = d->roots_configmap,
		.key = SG_ROOTDIST_ROOTS_KEY,
		.label = SG_ROOTDIST_ROOTS_LABEL,
		.label_value = "true",
		.controller = SG_ROOTDIST_ROOTS_CONTROLLER,
	};
	SG_TRY(sg_rootdist_new(&c->rootpub, &ro, o->root_pem, o->root_len));
	*ctrl = sg_rootdist_controller(c->rootpub);
	return SG_OK;
}

/* The roots istiod's RA reads (EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API):
 * one Secret in istiod's namespace. Its names are checked here, so that a
 * typo names the setting. */
static int make_raroots(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	const sg_daemon_settings *d = c->d;
	const char *ns = d->istiod_cert_namespace ? d->istiod_cert_namespace : "";
	const char *name = d->istiod_ra_root_secret_name ? d->istiod_ra_root_secret_name : "";
	SG_ENSURE(sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "istiod-cert-namespace: \"%s\" is not a namespace name (a DNS-1123 label: 1..%d bytes of [a-z0-9-], "
	          "alphanumeric at both ends)",
	          ns, SG_NAMES_LABEL_MAX);
	SG_ENSURE(sg_names_dns_subdomain(name, strlen(name)), SG_EINVAL,
	          "istiod-ra-root-secret-name: \"%s\" is not a Secret name (a DNS-1123 subdomain: 1..%d bytes of "
	          "[a-z0-9-.], alphanumeric at both ends of each label)",
	          name, SG_NAMES_SUBDOMAIN_MAX);
	sg_rootdist_options ro = {
	    .kube = c->kube_writers,
	    .ns = ns,
	    .name = name,
	    .key = SG_ROOTDIST_KEY,
	    .label = SG_ROOTDIST_ROOTS_LABEL,
	    .label_value = "true",
	    .controller = SG_ROOTDIST_RA_CONTROLLER,
	    .secret = true,
	};
	SG_TRY(sg_rootdist_new(&c->raroots, &ro, o->root_pem, o->root_len));
	*ctrl = sg_rootdist_controller(c->raroots);
	return SG_OK;
}

static int make_istiodcert(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	const sg_daemon_settings *d = c->d;
	sg_istiodcert_options io = {
		.kube = c->kube_writers,
		.pool = o->pool,
		.ns = d->istiod_cert_namespace,
		.secret_name = d->istiod_cert_name,
		.trust_domain = c->s->trust_domain,
		.revisions = d->istiod_cert_istio_revisions,
		.additional_dns_names = d->istiod_cert_additional_dns_names,
		.duration = d->istiod_cert_duration,
		.renew_before = d->istiod_cert_renew_before,
		.key_algorithm = d->istiod_cert_key_algorithm == 0 ? SG_ISTIODCERT_RSA : SG_ISTIODCERT_ECDSA,
		.key_size = (unsigned)d->istiod_cert_key_size,
	};
	SG_TRY(sg_istiodcert_new(&c->istiodcert, &io, o->root_pem, o->root_len));
	*ctrl = sg_istiodcert_controller(c->istiodcert);
	return SG_OK;
}

static bool want_issuers(const sg_daemon_settings *d)
{
	return d->cert_manager_issuer || d->kube_csr_signer;
}

static int make_issuers(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	(void)o;
	sg_signetissuer_options io = {
		.kube = c->kube_writers,
		.cas = c->cas,
		.ncas = c->ncas,
		.check_interval = (unsigned)c->d->issuer_check_interval,
	};
	SG_TRY(sg_signetissuer_new(&c->issuers, &io));
	*ctrl = sg_signetissuer_controller(c->issuers);
	return SG_OK;
}

static bool want_cmissuer(const sg_daemon_settings *d)
{
	return d->cert_manager_issuer;
}

static int make_cmissuer(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	(void)o;
	sg_cmissuer_options mo = {
		.kube = c->kube_writers,
		.cas = c->cas,
		.ncas = c->ncas,
		.workers = (unsigned)c->d->cert_manager_issuer_workers,
	};
	SG_TRY(sg_cmissuer_new(&c->cmissuer, &mo));
	*ctrl = sg_cmissuer_controller(c->cmissuer);
	return SG_OK;
}

static bool want_kubecsr(const sg_daemon_settings *d)
{
	return d->kube_csr_signer;
}

static int make_kubecsr(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	(void)o;
	const sg_daemon_settings *d = c->d;
	sg_kubecsr_options ko = {
	    .kube = c->kube_writers,
	    .cas = c->cas,
	    .ncas = c->ncas,
	    .aliases = d->kube_csr_signer_alias,
	    .alias_issuer = d->kube_csr_signer_alias_issuer,
	};
	SG_TRY(sg_kubecsr_new(&c->kubecsr, &ko));
	*ctrl = sg_kubecsr_controller(c->kubecsr);
	return SG_OK;
}

static bool want_approver(const sg_daemon_settings *d)
{
	return d->approver;
}

/* The policy approver: the servers of --external-policy-servers are its
 * one plugin, and the ExternalPolicyServer objects its servers (both
 * through one sg_policyserver). */
static int make_approver(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	(void)o;
	const sg_daemon_settings *d = c->d;
	sg_approver_plugin plugin;
	sg_approver_options ao = {
	    .kube = c->kube_writers,
	    .sar_ttl_seconds = d->approver_sar_cache_ttl > 0 ? d->approver_sar_cache_ttl : -1,
	    .workers = (unsigned)d->approver_workers,
	    .signer_names = d->approver_signer_names,
	};
	bool flag_servers = d->external_policy_servers && *d->external_policy_servers;
	if (flag_servers || d->external_policy_server_objects) {
		sg_policyserver_options po = {.servers = flag_servers ? d->external_policy_servers : NULL};
		SG_TRY(sg_policyserver_new(&c->policyservers, &po));
	}
	if (flag_servers) {
		plugin = sg_policyserver_plugin(c->policyservers);
		ao.plugins = &plugin;
		ao.nplugins = 1;
	}
	if (d->external_policy_server_objects)
		ao.servers = (sg_approver_servers){sg_policyserver_evaluate_servers, c->policyservers};
	SG_TRY(sg_approver_new(&c->approver, &ao));
	*ctrl = sg_approver_controller(c->approver);
	return SG_OK;
}

static bool want_extpolicy(const sg_daemon_settings *d)
{
	return d->approver && d->external_policy_server_objects;
}

bool sg_cluster_reads_secrets(const sg_daemon_settings *d)
{
	return sg_cluster_configured(d) && (want_istiodcert(d) || want_raroots(d) || want_extpolicy(d));
}

/* An object's server into the approver's table; when it changed, requests
 * that waited for it are looked at again. */
static int extpolicy_set(void *arg, const char *name, const char *endpoint, const char *ca, size_t ca_len,
                         bool *changed)
{
	sg_cluster *c = arg;
	int rc = sg_policyserver_resource_set(c->policyservers, name, endpoint, ca, ca_len, changed);
	if (*changed)
		sg_ctrl_resync(sg_approver_controller(c->approver));
	return rc;
}

static void extpolicy_remove(void *arg, const char *name)
{
	sg_cluster *c = arg;
	sg_policyserver_resource_remove(c->policyservers, name);
}

static void extpolicy_clear(void *arg)
{
	sg_cluster *c = arg;
	sg_policyserver_resource_clear(c->policyservers);
}

/* After the approver's row, whose sg_policyserver it fills. */
static int make_extpolicy(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl)
{
	(void)o;
	SG_ENSURE(c->policyservers && c->approver, SG_EINTERNAL, "externalpolicyservers: no approver");
	sg_extpolicy_options eo = {
	    .kube = c->kube_writers,
	    .ns = c->d->external_policy_server_namespace,
	    .set = extpolicy_set,
	    .remove = extpolicy_remove,
	    .clear = extpolicy_clear,
	    .arg = c,
	};
	SG_TRY(sg_extpolicy_new(&c->extpolicy, &eo));
	*ctrl = sg_extpolicy_controller(c->extpolicy);
	return SG_OK;
}

/* The table: whether the settings ask for a controller, how its module is
 * made from them (the module's controller is the manager's row), and
 * whether it runs only on the leader. A new controller is its module and
 * a row here. */
static const struct controller_kind {
	bool (*wanted)(const sg_daemon_settings *d);
	int (*make)(sg_cluster *c, const sg_cluster_options *o, sg_ctrl **ctrl);
	bool leader_only;
} controllers[] = {
    {want_rootdist, make_rootdist, true},     {want_rootpub, make_rootpub, true},
    {want_raroots, make_raroots, true},       {want_istiodcert, make_istiodcert, true},
    {want_issuers, make_issuers, true},       {want_cmissuer, make_cmissuer, true},
    {want_kubecsr, make_kubecsr, true},       {want_approver, make_approver, true},
    {want_extpolicy, make_extpolicy, true},
};

static bool any_controller(const sg_daemon_settings *d)
{
	for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++)
		if (controllers[i].wanted(d))
			return true;
	return false;
}

static int make_controllers(sg_cluster *c, const sg_cluster_options *o)
{
	const sg_daemon_settings *d = c->d;
	SG_ENSURE(d->approver || !d->external_policy_servers || !*d->external_policy_servers, SG_EINVAL,
	          "external-policy-servers is for the policy approver: set approver too");
	if (!any_controller(d))
		return SG_OK;
	sg_ctrl_manager_opts mo = {0};
	if (d->leader_election) {
		SG_TRY(make_identity(c->identity, sizeof(c->identity)));
		mo.lease_kube = c->kube_lease;
		mo.lease = (sg_lease_opts){
			.ns = d->leader_election_namespace,
			.name = d->leader_election_lease_name,
			.identity = c->identity,
			.lease_duration_ms = (unsigned)d->leader_election_lease_duration * 1000u,
			.renew_deadline_ms = (unsigned)d->leader_election_renew_deadline * 1000u,
			.retry_period_ms = (unsigned)d->leader_election_retry_period * 1000u,
		};
	}
	SG_TRY(sg_ctrl_manager_new(&c->ctrls, &mo));
	for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++) {
		if (!controllers[i].wanted(d))
			continue;
		sg_ctrl *ctrl = NULL;
		SG_TRY(controllers[i].make(c, o, &ctrl));
		SG_TRY(sg_ctrl_manager_add(c->ctrls, &(sg_ctrl_row){ctrl, controllers[i].leader_only}));
	}
	return SG_OK;
}

/* RA mode: the issuer named by the settings signs, through
 * CertificateRequests in the certificate namespace. */
static int make_forward(sg_cluster *c, const sg_cluster_options *o)
{
	const sg_daemon_settings *d = c->d;
	if (!d->issuer_name || !*d->issuer_name)
		return SG_OK;
	char server[256];
	SG_TRY(new_client(d, &c->kube_forward, 0, false, server, sizeof(server)));
	/* The pod's name (the host name in a pod) labels this replica's
	 * requests: a restarted container finds what it left and removes it. */
	char host[64] = "";
	if (gethostname(host, sizeof(host)) != 0)
		host[0] = 0;
	host[sizeof(host) - 1] = 0;
	bool stable = sg_names_label_value(host);
	sg_forward_options fo = {
		.kube = c->kube_forward,
		.ns = d->certificate_namespace,
		.issuer_name = d->issuer_name,
		.issuer_kind = d->issuer_kind,
		.issuer_group = d->issuer_group,
		.roots_pem = o->root_pem,
		.roots_len = o->root_len,
		.preserve = d->preserve_certificate_requests,
		.max_in_flight = (unsigned)d->forward_max_in_flight,
		/* every call has a deadline (the client's, at most
		 * server-timeout), so this bounds nothing signetd sends */
		.timeout_ms = (unsigned)d->server_timeout * 1000u,
		.replica_id = stable ? host : NULL,
		.additional_annotations = d->certificate_request_additional_annotations,
	};
	SG_TRY(sg_forward_new(&c->forward, &fo));
	if (d->preserve_certificate_requests)
		sg_log(SG_LOG_WARN, "preserve-certificate-requests is on: answered CertificateRequests are kept and pile "
		                    "up; do not use it in production", SG_F_END);
	sg_log(SG_LOG_INFO, "RA mode: workload certificates are signed by a cert-manager issuer",
	       SG_F_STR("issuer", d->issuer_name), SG_F_STR("kind", d->issuer_kind), SG_F_STR("group", d->issuer_group),
	       SG_F_STR("namespace", d->certificate_namespace), SG_F_END);
	return SG_OK;
}

sg_forward *sg_cluster_forwarder(sg_cluster *c)
{
	return c ? c->forward : NULL;
}

static bool need_pods(const sg_cluster *c)
{
	return c->d->ca_trusted_node_accounts && *c->d->ca_trusted_node_accounts;
}

/* What "auto" means in a cluster, decided once at start: when the API
 * server's OIDC discovery answers (issuer and keys), the API server's own
 * tokens are verified locally and their bound service account and pod
 * checked against the informer (sg_authn_bound_new), and every other token
 * (legacy Secret tokens, other issuers) goes to a TokenReview; when it
 * does not, every token goes to a TokenReview, as in tokenreview mode. One
 * log line says which and why. A discovery that fails at start is not
 * retried: the process keeps reviewing (restart to re-decide), which is
 * slower but never less safe. */
static void decide_auto(sg_cluster *c)
{
	const sg_daemon_settings *d = c->d;
	sg_jwks_kube_options jo = {.kube = c->kube, .refresh_seconds = (int)d->jwks_refresh_interval};
	if (sg_jwks_kube_new(&c->jwks, &jo) < 0) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		c->mode = SG_TOKEN_AUTH_TOKENREVIEW;
		sg_log(SG_LOG_WARN,
		       "token-authenticator auto: tokenreview for every token (the API server's OIDC "
		       "discovery failed; restart signetd to try again)",
		       SG_F_STR("reason", why), SG_F_END);
		return;
	}
	const char *issuer = c->s->jwt_issuer ? c->s->jwt_issuer : sg_jwks_kube_issuer(c->jwks);
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(c->jwks, &st);
	c->mode = SG_TOKEN_AUTH_JWKS;
	c->split = true;
	sg_log(SG_LOG_INFO,
	       "token-authenticator auto: jwks for the API server's tokens (OIDC discovery answered), "
	       "tokenreview for legacy and other issuers' tokens",
	       SG_F_STR("issuer", issuer), SG_F_INT("keys", st.keys), SG_F_END);
}

static int make_parts(sg_cluster *c, const sg_cluster_options *o)
{
	const sg_daemon_settings *d = c->d;
	if (c->mode == SG_TOKEN_AUTH_AUTO)
		decide_auto(c);
	bool jwks = resolved_mode(c) == SG_TOKEN_AUTH_JWKS;
	if (need_pods(c) || jwks) {
		sg_workload_options wo = {.kube = c->kube, .pods = true, .service_accounts = jwks};
		SG_TRY(sg_workload_new(&c->workload, &wo));
	}
	if (jwks && !c->jwks && !c->s->jwt_jwks_file) {
		sg_jwks_kube_options jo = {.kube = c->kube, .refresh_seconds = (int)d->jwks_refresh_interval};
		SG_TRY(sg_jwks_kube_new(&c->jwks, &jo));
	}
	SG_TRY(make_forward(c, o));
	return make_controllers(c, o);
}

int sg_cluster_new(sg_cluster **out, const sg_cluster_options *o)
{
	*out = NULL;
	SG_ENSURE(sg_cluster_configured(o->daemon), SG_EINVAL, "no Kubernetes API is configured");
	SG_ENSURE(o->app || !(o->daemon->cert_manager_issuer || o->daemon->kube_csr_signer), SG_EINVAL,
	          "the cert-manager issuer and the CSR signer need the appliance's CA");
	SG_ENSURE(o->pool || !o->daemon->istiod_cert_enabled, SG_EINVAL,
	          "istiod's certificate is issued through the signer pool, which a daemon without an HSM has not");
	SG_ENSURE(o->n_extra_cas < SG_CLUSTER_CAS_MAX, SG_EINVAL, "at most %d CAs", SG_CLUSTER_CAS_MAX);
	sg_cluster *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	c->s = o->settings;
	c->d = o->daemon;
	c->mode = o->daemon->token_authenticator;
	c->cas[0] = (sg_kubesign_ca){.name = "default", .app = o->app};
	c->ncas = 1;
	for (size_t i = 0; i < o->n_extra_cas; i++)
		c->cas[c->ncas++] = o->extra_cas[i];
	int rc = SG_OK;
	c->audiences = calloc(o->n_audiences ? o->n_audiences : 1, sizeof(char *));
	for (size_t i = 0; c->audiences && i < o->n_audiences; i++)
		if ((c->audiences[c->n_audiences] = strdup(o->audiences[i])))
			c->n_audiences++;
	if (!c->audiences || c->n_audiences != o->n_audiences)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = make_clients(c);
	if (rc == SG_OK)
		rc = make_parts(c, o);
	if (rc < 0) {
		sg_cluster_free(c);
		return rc;
	}
	*out = c;
	return SG_OK;
}

/* ---- the request path -------------------------------------------------------- */

static int make_tokenreview(sg_cluster *c, sg_authenticator *out)
{
	const char *const *aud = (const char *const *)c->audiences;
	sg_authn_tokenreview_options to = {
	    .kube = c->kube_reviews,
	    .audiences = aud,
	    .n_audiences = c->n_audiences,
	    .trust_domain = c->s->trust_domain,
	    .cache_ttl_max = (int)c->d->token_cache_ttl,
	    .max_inflight = (unsigned)c->d->token_review_max_inflight,
	};
	SG_TRY(sg_authn_tokenreview_new(out, &to));
	c->tokenreview = out->self;
	return SG_OK;
}

/* auto with discovery: the jwks authenticator (local) and a tokenreview
 * one for every token of another issuer, behind the router. */
static int make_split(sg_cluster *c, sg_authenticator local, const char *issuer, sg_authenticator *out)
{
	sg_authenticator remote;
	int rc = make_tokenreview(c, &remote);
	if (rc < 0) {
		local.free(local.self);
		return rc;
	}
	SG_TRY(sg_authn_route_new(out, local, remote, issuer)); /* owns both, also on failure */
	c->route = out->self;
	return SG_OK;
}

int sg_cluster_authenticator(sg_cluster *c, sg_authenticator *out, const char **method)
{
	const char *const *aud = (const char *const *)c->audiences;
	if (resolved_mode(c) == SG_TOKEN_AUTH_TOKENREVIEW) {
		SG_TRY(make_tokenreview(c, out));
		*method = c->d->token_authenticator == SG_TOKEN_AUTH_AUTO ? "tokenreview (auto: no OIDC discovery)"
		                                                          : "tokenreview";
		return SG_OK;
	}
	/* jwks: keys from the file when one is named, else from the API server;
	 * the issuer from the settings, else from the discovery document. */
	const char *issuer = c->s->jwt_issuer;
	if (!issuer && c->jwks)
		issuer = sg_jwks_kube_issuer(c->jwks);
	SG_ENSURE(issuer, SG_EINVAL,
		  c->jwks ? "the API server's discovery document names no issuer; set jwt-issuer"
			  : "jwt-issuer is required with jwt-jwks-file");
	sg_authn_jwt_options jo = {
		.jwks_file = c->jwks ? NULL : c->s->jwt_jwks_file,
		.jwks_source = c->jwks ? sg_jwks_kube_source(c->jwks) : NULL,
		.issuer = issuer,
		.audiences = aud,
		.n_audiences = c->n_audiences,
		.trust_domain = c->s->trust_domain,
	};
	sg_authenticator inner;
	SG_TRY(sg_authn_jwt_new(&inner, &jo));
	if (!c->split) {
		SG_TRY(sg_authn_bound_new(out, inner, c->workload)); /* owns inner, also on failure */
		*method = c->jwks ? "jwks (keys from the API server)" : "jwks (keys from jwt-jwks-file)";
		return SG_OK;
	}
	sg_authenticator local;
	SG_TRY(sg_authn_bound_new(&local, inner, c->workload));
	SG_TRY(make_split(c, local, issuer, out));
	*method = "jwks (auto: keys from the API server; tokenreview for other issuers)";
	return SG_OK;
}

int sg_cluster_authorize_impersonation(void *cluster, const sg_caller *caller, const char *target_ns,
				       const char *target_sa)
{
	sg_cluster *c = cluster;
	SG_ENSURE(c->workload, SG_EAUTH, "impersonation needs the pod index");
	return sg_workload_authorize_impersonation(c->workload, caller, target_ns, target_sa);
}

/* ---- running ------------------------------------------------------------------- */

int sg_cluster_start(sg_cluster *c)
{
	if (c->workload) {
		SG_TRY(sg_workload_start(c->workload));
		/* Serving before the first list would refuse every node agent and
		 * every bound token for a moment; waiting a little avoids that,
		 * and a slow API server only delays it (the caches fill later). */
		if (sg_workload_wait_synced(c->workload, SYNC_WAIT_MS) < 0)
			sg_log(SG_LOG_WARN, "pod and service-account caches not filled yet; continuing", SG_F_END);
	}
	return c->ctrls ? sg_ctrl_manager_start(c->ctrls) : SG_OK;
}

void sg_cluster_set_root(sg_cluster *c, const char *pem, size_t len)
{
	if (!c)
		return;
	if (c->rootdist && sg_rootdist_set_root(c->rootdist, pem, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot hand the new root bundle to the ConfigMap writer");
	if (c->rootpub && sg_rootdist_set_root(c->rootpub, pem, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot hand the new root bundle to the trust-bundle roots writer");
	if (c->raroots && sg_rootdist_set_root(c->raroots, pem, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot hand the new root bundle to istiod's RA roots writer");
	if (c->istiodcert && sg_istiodcert_set_root(c->istiodcert, pem, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot hand the new root bundle to the istiod certificate writer");
	if (c->forward && sg_forward_set_roots(c->forward, pem, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot hand the new root bundle to the RA forwarder");
}

bool sg_cluster_is_leader(sg_cluster *c)
{
	return c && sg_ctrl_manager_leading(c->ctrls);
}

void sg_cluster_tick(sg_cluster *c)
{
	if (c)
		sg_ctrl_manager_tick(c->ctrls);
}

/* ---- metrics ------------------------------------------------------------------- */

static double leader_gauge(void *arg)
{
	return sg_cluster_is_leader(arg);
}

static double local_gauge(void *arg)
{
	const sg_cluster *c = arg;
	return resolved_mode(c) == SG_TOKEN_AUTH_JWKS;
}

static double routed_local(void *arg)
{
	uint64_t l, r;
	sg_authn_route_counts(((sg_cluster *)arg)->route, &l, &r);
	return (double)l;
}

static double routed_review(void *arg)
{
	uint64_t l, r;
	sg_authn_route_counts(((sg_cluster *)arg)->route, &l, &r);
	return (double)r;
}

/* Each part's stats for the registry's tables (the registry hands a zeroed
 * struct: a part that is off reads as zeros). */
static void tr_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->tokenreview)
		sg_authn_tokenreview_stats_of(c->tokenreview, out);
}

static void rd_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->rootdist)
		sg_rootdist_stats_get(c->rootdist, out);
}

static void rp_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->rootpub)
		sg_rootdist_stats_get(c->rootpub, out);
}

static void ra_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->raroots)
		sg_rootdist_stats_get(c->raroots, out);
}

static void wl_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->workload)
		sg_workload_stats_get(c->workload, out);
}

static void jk_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->jwks)
		sg_jwks_kube_stats_get(c->jwks, out);
}

static void fw_of(void *arg, void *out)
{
	sg_cluster *c = arg;
	if (c->forward)
		sg_forward_stats_get(c->forward, out);
}

#define COUNTER SG_METRICS_STAT_COUNTER
#define GAUGE SG_METRICS_STAT_GAUGE

static const sg_metrics_stat tr_rows[] = {
    COUNTER(sg_authn_tokenreview_stats, reviews, "signet_tokenreview_requests_total",
            "TokenReview calls made to the API server."),
    COUNTER(sg_authn_tokenreview_stats, cache_hits, "signet_tokenreview_cache_hits_total",
            "Tokens answered from the review cache."),
    COUNTER(sg_authn_tokenreview_stats, coalesced, "signet_tokenreview_coalesced_total",
            "Requests that waited for a review already under way."),
    COUNTER(sg_authn_tokenreview_stats, api_errors, "signet_tokenreview_errors_total",
            "TokenReview calls that got no answer (API unreachable or refusing)."),
    COUNTER(sg_authn_tokenreview_stats, throttled, "signet_tokenreview_throttled_total",
            "TokenReview calls the API server answered 429 Too Many Requests."),
    COUNTER(sg_authn_tokenreview_stats, retries, "signet_tokenreview_retries_total",
            "Reviews asked again after a 429 (or a 5xx with Retry-After)."),
    GAUGE(sg_authn_tokenreview_stats, in_flight, "signet_tokenreview_in_flight", "TokenReview calls under way."),
    GAUGE(sg_authn_tokenreview_stats, budget, "signet_tokenreview_budget",
          "TokenReview calls the adaptive budget allows in flight (at most token-review-max-inflight)."),
    COUNTER(sg_authn_tokenreview_stats, budget_cuts, "signet_tokenreview_budget_cuts_total",
            "Times the TokenReview budget shrank (429, 5xx, timeouts, rising latency)."),
};

static const sg_metrics_stat rd_rows[] = {
    COUNTER(sg_rootdist_stats, writes, "signet_root_configmap_writes_total",
            "istio-ca-root-cert ConfigMaps created or repaired."),
    COUNTER(sg_rootdist_stats, errors, "signet_root_configmap_errors_total", "Failed istio-ca-root-cert reconciles."),
};

static const sg_metrics_stat rp_rows[] = {
    COUNTER(sg_rootdist_stats, writes, "signet_roots_publish_writes_total",
            "roots-configmap (trust-namespace) created or repaired."),
    COUNTER(sg_rootdist_stats, errors, "signet_roots_publish_errors_total", "Failed roots-configmap reconciles."),
};

static const sg_metrics_stat ra_rows[] = {
    COUNTER(sg_rootdist_stats, writes, "signet_istiod_ra_roots_writes_total",
            "istiod-ra-root-secret-name (istiod's namespace) created or repaired."),
    COUNTER(sg_rootdist_stats, errors, "signet_istiod_ra_roots_errors_total",
            "Failed istiod-ra-root-secret-name reconciles."),
};

static const sg_metrics_stat wl_rows[] = {
    COUNTER(sg_workload_stats, impersonation_allowed, "signet_impersonation_allowed_total",
            "Impersonations a node agent was allowed (pod on its node)."),
    COUNTER(sg_workload_stats, impersonation_refused, "signet_impersonation_refused_total",
            "Impersonations refused by node authorization."),
    COUNTER(sg_workload_stats, bound_live, "signet_bound_token_lookups_total",
            "Live API lookups of a token's ServiceAccount or Pod (cache misses)."),
    GAUGE(sg_workload_stats, pods, "signet_workload_pods", "Pods in the node-authorization index."),
};

static const sg_metrics_stat jk_rows[] = {
    COUNTER(sg_jwks_kube_stats, failures, "signet_jwks_fetch_failures_total",
            "Failed fetches of the cluster's JWKS (the previous keys stay in use)."),
    GAUGE(sg_jwks_kube_stats, last_success, "signet_jwks_last_success_timestamp",
          "When the cluster's JWKS was last fetched."),
};

static const sg_metrics_stat fw_rows[] = {
    COUNTER(sg_forward_stats, issued, "signet_forward_issued_total",
            "RA mode: CertificateRequests answered with a certificate."),
    COUNTER(sg_forward_stats, refused, "signet_forward_refused_total",
            "RA mode: CertificateRequests denied, failed or deleted by others."),
    COUNTER(sg_forward_stats, timeouts, "signet_forward_timeouts_total",
            "RA mode: requests whose deadline passed, or whose caller went away."),
    COUNTER(sg_forward_stats, rejected, "signet_forward_rejected_total",
            "RA mode: requests refused at once (too many in flight)."),
    COUNTER(sg_forward_stats, errors, "signet_forward_errors_total", "RA mode: API errors and unusable certificates."),
    GAUGE(sg_forward_stats, in_flight, "signet_forward_in_flight",
          "RA mode: CertificateRequests waiting for their issuer."),
    COUNTER(sg_forward_stats, api_calls, "signet_forward_api_calls_total",
            "RA mode: creates and deletes of CertificateRequests."),
};

#undef COUNTER
#undef GAUGE

#define TABLE(rows, get, type) rows, sizeof(rows) / sizeof(rows[0]), get, sizeof(type)

int sg_cluster_metrics(sg_cluster *c, sg_metrics *reg)
{
	SG_TRY(sg_metrics_gauge_fn(reg, "signet_leader",
	                           "1 while this replica holds the leader-election Lease and runs the writers.",
	                           leader_gauge, c));
	SG_TRY(sg_metrics_gauge_fn(reg, "signet_token_authenticator_jwks",
	                           "1 when the API server's tokens are verified locally (jwks, or auto with OIDC "
	                           "discovery); 0 when every token goes to a TokenReview.",
	                           local_gauge, c));
	SG_TRY(sg_metrics_counter_fn(reg, "signet_token_auto_local_total",
	                             "auto: tokens of the API server's issuer, verified locally.", routed_local, c));
	SG_TRY(sg_metrics_counter_fn(reg, "signet_token_auto_review_total",
	                             "auto: tokens of another issuer (legacy Secret tokens), sent to a TokenReview.",
	                             routed_review, c));
	if (c->forward)
		SG_TRY(sg_metrics_stats(reg, TABLE(fw_rows, fw_of, sg_forward_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(tr_rows, tr_of, sg_authn_tokenreview_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(rd_rows, rd_of, sg_rootdist_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(rp_rows, rp_of, sg_rootdist_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(ra_rows, ra_of, sg_rootdist_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(wl_rows, wl_of, sg_workload_stats), c));
	SG_TRY(sg_metrics_stats(reg, TABLE(jk_rows, jk_of, sg_jwks_kube_stats), c));
	if (c->policyservers)
		SG_TRY(sg_policyserver_metrics(c->policyservers, reg));
	return c->ctrls ? sg_ctrl_manager_metrics(c->ctrls, reg) : SG_OK;
}

/* ---- the end ------------------------------------------------------------------- */

void sg_cluster_free(sg_cluster *c)
{
	if (!c)
		return;
	/* The controllers stop (leading ends), the Lease is released so a
	 * successor takes over at its next retry, then the rest goes. */
	sg_ctrl_manager_free(c->ctrls);
	sg_forward_free(c->forward);
	sg_kube_free(c->kube_forward);
	sg_cmissuer_free(c->cmissuer);
	sg_extpolicy_free(c->extpolicy);
	sg_approver_free(c->approver);
	sg_policyserver_free(c->policyservers);
	sg_kubecsr_free(c->kubecsr);
	sg_signetissuer_free(c->issuers);
	sg_istiodcert_free(c->istiodcert);
	sg_rootdist_free(c->raroots);
	sg_rootdist_free(c->rootpub);
	sg_rootdist_free(c->rootdist);
	sg_workload_free(c->workload);
	sg_jwks_kube_free(c->jwks);
	sg_kube_free(c->kube_lease);
	sg_kube_free(c->kube_writers);
	sg_kube_free(c->kube_reviews);
	sg_kube_free(c->kube);
	for (size_t i = 0; i < c->n_audiences; i++)
		free(c->audiences[i]);
	free(c->audiences);
	free(c);
}
