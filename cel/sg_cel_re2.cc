// sg_cel_re2: the RE2 adapter for CEL's matches(). A constant pattern is
// compiled once, when its program is (sg_cel_re2_new), and shared by the
// threads that evaluate the program; a computed one is compiled for each
// call (a cache would need a lock). RE2 bounds its own memory (max_mem) and
// runs in linear time. Errors become a short reason for the caller's message; no
// exception crosses into C (RE2 does not throw; std::bad_alloc is caught).
#include "sg_cel_re2.h"

#include <re2/re2.h>

#include <cstring>
#include <new>
#include <string>

struct sg_cel_re2 {
	RE2 re;
	sg_cel_re2(const char *p, size_t n, const RE2::Options &o) : re(re2::StringPiece(p, n), o)
	{
	}
};

static RE2::Options options()
{
	RE2::Options opt;
	opt.set_log_errors(false);
	opt.set_max_mem(8 << 20);
	return opt;
}

extern "C" sg_cel_re2 *sg_cel_re2_new(const char *pattern, size_t plen, char *err, size_t err_cap)
{
	try {
		sg_cel_re2 *r = new sg_cel_re2(pattern, plen, options());
		if (!r->re.ok()) {
			if (err_cap) {
				std::snprintf(err, err_cap, "%s", r->re.error().c_str());
			}
			delete r;
			return nullptr;
		}
		return r;
	} catch (const std::bad_alloc &) {
		if (err_cap) {
			std::snprintf(err, err_cap, "out of memory");
		}
		return nullptr;
	}
}

extern "C" int sg_cel_re2_match(const sg_cel_re2 *r, const char *text, size_t tlen)
{
	return RE2::PartialMatch(re2::StringPiece(text, tlen), r->re) ? 1 : 0;
}

extern "C" void sg_cel_re2_free(sg_cel_re2 *r)
{
	delete r;
}

extern "C" int sg_cel_re2_search(const char *pattern, size_t plen, const char *text, size_t tlen, char *err,
                                 size_t err_cap)
{
	try {
		RE2 re(re2::StringPiece(pattern, plen), options());
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
