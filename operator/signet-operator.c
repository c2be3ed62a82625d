/*
 * signet-operator: deploys signet into a cluster and reports on it through
 * the IstioCSR and TrustManager custom resources (operator.openshift.io/
 * v1alpha1), as OpenShift's cert-manager-operator does for istio-csr and
 * trust-manager: an IstioCSR gets signetd (sg_istiocsr.h), the TrustManager
 * gets signet-trust (sg_trustmanager.h). It holds no key and opens no HSM.
 *
 * Images come from RELATED_IMAGE_SIGNETD and RELATED_IMAGE_SIGNET_TRUST
 * (the operator-bundle convention), or the flags of the same meaning.
 * Both reconcilers are leader-only rows of one controller table; the Lease
 * is the operator's own (signet-operator-leader-election in its namespace).
 *
 * The main thread starts things, ticks the table once a second (it
 * restarts a row that failed to start) and waits for SIGTERM/SIGINT.
 * Probes: /healthz while the process lives; the readiness path once the
 * table runs and, on the leader, while every reconciler runs.
 */
#include "sg_ctrl.h"
#include "sg_ctrl_program.h"
#include "sg_error.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_istiocsr.h"
#include "sg_kube.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_names.h"
#include "sg_opt.h"
#include "sg_trustmanager.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef SIGNET_VERSION
#define SIGNET_VERSION "0.1.0"
#endif
#define SA_NAMESPACE_FILE "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

static const char *const formats[] = {"text", "json", NULL};
/* In sg_trustmanager_ca_source's order. */
static const char *const ca_sources[] = {"openshift", "file", NULL};

typedef struct settings {
	char *config;
	sg_ctrl_common c;
	char *signetd_image, *signet_trust_image, *operand_version;
	bool istiocsr, trustmanager;
	char *hsm_secret;
	char *trust_manager_namespace, *default_ca_bundle, *default_ca_bundle_version;
	int default_ca_source;
	int64_t workers;
	int log_level, log_format;
} settings;

#define S(f) offsetof(settings, f)
/* clang-format off: the table keeps its one-row-per-flag layout */
static const sg_opt opts[] = {
	{"config", SG_OPT_PATH, S(config), NULL, 0, 4096, NULL, "config file of \"name = value\" lines (flags override it)",
	 true},
	SG_CTRL_OPTS_CLIENT(settings, c, "50", "100"),
	{"signetd-image", SG_OPT_STRING, S(signetd_image), "", 0, 1024, NULL,
	 "signetd's image for IstioCSR Deployments (default: $RELATED_IMAGE_SIGNETD)", false},
	{"signet-trust-image", SG_OPT_STRING, S(signet_trust_image), "", 0, 1024, NULL,
	 "signet-trust's image for the TrustManager Deployment (default: $RELATED_IMAGE_SIGNET_TRUST)", false},
	{"operand-version", SG_OPT_STRING, S(operand_version), SIGNET_VERSION, 1, 63, NULL,
	 "the app.kubernetes.io/version label of every object made", false},
	{"istiocsr", SG_OPT_BOOL, S(istiocsr), "true", 0, 0, NULL, "reconcile IstioCSR resources (deploy signetd)", false},
	{"trustmanager", SG_OPT_BOOL, S(trustmanager), "true", 0, 0, NULL,
	 "reconcile the TrustManager resource (deploy signet-trust)", false},
	{"hsm-secret", SG_OPT_STRING, S(hsm_secret), "signet-hsm", 1, 253, NULL,
	 "Secret in each IstioCSR's namespace with signetd.conf and the HSM material it names, and optionally "
	 "hsm-egress (a network HSM's addresses, for the NetworkPolicy); read when a SignetIssuer signs (an "
	 "IstioCSR with a cert-manager issuer runs signetd --hsm=false and needs none)",
	 false},
	{"trust-manager-namespace", SG_OPT_STRING, S(trust_manager_namespace), "cert-manager", 1, 63, NULL,
	 "namespace signet-trust runs in", false},
	{"default-ca-package-source", SG_OPT_ENUM, S(default_ca_source), "openshift", 0, 0, ca_sources,
	 "where the TrustManager's default CA package (defaultCAPackage Enabled) comes from: openshift, the cluster's "
	 "trusted CA bundle that OpenShift's network operator injects into ConfigMap "
	 "trust-manager-default-ca-injection (package cert-manager-package-openshift); file, --default-ca-bundle "
	 "(Debian's, package cert-manager-package-debian), off OpenShift",
	 false},
	{"default-ca-bundle", SG_OPT_PATH, S(default_ca_bundle), "/etc/ssl/certs/ca-certificates.crt", 0, 4096, NULL,
	 "PEM of the public CAs for the default CA package with --default-ca-package-source=file", false},
	{"default-ca-bundle-version", SG_OPT_STRING, S(default_ca_bundle_version), "", 0, 128, NULL,
	 "version of that bundle in the package (empty: derived from its content)", false},
	SG_CTRL_OPTS_LEASE(settings, c, "signet-operator-leader-election",
	                   "namespace of the Lease (empty: the pod's own namespace, else signet-operator)",
	                   "name of the Lease"),
	SG_CTRL_OPTS_ENDPOINTS(settings, c),
	{"workers", SG_OPT_INT, S(workers), "2", 1, SG_CTRL_WORKERS_MAX, NULL, "resources reconciled at once, per kind",
	 false},
	{"log-level", SG_OPT_LOG_LEVEL, S(log_level), "info", 0, 0, NULL,
	 "log level, or a klog verbosity as the anchor operator's: 0-1 info, 2-10 debug", false},
	{"log-format", SG_OPT_ENUM, S(log_format), "text", 0, 0, formats, "log format", false},
};
/* clang-format on */
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

typedef struct program {
	settings s;
	sg_ctrl_common_run run; /* the clients and the Lease */
	sg_kube *kube;          /* run.kube */
	sg_istiocsr *istiocsr;
	sg_trustmanager *trustmanager;
	sg_ctrl_manager *table;
	sg_metrics *metrics;
	sg_ctrl_endpoints *endpoints;
	atomic_bool started;
} program;

/* Leader: ready while every reconciler runs. Standby: ready to take over. */
static bool ready(void *arg)
{
	program *p = arg;
	if (!atomic_load(&p->started))
		return false;
	bool leads = !p->s.c.leader_elect || sg_ctrl_manager_leading(p->table);
	if (!leads)
		return true;
	return (!p->istiocsr || sg_ctrl_running(sg_istiocsr_controller(p->istiocsr))) &&
	       (!p->trustmanager || sg_ctrl_running(sg_trustmanager_controller(p->trustmanager)));
}

/* ---- start and stop ---- */

/* The Lease's namespace when the flag leaves it empty: the pod's own,
 * else signet-operator (the manifests' namespace). */
static void pod_namespace(char *buf, size_t cap)
{
	buf[0] = '\0';
	FILE *f = fopen(SA_NAMESPACE_FILE, "r");
	if (f) {
		if (!fgets(buf, (int)cap, f))
			buf[0] = '\0';
		fclose(f);
		buf[strcspn(buf, "\r\n")] = '\0';
	}
	if (!*buf)
		snprintf(buf, cap, "signet-operator");
}

static int start(void *self)
{
	program *p = self;
	settings *s = &p->s;
	SG_ENSURE(s->istiocsr || s->trustmanager, SG_EINVAL, "both --istiocsr and --trustmanager are off: nothing to do");
	const char *signetd_image = *s->signetd_image ? s->signetd_image : getenv("RELATED_IMAGE_SIGNETD");
	const char *trust_image = *s->signet_trust_image ? s->signet_trust_image : getenv("RELATED_IMAGE_SIGNET_TRUST");
	SG_ENSURE(!s->istiocsr || (signetd_image && *signetd_image), SG_EINVAL,
	          "signetd's image: set RELATED_IMAGE_SIGNETD or --signetd-image (or --istiocsr=false)");
	SG_ENSURE(!s->trustmanager || (trust_image && *trust_image), SG_EINVAL,
	          "signet-trust's image: set RELATED_IMAGE_SIGNET_TRUST or --signet-trust-image (or --trustmanager=false)");
	SG_ENSURE(sg_names_label_value(s->operand_version), SG_EINVAL,
	          "operand-version \"%s\" is not a label value", s->operand_version);
	char own_ns[128];
	pod_namespace(own_ns, sizeof(own_ns));
	SG_TRY(sg_ctrl_common_clients(&s->c, "signet-operator", own_ns, &p->run));
	p->kube = p->run.kube;
	if (s->istiocsr) {
		sg_istiocsr_options o = {.kube = p->kube, .image = signetd_image, .version = s->operand_version,
		                         .hsm_secret = s->hsm_secret, .workers = (unsigned)s->workers};
		SG_TRY(sg_istiocsr_new(&p->istiocsr, &o));
	}
	if (s->trustmanager) {
		sg_trustmanager_options o = {
			.kube = p->kube,
			.image = trust_image,
			.version = s->operand_version,
			.operand_namespace = s->trust_manager_namespace,
			.ca_source = (sg_trustmanager_ca_source)s->default_ca_source,
			.ca_bundle_path = s->default_ca_bundle,
			.ca_bundle_version = *s->default_ca_bundle_version ? s->default_ca_bundle_version : NULL,
			.workers = (unsigned)s->workers,
		};
		SG_TRY(sg_trustmanager_new(&p->trustmanager, &o));
	}
	SG_TRY(sg_ctrl_manager_new(&p->table, &p->run.mo));
	if (p->istiocsr) {
		sg_ctrl_row row = {.ctrl = sg_istiocsr_controller(p->istiocsr), .leader_only = true};
		SG_TRY(sg_ctrl_manager_add(p->table, &row));
	}
	if (p->trustmanager) {
		sg_ctrl_row row = {.ctrl = sg_trustmanager_controller(p->trustmanager), .leader_only = true};
		SG_TRY(sg_ctrl_manager_add(p->table, &row));
	}
	SG_TRY(sg_metrics_new(&p->metrics));
	SG_TRY(sg_ctrl_manager_metrics(p->table, p->metrics));
	SG_TRY(sg_ctrl_common_endpoints(&s->c, p->metrics, ready, p, &p->endpoints));
	SG_TRY(sg_ctrl_manager_start(p->table));
	atomic_store(&p->started, true);
	sg_log(SG_LOG_INFO, "signet-operator started", SG_F_STR("istiocsr", s->istiocsr ? "on" : "off"),
	       SG_F_STR("trustmanager", s->trustmanager ? "on" : "off"),
	       SG_F_STR("leader_election", s->c.leader_elect ? "on" : "off"), SG_F_END);
	return SG_OK;
}

static void stop(void *self)
{
	program *p = self;
	atomic_store(&p->started, false);
	sg_ctrl_endpoints_stop(p->endpoints);
	p->endpoints = NULL;
	sg_ctrl_manager_free(p->table); /* leadership ends and the Lease is released */
	sg_istiocsr_free(p->istiocsr);
	sg_trustmanager_free(p->trustmanager);
	sg_metrics_free(p->metrics);
	sg_ctrl_common_free(&p->run);
	p->kube = NULL;
}

int main(int argc, char **argv)
{
	static program p;
	sg_ctrl_program_def d = {
		.name = "signet-operator",
		.usage = "Usage: signet-operator [flags]\n"
		         "Deploys signetd for IstioCSR resources and signet-trust for the TrustManager resource\n"
		         "(operator.openshift.io/v1alpha1) and reports their state in the resources' status.\n"
		         "Every flag may also be a line \"name = value\" in the --config file; flags override it.\n\n",
		.opts = opts,
		.nopts = NOPTS,
		.settings = &p.s,
		.log_level = &p.s.log_level,
		.log_format = &p.s.log_format,
		.start = start,
		.stop = stop,
		.self = &p,
		.table = &p.table,
		.tick = NULL,
	};
	return sg_ctrl_program_main(&d, argc, argv);
}
