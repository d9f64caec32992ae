/* SPDX-License-Identifier: Apache-2.0 */
/* testutil: small helpers shared by the unit tests. */
#ifndef PCOPY_TESTUTIL_H
#define PCOPY_TESTUTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int testutil_rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* Removes dir and everything below it, like rm -rf (no symlink is
 * followed). Returns 0 or -1. */
static inline int testutil_rm_rf(const char *dir)
{
	return nftw(dir, testutil_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes a fresh directory from tmpl (a mkdtemp template, rewritten in
 * place), a directory "root" in it, and returns root's O_DIRECTORY fd, or
 * -1 (nothing is left behind). The fixtures that need a served root. */
static inline int testutil_root(char *tmpl)
{
	char p[256];
	int fd = -1;

	if (mkdtemp(tmpl) == NULL)
		return -1;
	snprintf(p, sizeof(p), "%s/root", tmpl);
	if (mkdir(p, 0755) == 0)
		fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		(void)testutil_rm_rf(tmpl);
	return fd;
}

#endif
