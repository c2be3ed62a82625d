// sg_cel_re2: the RE2 adapter for CEL's matches(). The pattern is compiled
// for each call (a program's patterns are usually literals, but a pattern
// may be computed, and a per-program cache would need a lock for programs
// evaluated concurrently); RE2 bounds its own memory (max_mem) and runs in
// linear time. Errors become a short reason for the caller's message; no
// exception crosses into C (RE2 does not throw; std::bad_alloc is caught).
#include "sg_cel_re2.h"

#include <re2/re2.h>

#include <cstring>
#include <new>
#include <string>

extern "C" int sg_cel_re2_search(const char *pattern, size_t plen, const char *text, size_t tlen, char *err,
                                 size_t err_cap)
{
	try {
		RE2::Options opt;
		opt.set_log_errors(false);
		opt.set_max_mem(8 << 20);
		RE2 re(re2::StringPiece(pattern, plen), opt);
		if (!re.ok()) {
			if (err_cap) {
				std::snprintf(err, err_cap, "%s", re.error().c_str());
			}
			return -1;
		}
		return RE2::PartialMatch(re2::StringPiece(text, tlen), re) ? 1 : 0;
	} catch (const std::bad_alloc &) {
		if (err_cap) {
			std::snprintf(err, err_cap, "out of memory");
		}
		return -1;
	}
}
