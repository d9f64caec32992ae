/* testutil: small helpers shared by the unit tests. */
#ifndef PCOPY_TESTUTIL_H
#define PCOPY_TESTUTIL_H

#include <ftw.h>
#include <stdio.h>
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

#endif
