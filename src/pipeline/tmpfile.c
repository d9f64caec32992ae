/* SPDX-License-Identifier: Apache-2.0 */
/* tmpfile: O_TMPFILE inodes and ".NAME.pcopy-XXXXXX" names. */
#include "pipeline/tmpfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "sys/crypto.h"

/* How many taken temporary names to step over before giving up. */
#define TMPFILE_TRIES 100

/* linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; once it has said ENOENT
 * for that reason, go through /proc/self/fd only. */
static atomic_bool tmpfile_no_empty_path;

int tmpfile_name(const char *name, char *out)
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	uint8_t rnd[6];
	char sfx[7];
	int ret = crypto_random(rnd, sizeof(rnd));

	if (ret < 0)
		return ret;
	for (int i = 0; i < 6; i++)
		sfx[i] = digits[rnd[i] % 36];
	sfx[6] = '\0';
	snprintf(out, TMPFILE_NAME_CAP, ".%.200s.pcopy-%s", name, sfx);
	return 0;
}

int tmpfile_open(int dirfd, const char *name, char *tmp)
{
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int ret = -EEXIST;

	tmp[0] = '\0';
	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	for (int attempt = 0; attempt < TMPFILE_TRIES && ret == -EEXIST; attempt++) {
		ret = tmpfile_name(name, tmp);
		if (ret < 0)
			break;
		fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		ret = -errno;
	}
	tmp[0] = '\0';
	return ret;
}

int tmpfile_link(int fd, int dirfd, const char *link)
{
	char proc[64];
	int err;

	if (!atomic_load_explicit(&tmpfile_no_empty_path, memory_order_relaxed)) {
		if (linkat(fd, "", dirfd, link, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno == EEXIST)
			return -EEXIST;
	}
	err = errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, dirfd, link, AT_SYMLINK_FOLLOW) != 0)
		return -errno;
	/* AT_EMPTY_PATH failed only for want of CAP_DAC_READ_SEARCH. */
	if (err == ENOENT)
		atomic_store_explicit(&tmpfile_no_empty_path, true, memory_order_relaxed);
	return 0;
}

int tmpfile_link_tmp(int fd, int dirfd, const char *name, char *tmp)
{
	int ret = -EEXIST;

	for (int attempt = 0; attempt < TMPFILE_TRIES && ret == -EEXIST; attempt++) {
		ret = tmpfile_name(name, tmp);
		if (ret == 0)
			ret = tmpfile_link(fd, dirfd, tmp);
	}
	if (ret < 0)
		tmp[0] = '\0';
	return ret;
}
