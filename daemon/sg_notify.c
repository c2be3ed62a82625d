/*
 * sg_notify over libsystemd's sd_notify (see sg_notify.h).
 *
 * libsystemd does the protocol: the datagram to NOTIFY_SOCKET (a path or an
 * abstract socket, and vsock in newer systemd), the credentials, the
 * parsing of WATCHDOG_USEC/WATCHDOG_PID. This file only decides what to
 * send and turns its failures into one log record. sd_notify is called with
 * unset_environment = 0: signetd starts no children that could inherit the
 * socket by mistake, and the variables stay readable for diagnosis.
 */
#include "sg_notify.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

struct sg_notify {
	bool enabled;
	uint64_t watchdog_usec;
	bool failing; /* the last send failed (and was logged) */
	bool status_sent;
	char status[SG_NOTIFY_STATUS_MAX];
};

int sg_notify_new(sg_notify **out)
{
	sg_notify *n = calloc(1, sizeof(*n));
	SG_ENSURE(n, SG_EINTERNAL, "out of memory");
	const char *sock = getenv("NOTIFY_SOCKET");
	n->enabled = sock && *sock;
	uint64_t usec = 0;
	/* > 0: on, and WATCHDOG_PID (when set) names this process; 0: off;
	 * < 0: the variables are malformed, which leaves it off (logged: a
	 * unit that asked for a watchdog would otherwise kill us silently). */
	int rc = sd_watchdog_enabled(0, &usec);
	if (rc > 0 && usec > 0)
		n->watchdog_usec = usec;
	else if (rc < 0)
		sg_log(SG_LOG_WARN, "systemd watchdog variables are malformed; no watchdog pings",
		       SG_F_STR("error", strerror(-rc)), SG_F_END);
	if (n->enabled)
		sg_log(SG_LOG_INFO, "systemd notification", SG_F_STR("socket", sock),
		       SG_F_INT("watchdog_usec", (int64_t)n->watchdog_usec), SG_F_END);
	*out = n;
	return SG_OK;
}

void sg_notify_free(sg_notify *n)
{
	free(n);
}

bool sg_notify_enabled(const sg_notify *n)
{
	return n && n->enabled;
}

uint64_t sg_notify_watchdog_usec(const sg_notify *n)
{
	return n ? n->watchdog_usec : 0;
}

/* One datagram; a failure is logged once per run of failures. */
static bool send_state(sg_notify *n, const char *state)
{
	if (!n || !n->enabled)
		return false;
	int rc = sd_notify(0, state);
	if (rc > 0) {
		n->failing = false;
		return true;
	}
	if (!n->failing)
		sg_log(SG_LOG_WARN, "cannot notify systemd; going on without it",
		       SG_F_STR("error", rc < 0 ? strerror(-rc) : "NOTIFY_SOCKET vanished"), SG_F_END);
	n->failing = true;
	return false;
}

/* "STATUS=<line>" with control characters made spaces: a newline would
 * start another variable of the message. */
static void status_line(char *buf, size_t size, const char *status)
{
	int w = snprintf(buf, size, "STATUS=%s", status);
	size_t end = w < 0 ? 0 : (size_t)w < size ? (size_t)w : size - 1;
	buf[end] = 0;
	for (size_t i = sizeof("STATUS=") - 1; i < end; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			buf[i] = ' ';
}

static void remember(sg_notify *n, const char *status)
{
	snprintf(n->status, sizeof(n->status), "%s", status);
	n->status_sent = true;
}

void sg_notify_ready(sg_notify *n, const char *status)
{
	if (!n || !n->enabled)
		return;
	char msg[sizeof("READY=1\n") + sizeof("STATUS=") + SG_NOTIFY_STATUS_MAX];
	char line[sizeof("STATUS=") + SG_NOTIFY_STATUS_MAX] = "";
	if (status)
		status_line(line, sizeof(line), status);
	snprintf(msg, sizeof(msg), "READY=1%s%s", status ? "\n" : "", line);
	if (send_state(n, msg) && status)
		remember(n, status);
}

void sg_notify_status(sg_notify *n, const char *status)
{
	if (!n || !n->enabled || !status)
		return;
	/* Compared as it would be stored (cut to the buffer), so that a long
	 * line is not resent on every tick. */
	if (n->status_sent && strncmp(n->status, status, sizeof(n->status) - 1) == 0)
		return;
	char line[sizeof("STATUS=") + SG_NOTIFY_STATUS_MAX];
	status_line(line, sizeof(line), status);
	if (send_state(n, line))
		remember(n, status);
}

void sg_notify_reloading(sg_notify *n)
{
	if (!n || !n->enabled)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	char msg[64];
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
	         (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u);
	send_state(n, msg);
}

void sg_notify_stopping(sg_notify *n)
{
	send_state(n, "STOPPING=1");
}

void sg_notify_watchdog(sg_notify *n)
{
	if (n && n->watchdog_usec)
		send_state(n, "WATCHDOG=1");
}
