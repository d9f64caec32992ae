/* SPDX-License-Identifier: Apache-2.0 */
/* verify: a file's digest from its blocks, and from the disk. */
#include "pipeline/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sys/fault.h"
#include "wire/proto.h"

uint64_t verify_mix(uint64_t index, uint64_t checksum)
{
	uint8_t b[16];

	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(index >> (56 - 8 * i));
		b[8 + i] = (uint8_t)(checksum >> (56 - 8 * i));
	}
	return proto_checksum(b, sizeof(b));
}

uint64_t verify_zeros(size_t len)
{
	void *z = calloc(1, len ? len : 1);
	uint64_t c;

	if (z == NULL)
		return 0; /* a digest that cannot match: the file then fails */
	c = proto_checksum(z, len);
	free(z);
	return c;
}

int verify_read_back(int fd, uint64_t size, uint32_t block, uint64_t *digest)
{
	size_t cap = size < block ? (size_t)size : block;
	uint8_t *buf = malloc(cap ? cap : 1);
	uint64_t sum = 0, off = 0;
	int ret = 0;

	if (buf == NULL)
		return -ENOMEM;
	if (fdatasync(fd) != 0) {
		ret = -errno;
		goto out;
	}
	if (fault_fire(FAULT_SINK_SLOW)) {
		struct timespec slow = { .tv_sec = 3 };
		while (nanosleep(&slow, &slow) != 0 && errno == EINTR)
			;
	}
	/* Advice, not a promise: a file system without a disk of its own
	 * (tmpfs) keeps its pages; the read is then what it has. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	for (uint64_t idx = 0; off < size; idx++) {
		size_t want = size - off < cap ? (size_t)(size - off) : cap;
		ssize_t n;

		do
			n = pread(fd, buf, want, (off_t)off);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			ret = -errno;
			goto out;
		}
		if ((size_t)n != want) {
			ret = -EIO; /* shorter than written */
			goto out;
		}
		if (idx == 0 && fault_fire(FAULT_SINK_VERIFY))
			buf[0] ^= 0xff;
		sum += verify_mix(idx, proto_checksum(buf, want));
		off += want;
	}
	*digest = sum;
out:
	free(buf);
	return ret;
}
