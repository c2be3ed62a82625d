/*
 * Tests of sg_certdir (agent/sg_certdir.c): the files of one account and
 * their atomic switch (the ..data link, version folders that go away),
 * modes, removal, listing, crash leftovers, and hostile names that must
 * be refused before anything is made.
 */
#include "sg_certdir.h"
#include "sg_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[512]; /* a fresh folder per test */

static void fresh_base(const char *name)
{
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(base, sizeof(base), "%s/certdir-%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		exit(1);
	}
}

static sg_wlcert *cert_of(const char *tag, const char *serial)
{
	char k[64], c[64], r[64];
	snprintf(k, sizeof(k), "KEY %s\n", tag);
	snprintf(c, sizeof(c), "CHAIN %s\n", tag);
	snprintf(r, sizeof(r), "ROOT %s\n", tag);
	sg_wlcert *w = NULL;
	if (sg_wlcert_new(&w, strdup(k), strdup(c), strdup(r), 1000, 2000, serial) != SG_OK) {
		fprintf(stderr, "sg_wlcert_new: %s\n", sg_error_last()->msg);
		exit(1);
	}
	return w;
}

static char *slurp(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static bool text_is(const char *path, const char *want)
{
	const char *t = slurp(path);
	return t && !strcmp(t, want);
}

static bool link_is(const char *path, const char *want)
{
	char buf[512];
	ssize_t n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return !strcmp(buf, want);
}

/* Entries of a folder other than . and .., counted; those starting with
 * prefix when prefix is non-NULL. */
static int count_entries(const char *path, const char *prefix)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!prefix || !strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	}
	closedir(d);
	return n;
}

static void path_of(char *out, size_t cap, const char *rel)
{
	snprintf(out, cap, "%s/%s", base, rel);
}

static void check_account(const char *dir, const char *ns, const char *sa, const char *tag, const char *serial)
{
	char p[1024], want[128];
	snprintf(p, sizeof(p), "%s/%s/%s/..data", dir, ns, sa);
	char target[256];
	ssize_t n = readlink(p, target, sizeof(target) - 1);
	SG_CHECK(n > 0);
	if (n <= 0)
		return;
	target[n] = '\0';
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "..%s.", serial);
	SG_CHECK(!strncmp(target, prefix, strlen(prefix)) && strlen(target) == strlen(prefix) + 8);
	static const char *const names[3] = {"cert-chain.pem", "key.pem", "root-cert.pem"};
	static const char *const kinds[3] = {"CHAIN", "KEY", "ROOT"};
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s/%s/%s", dir, ns, sa, names[i]);
		snprintf(want, sizeof(want), "..data/%s", names[i]);
		SG_CHECK(link_is(p, want));
		snprintf(want, sizeof(want), "%s %s\n", kinds[i], tag);
		SG_CHECK(text_is(p, want));
		struct stat st;
		SG_CHECK(stat(p, &st) == 0 && S_ISREG(st.st_mode));
		SG_CHECK((st.st_mode & 07777) == (i == 1 ? 0600u : 0644u));
	}
	snprintf(p, sizeof(p), "%s/%s/%s", dir, ns, sa);
	SG_CHECK(count_entries(p, "..") == 2); /* ..data and one version */
	SG_CHECK(count_entries(p, NULL) == 5);
}

static void t_write_and_rewrite(void)
{
	fresh_base("write");
	char dir[640];
	path_of(dir, sizeof(dir), "out/certs"); /* made, with its parent */
	sg_wlcert *a = cert_of("one", "0a1b");
	SG_CHECK_OK(sg_certdir_write(dir, "default", "sleep", a));
	check_account(dir, "default", "sleep", "one", "0a1b");

	char p[1024], first[256] = "";
	snprintf(p, sizeof(p), "%s/default/sleep/..data", dir);
	ssize_t n = readlink(p, first, sizeof(first) - 1);
	SG_CHECK(n > 0);
	first[n > 0 ? n : 0] = '\0';

	/* A reader holding the old key open keeps reading the old version. */
	snprintf(p, sizeof(p), "%s/default/sleep/key.pem", dir);
	int held = open(p, O_RDONLY);
	SG_CHECK(held >= 0);

	sg_wlcert *b = cert_of("two", "ff00");
	SG_CHECK_OK(sg_certdir_write(dir, "default", "sleep", b));
	check_account(dir, "default", "sleep", "two", "ff00");
	snprintf(p, sizeof(p), "%s/default/sleep/%s", dir, first);
	struct stat st;
	SG_CHECK(lstat(p, &st) < 0 && errno == ENOENT); /* the previous version is gone */
	char buf[64] = "";
	SG_CHECK(held >= 0 && read(held, buf, sizeof(buf) - 1) > 0 && !strcmp(buf, "KEY one\n"));
	if (held >= 0)
		close(held);

	/* The same serial again: a new folder all the same. */
	SG_CHECK_OK(sg_certdir_write(dir, "default", "sleep", b));
	check_account(dir, "default", "sleep", "two", "ff00");

	/* Under a restrictive umask the modes are still exact. */
	mode_t old = umask(077);
	SG_CHECK_OK(sg_certdir_write(dir, "default", "sleep", a));
	umask(old);
	check_account(dir, "default", "sleep", "one", "0a1b");
	sg_wlcert_release(a);
	sg_wlcert_release(b);
}

/* The first write's three files appear at once, at the "..data" switch:
 * their names are made before it (dangling until then). Seen through a
 * switch that cannot happen (a folder where "..data_tmp" goes): the
 * names are there and none of them opens; once the obstacle is gone,
 * all three open. Made after the switch, a reader could find
 * cert-chain.pem without key.pem. */
static void t_first_write_appears_whole(void)
{
	fresh_base("whole");
	char dir[640], p[1024];
	path_of(dir, sizeof(dir), "d");
	snprintf(p, sizeof(p), "%s", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/ns", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/ns/sa", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/ns/sa/..data_tmp", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	sg_wlcert *a = cert_of("one", "01");
	SG_CHECK(sg_certdir_write(dir, "ns", "sa", a) < 0);
	static const char *const names[3] = {"cert-chain.pem", "key.pem", "root-cert.pem"};
	for (int i = 0; i < 3; i++) {
		struct stat st;
		snprintf(p, sizeof(p), "%s/ns/sa/%s", dir, names[i]);
		SG_CHECK(lstat(p, &st) == 0 && S_ISLNK(st.st_mode)); /* the name is there */
		SG_CHECK(stat(p, &st) < 0 && errno == ENOENT);       /* and opens nothing yet */
	}
	snprintf(p, sizeof(p), "%s/ns/sa/..data_tmp", dir);
	SG_CHECK(rmdir(p) == 0);
	SG_CHECK_OK(sg_certdir_write(dir, "ns", "sa", a));
	check_account(dir, "ns", "sa", "one", "01");
	sg_wlcert_release(a);
}

static void t_crash_leftovers(void)
{
	fresh_base("crash");
	char dir[640], p[1024];
	path_of(dir, sizeof(dir), "d");
	sg_wlcert *a = cert_of("one", "01");
	SG_CHECK_OK(sg_certdir_write(dir, "ns", "sa", a));
	/* What a crash between steps leaves: a half-written version folder
	 * and a ..data_tmp link. */
	snprintf(p, sizeof(p), "%s/ns/sa/..dead.00000000", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/ns/sa/..dead.00000000/key.pem", dir);
	FILE *f = fopen(p, "w");
	SG_CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "%s/ns/sa/..data_tmp", dir);
	SG_CHECK(symlink("..dead.00000000", p) == 0);
	/* And a file name that is a plain file instead of the link. */
	snprintf(p, sizeof(p), "%s/ns/sa/root-cert.pem", dir);
	SG_CHECK(unlink(p) == 0);
	f = fopen(p, "w");
	if (f)
		fclose(f);

	sg_wlcert *b = cert_of("two", "02");
	SG_CHECK_OK(sg_certdir_write(dir, "ns", "sa", b));
	check_account(dir, "ns", "sa", "two", "02");
	sg_wlcert_release(a);
	sg_wlcert_release(b);
}

static void t_remove(void)
{
	fresh_base("remove");
	char dir[640], p[1024];
	path_of(dir, sizeof(dir), "d");
	sg_wlcert *a = cert_of("one", "01");
	SG_CHECK_OK(sg_certdir_write(dir, "ns1", "sa1", a));
	SG_CHECK_OK(sg_certdir_write(dir, "ns1", "sa2", a));
	SG_CHECK_OK(sg_certdir_write(dir, "ns2", "sa1", a));

	SG_CHECK_OK(sg_certdir_remove(dir, "ns1", "sa1"));
	snprintf(p, sizeof(p), "%s/ns1/sa1", dir);
	struct stat st;
	SG_CHECK(lstat(p, &st) < 0 && errno == ENOENT);
	snprintf(p, sizeof(p), "%s/ns1", dir);
	SG_CHECK(count_entries(p, NULL) == 1); /* sa2 stays, and so does ns1 */
	check_account(dir, "ns1", "sa2", "one", "01");

	SG_CHECK_OK(sg_certdir_remove(dir, "ns2", "sa1"));
	snprintf(p, sizeof(p), "%s/ns2", dir);
	SG_CHECK(lstat(p, &st) < 0 && errno == ENOENT); /* the empty namespace folder goes too */
	SG_CHECK(count_entries(dir, NULL) == 1);

	/* Absent: not an error, at every level. */
	SG_CHECK_OK(sg_certdir_remove(dir, "ns2", "sa1"));
	SG_CHECK_OK(sg_certdir_remove(dir, "ns1", "nobody"));
	snprintf(p, sizeof(p), "%s/nothing-here", base);
	SG_CHECK_OK(sg_certdir_remove(p, "ns1", "sa1"));
	SG_CHECK(lstat(p, &st) < 0 && errno == ENOENT); /* remove makes nothing */

	/* Something not ours in the account's folder: it stays, and the
	 * error says where. */
	snprintf(p, sizeof(p), "%s/ns1/sa2/notes.txt", dir);
	FILE *f = fopen(p, "w");
	if (f)
		fclose(f);
	SG_CHECK_RC(sg_certdir_remove(dir, "ns1", "sa2"), SG_EINTERNAL);
	SG_CHECK_MSG("ns1/sa2");
	SG_CHECK(lstat(p, &st) == 0);
	snprintf(p, sizeof(p), "%s/ns1/sa2", dir);
	SG_CHECK(count_entries(p, NULL) == 1);
	sg_wlcert_release(a);
}

typedef struct seen {
	int n;
	char names[8][160];
} seen;

static void on_account(const char *ns, const char *sa, void *arg)
{
	seen *s = arg;
	if (s->n < 8)
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s/%s", ns, sa);
	s->n++;
}

static bool seen_has(const seen *s, const char *name)
{
	for (int i = 0; i < s->n && i < 8; i++)
		if (!strcmp(s->names[i], name))
			return true;
	return false;
}

static void t_list(void)
{
	fresh_base("list");
	char dir[640], p[1024];
	path_of(dir, sizeof(dir), "d");
	seen s = {0};
	SG_CHECK_OK(sg_certdir_list(dir, on_account, &s)); /* no folder yet */
	SG_CHECK(s.n == 0);

	sg_wlcert *a = cert_of("one", "01");
	SG_CHECK_OK(sg_certdir_write(dir, "ns1", "sa1", a));
	SG_CHECK_OK(sg_certdir_write(dir, "ns1", "sa.two", a));
	SG_CHECK_OK(sg_certdir_write(dir, "ns2", "sa1", a));
	/* Others' things: a folder without ..data, a file, a link to an
	 * account, a folder with a name no namespace has. */
	snprintf(p, sizeof(p), "%s/ns3/plain", dir);
	SG_CHECK(mkdir(p, 0755) < 0); /* ns3 does not exist */
	snprintf(p, sizeof(p), "%s/ns3", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/ns3/plain", dir);
	SG_CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/file", dir);
	FILE *f = fopen(p, "w");
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "%s/ns1/linked", dir);
	SG_CHECK(symlink("sa1", p) == 0);
	snprintf(p, sizeof(p), "%s/Upper", dir);
	SG_CHECK(mkdir(p, 0755) == 0);

	SG_CHECK_OK(sg_certdir_list(dir, on_account, &s));
	SG_CHECK(s.n == 3);
	SG_CHECK(seen_has(&s, "ns1/sa1"));
	SG_CHECK(seen_has(&s, "ns1/sa.two"));
	SG_CHECK(seen_has(&s, "ns2/sa1"));
	sg_wlcert_release(a);
}

static void t_hostile_names(void)
{
	fresh_base("hostile");
	char dir[640], long_name[301];
	path_of(dir, sizeof(dir), "d");
	memset(long_name, 'a', 300);
	long_name[300] = '\0';
	char label64[65];
	memset(label64, 'b', 64);
	label64[64] = '\0';
	const char *bad_ns[] = {"..", ".", "a/b", "", ".x", long_name, label64, "A", "a.b", "-a", "../../etc", NULL};
	const char *bad_sa[] = {"..", ".", "a/b", "", ".x", long_name, "a..b", "a.", "..data", "/abs", NULL};
	sg_wlcert *a = cert_of("one", "01");
	for (size_t i = 0; i < sizeof(bad_ns) / sizeof(bad_ns[0]); i++) {
		SG_CHECK_RC(sg_certdir_write(dir, bad_ns[i], "sa", a), SG_EINVAL);
		SG_CHECK_MSG("namespace");
		SG_CHECK_RC(sg_certdir_remove(dir, bad_ns[i], "sa"), SG_EINVAL);
	}
	for (size_t i = 0; i < sizeof(bad_sa) / sizeof(bad_sa[0]); i++) {
		SG_CHECK_RC(sg_certdir_write(dir, "ns", bad_sa[i], a), SG_EINVAL);
		SG_CHECK_MSG("service account");
		SG_CHECK_RC(sg_certdir_remove(dir, "ns", bad_sa[i]), SG_EINVAL);
	}
	/* A serial is part of a folder name: hex only. */
	sg_wlcert *odd = cert_of("odd", "../x");
	SG_CHECK_RC(sg_certdir_write(dir, "ns", "sa", odd), SG_EINVAL);
	SG_CHECK_MSG("serial");
	sg_wlcert_release(odd);
	SG_CHECK_RC(sg_certdir_write(dir, "ns", "sa", NULL), SG_EINVAL);
	/* Nothing was made, in the folder or beside it. */
	SG_CHECK(count_entries(base, NULL) == 0);

	/* A 253-byte subdomain is fine. */
	char sub[254];
	memset(sub, 'c', 253);
	sub[253] = '\0';
	for (int i = 60; i < 253; i += 61)
		sub[i] = '.';
	SG_CHECK_OK(sg_certdir_write(dir, "ns", sub, a));
	SG_CHECK(count_entries(base, NULL) == 1);
	SG_CHECK_OK(sg_certdir_remove(dir, "ns", sub));
	SG_CHECK(count_entries(dir, NULL) == 0);
	sg_wlcert_release(a);
}

static void t_identity_split(void)
{
	char ns[64], sa[254];
	SG_CHECK(sg_certdir_identity_split("spiffe://cluster.local/ns/default/sa/sleep", ns, sa));
	SG_CHECK(!strcmp(ns, "default") && !strcmp(sa, "sleep"));
	SG_CHECK(sg_certdir_identity_split("spiffe://td.example/ns/istio-system/sa/a.b-c", ns, sa));
	SG_CHECK(!strcmp(ns, "istio-system") && !strcmp(sa, "a.b-c"));

	char long_sa[400];
	snprintf(long_sa, sizeof(long_sa), "spiffe://cluster.local/ns/a/sa/%0300d", 0);
	const char *bad[] = {
	    NULL,
	    "",
	    "spiffe://cluster.local/ns/a/sa/b/extra",
	    "spiffe://cluster.local/ns/a/sa/b/",
	    "spiffe://cluster.local/ns/a/x/sa/b",
	    "spiffe://cluster.local/ns//sa/b",
	    "spiffe://cluster.local/ns/a/sa/",
	    "spiffe:///ns/a/sa/b",
	    "spiffe://cluster.local/ns/../sa/b",
	    "spiffe://cluster.local/ns/a/sa/..",
	    "spiffe://cluster.local/ns/a/sa/.x",
	    "spiffe://cluster.local/ns/a/b/sa/c",
	    "http://cluster.local/ns/a/sa/b",
	    "spiffe://cluster.local/sa/b/ns/a",
	    "spiffe://Cluster.local/ns/a/sa/b",
	    "spiffe://cluster.local/ns/a/sa/b?x=1",
	    "spiffe://cluster.local/ns/a/sa/b#f",
	    "spiffe://cluster.local/ns/A/sa/b",
	    "spiffe://cluster.local/x/ns/a/sa/b",
	    long_sa,
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bool ok = sg_certdir_identity_split(bad[i], ns, sa);
		SG_CHECK(!ok);
		if (ok)
			fprintf(stderr, "accepted: %s\n", bad[i]);
	}
}

SG_TEST_MAIN(SG_TEST(t_write_and_rewrite), SG_TEST(t_first_write_appears_whole), SG_TEST(t_crash_leftovers), SG_TEST(t_remove), SG_TEST(t_list),
             SG_TEST(t_hostile_names), SG_TEST(t_identity_split))
