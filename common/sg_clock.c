/* Sleeping helper kept out of line so headers need no signal handling. */
#include "sg_clock.h"

#include <errno.h>

void sg_sleep_ms(unsigned ms)
{
	struct timespec req = {ms / 1000, (long)(ms % 1000) * 1000000L}, rem;
	while (nanosleep(&req, &rem) != 0 && errno == EINTR)
		req = rem;
}
