/* absl_probe: takes two absl::Mutex in one order and then in the other, in
 * this process, as gRPC core's own locks could be taken. Returns; or, while
 * Abseil's deadlock detection is in its aborting mode, the process dies of
 * SIGABRT ("potential deadlock"). For test_absl.c. */
#ifndef ABSL_PROBE_H
#define ABSL_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

void absl_probe_inverted_order(void);

#ifdef __cplusplus
}
#endif

#endif
