// sg_grpc_absl: absl::Mutex deadlock detection off (contract and why:
// sg_grpc_absl.h). The mode is one process-wide atomic that Abseil reads
// on each lock; setting it again is harmless, so every path into gRPC
// (server, client, channel) sets it before its grpc_init.
#include "sg_grpc_absl.h"

#include <absl/synchronization/mutex.h>

extern "C" void sg_grpc_absl_quiet(void)
{
	absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}
