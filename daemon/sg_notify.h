/*
 * sg_notify: signetd's side of systemd's service notification protocol
 * (sd_notify(3): READY=1, RELOADING=1, STOPPING=1, STATUS=, WATCHDOG=1),
 * the one adapter over libsystemd; nothing else in signet includes a
 * systemd header.
 *
 * Everything is a no-op unless systemd asked for it: without NOTIFY_SOCKET
 * in the environment nothing is sent, and the watchdog is on only when
 * WATCHDOG_USEC is set (and WATCHDOG_PID, when set, is this process), as
 * sd_watchdog_enabled(3) decides.
 *
 * Sending never fails the caller: the notifications report on the daemon,
 * they are not part of signing, so a NOTIFY_SOCKET that points nowhere
 * must not stop a CA. The first failure to send is logged (warn, with the
 * reason); later ones are not, until a send succeeds again.
 *
 * Not thread-safe: one thread (signetd's main thread) owns the handle.
 */
#ifndef SG_NOTIFY_H
#define SG_NOTIFY_H

#include "sg_error.h"

#include <stdbool.h>
#include <stdint.h>

/* A STATUS= line holds at most this many bytes (longer is cut). */
#define SG_NOTIFY_STATUS_MAX 256

typedef struct sg_notify sg_notify;

/* Reads NOTIFY_SOCKET and the watchdog variables once, now. SG_EINTERNAL
 * when out of memory. Caller frees with sg_notify_free. */
SG_API int sg_notify_new(sg_notify **out) SG_MUST_CHECK;
/* Accepts NULL. */
SG_API void sg_notify_free(sg_notify *n);

/* Whether systemd listens (NOTIFY_SOCKET was set). */
SG_API bool sg_notify_enabled(const sg_notify *n);
/* The watchdog interval in microseconds; 0 when the watchdog is off. */
SG_API uint64_t sg_notify_watchdog_usec(const sg_notify *n);

/* READY=1 with STATUS=status (status may be NULL): start-up finished, or a
 * reload did. */
SG_API void sg_notify_ready(sg_notify *n, const char *status);
/* STATUS=status, only when it differs from the last one sent. */
SG_API void sg_notify_status(sg_notify *n, const char *status);
/* RELOADING=1 with MONOTONIC_USEC= (which Type=notify-reload wants); a
 * READY=1 must follow when the reload is done. */
SG_API void sg_notify_reloading(sg_notify *n);
/* STOPPING=1: the graceful shutdown begins. */
SG_API void sg_notify_stopping(sg_notify *n);
/* WATCHDOG=1 when the watchdog is on; nothing otherwise. */
SG_API void sg_notify_watchdog(sg_notify *n);

#endif
