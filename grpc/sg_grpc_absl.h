/*
 * sg_grpc_absl: the one setting signet makes in Abseil, the library gRPC
 * core takes its locks with (private to the gRPC adapter, sg_grpc*.c; the
 * shim is C++, sg_grpc_absl.cc).
 *
 * Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
 * detection on, in its aborting mode: a lock order seen both ways is taken
 * for a potential deadlock and the process dies ("dying due to potential
 * deadlock"), whether or not the two could ever meet. Release builds of
 * Abseil and gRPC (NDEBUG) compile the check out, and a CA must not die of
 * a deadlock that is only possible. It also costs every lock: each one
 * records the order in a graph shared by the whole process, under one
 * global lock, and each mutex destroyed is taken out of it (two nested
 * mutexes locked and unlocked: ~80 ns with it, ~24 ns without, on the
 * 2-vCPU machine of perf/README.md; signetd's CPU per certificate did not
 * move measurably there, section 13). sg_grpc_absl_quiet turns it off.
 *
 * Call it before grpc_init; it may be called any number of times, from any
 * thread. It does not allocate and cannot fail.
 */
#ifndef SG_GRPC_ABSL_H
#define SG_GRPC_ABSL_H

#ifdef __cplusplus
extern "C" {
#endif

void sg_grpc_absl_quiet(void);

#ifdef __cplusplus
}
#endif

#endif
