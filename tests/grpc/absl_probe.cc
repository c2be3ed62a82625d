// absl_probe (contract: absl_probe.h).
#include "absl_probe.h"

#include <absl/synchronization/mutex.h>

extern "C" void absl_probe_inverted_order(void)
{
	absl::Mutex a, b;
	a.Lock();
	b.Lock();
	b.Unlock();
	a.Unlock();
	b.Lock();
	a.Lock();
	a.Unlock();
	b.Unlock();
}
