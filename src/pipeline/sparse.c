/* SPDX-License-Identifier: Apache-2.0 */
/* sparse: writing with holes (sparse.h). */
#include "pipeline/sparse.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/encoder.h"
#include "sys/platform.h"

#define SPARSE_PAGE 4096u

/* True if the page at p (or what is left of it, len bytes) is all zeros. */
static bool sparse_zero_page(const uint8_t *p, size_t len)
{
	return encoder_is_zero(p, len < SPARSE_PAGE ? len : SPARSE_PAGE);
}

int sparse_zero(int fd, uint64_t off, size_t len)
{
	static const uint8_t zeros[65536];
	int ret = 0;

	if (len == 0 || fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				  (off_t)len) == 0)
		return 0;
	/* (a character device has no holes: ENODEV) */
	if (errno != EOPNOTSUPP && errno != ENOSYS && errno != ENODEV)
		return -errno;
	for (size_t done = 0; ret == 0 && done < len; done += sizeof(zeros))
		ret = platform_pwrite_full(fd, zeros, len - done < sizeof(zeros) ? len - done
							: sizeof(zeros), off + done);
	return ret;
}

int sparse_pwrite(int fd, const uint8_t *p, size_t len, uint64_t at, bool fill)
{
	int ret;

	/* Pages of zeros are not written, so that a sparse source stays
	 * sparse finer than a block. */
	for (size_t off = 0; off < len;) {
		size_t run = 0, zero = off;
		while (off < len && sparse_zero_page(p + off, len - off))
			off += SPARSE_PAGE < len - off ? SPARSE_PAGE : len - off;
		if (fill && (ret = sparse_zero(fd, at + zero, off - zero)) < 0)
			return ret;
		while (off + run < len && !sparse_zero_page(p + off + run, len - off - run))
			run += SPARSE_PAGE < len - off - run ? SPARSE_PAGE : len - off - run;
		ret = run > 0 ? platform_pwrite_full(fd, p + off, run, at + off) : 0;
		if (ret < 0)
			return ret;
		off += run;
	}
	return 0;
}

bool sparse_hole(int fd, uint64_t off, uint64_t len, struct sparse_scan *sc)
{
	if (off < sc->from || sc->data <= off) {
		off_t d = lseek(fd, (off_t)off, SEEK_DATA);
		sc->from = off;
		sc->data = d >= 0 ? (uint64_t)d : errno == ENXIO ? UINT64_MAX : off;
	}
	if (sc->data < off + len)
		return false;
	if (!sc->sized) {
		struct stat st;
		if (fstat(fd, &st) != 0)
			return false;
		sc->size = (uint64_t)st.st_size;
		sc->sized = true;
	}
	return off + len <= sc->size;
}
