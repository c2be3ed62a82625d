/*
 * Tests for sg_strbuf: appends and the NUL, an empty builder, the bound
 * (a fit to the byte, one byte over, a refused add that leaves the text as
 * it was and a later add that still fits), the flags staying set, printf,
 * take and free, and growth well past the first allocation.
 */
#include "sg_strbuf.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

static void t_append(void)
{
	sg_strbuf b = {0};
	SG_CHECK(b.p == NULL && b.len == 0);
	SG_CHECK(sg_strbuf_puts(&b, "abc"));
	SG_CHECK(sg_strbuf_putc(&b, '-'));
	SG_CHECK(sg_strbuf_add(&b, "xyz", 2));
	SG_CHECK(sg_strbuf_add(&b, NULL, 0));
	SG_CHECK(sg_strbuf_printf(&b, "[%d|%s]", 42, "q"));
	SG_CHECK(b.len == 12 && strcmp(b.p, "abc-xy[42|q]") == 0);
	SG_CHECK(!sg_strbuf_failed(&b));
	/* Bytes, not strings: a NUL inside is kept and counted. */
	SG_CHECK(sg_strbuf_add(&b, "a\0b", 3));
	SG_CHECK(b.len == 15 && memcmp(b.p + 12, "a\0b", 4) == 0);
	sg_strbuf_free(&b);
	SG_CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
}

static void t_empty(void)
{
	sg_strbuf b = {.max = 8};
	SG_CHECK(sg_strbuf_add(&b, "", 0)); /* even nothing leaves a string */
	SG_CHECK(b.p && b.p[0] == '\0' && b.len == 0);
	sg_strbuf_free(&b);
	sg_strbuf e = {0};
	char *s = sg_strbuf_take(&e);
	SG_CHECK(s && strcmp(s, "") == 0);
	free(s);
	SG_CHECK(e.p == NULL);
}

static void t_bound(void)
{
	sg_strbuf b = {.max = 5};
	SG_CHECK(sg_strbuf_puts(&b, "abcde")); /* exactly max */
	SG_CHECK(!sg_strbuf_failed(&b) && b.len == 5 && b.cap <= 6);
	SG_CHECK(!sg_strbuf_putc(&b, 'f')); /* one past */
	SG_CHECK(b.overflow && !b.oom && sg_strbuf_failed(&b));
	SG_CHECK(b.len == 5 && strcmp(b.p, "abcde") == 0); /* unchanged */
	SG_CHECK(sg_strbuf_add(&b, "", 0));                /* what still fits is taken */
	SG_CHECK(b.overflow);                              /* and the flag stays */
	SG_CHECK(!sg_strbuf_printf(&b, "%d", 7));
	SG_CHECK(b.len == 5 && strcmp(b.p, "abcde") == 0);
	/* A refused add in the middle: a later one that fits goes on. */
	sg_strbuf c = {.max = 6};
	SG_CHECK(sg_strbuf_puts(&c, "ab"));
	SG_CHECK(!sg_strbuf_puts(&c, "cdefgh"));
	SG_CHECK(sg_strbuf_puts(&c, "cd"));
	SG_CHECK(strcmp(c.p, "abcd") == 0 && c.overflow);
	/* take refuses a failed builder and empties it, keeping max. */
	SG_CHECK(sg_strbuf_take(&c) == NULL);
	SG_CHECK(c.p == NULL && c.len == 0 && !c.overflow && c.max == 6);
	SG_CHECK(sg_strbuf_puts(&c, "123456") && !sg_strbuf_putc(&c, '7'));
	sg_strbuf_free(&c);
	SG_CHECK(c.max == 6 && !c.overflow);
	sg_strbuf_free(&b);
	/* A single add larger than max is refused however large. */
	sg_strbuf d = {.max = 3};
	SG_CHECK(!sg_strbuf_add(&d, "abcd", (size_t)-1 / 2));
	SG_CHECK(d.overflow && d.len == 0);
	sg_strbuf_free(&d);
}

static void t_printf(void)
{
	sg_strbuf b = {.first = 4};
	char big[1000];
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	SG_CHECK(sg_strbuf_printf(&b, "<%s>", big)); /* longer than any first buffer */
	SG_CHECK(b.len == 1001 && b.p[0] == '<' && b.p[1000] == '>' && b.p[1001] == '\0');
	SG_CHECK(sg_strbuf_printf(&b, "%s", ""));
	SG_CHECK(b.len == 1001);
	sg_strbuf_free(&b);
	sg_strbuf c = {.max = 4};
	SG_CHECK(sg_strbuf_printf(&c, "%04u", 12u) && strcmp(c.p, "0012") == 0);
	SG_CHECK(!sg_strbuf_printf(&c, "%u", 1u) && c.len == 4);
	sg_strbuf_free(&c);
}

static void t_take_and_grow(void)
{
	sg_strbuf b = {.first = 1};
	for (int i = 0; i < 10000; i++)
		SG_CHECK(sg_strbuf_putc(&b, (char)('a' + i % 26)));
	SG_CHECK(b.len == 10000 && b.cap >= 10001 && strlen(b.p) == 10000);
	SG_CHECK(b.p[9999] == (char)('a' + 9999 % 26));
	char *s = sg_strbuf_take(&b);
	SG_CHECK(s && strlen(s) == 10000 && s[0] == 'a' && s[25] == 'z');
	SG_CHECK(b.p == NULL && b.len == 0 && b.first == 1);
	free(s);
	/* Growth stops at max + 1 bytes. */
	sg_strbuf c = {.max = 100, .first = 64};
	char block[100];
	memset(block, 'q', sizeof(block));
	SG_CHECK(sg_strbuf_add(&c, block, 70) && sg_strbuf_add(&c, block, 30));
	SG_CHECK(c.len == 100 && c.cap == 101);
	sg_strbuf_free(&c);
}

SG_TEST_MAIN(SG_TEST(t_append), SG_TEST(t_empty), SG_TEST(t_bound), SG_TEST(t_printf), SG_TEST(t_take_and_grow))
