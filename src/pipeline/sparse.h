/* SPDX-License-Identifier: Apache-2.0 */
/* sparse: writes bytes into a file at an offset, leaving its pages of
 * zeros as holes (a new file reads zeros there), or, in a file that holds
 * other bytes already (-a's partial file, --inplace, a copy, a device),
 * punching them, or writing zeros where the file system cannot punch. Any
 * thread. */
#ifndef PCOPY_SPARSE_H
#define PCOPY_SPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes len bytes at p into fd at offset at, but its pages of zeros:
 * left alone, or with fill made zeros (sparse_zero). Returns 0 or
 * -errno. */
int sparse_pwrite(int fd, const uint8_t *p, size_t len, uint64_t at, bool fill);

/* Makes len bytes of fd at off zeros, as a hole where the file system can
 * punch one. Returns 0 or -errno. */
int sparse_zero(int fd, uint64_t off, size_t len);

/* What sparse_hole knows of a file's holes: its data begins at data or
 * later from from on (UINT64_MAX: none), and it is size bytes long (if
 * sized). Zeroed to start. */
struct sparse_scan {
	uint64_t from, data, size;
	bool sized;
};

/* Whether [off, off + len) of fd is a hole inside the file (len > 0): no
 * data there (SEEK_DATA) and not past its end, where a block is not there
 * at all. sc saves system calls for blocks asked in increasing order (a
 * file system without SEEK_DATA has data everywhere). The file's size is
 * the one it had at the first hole; a file that shrinks meanwhile reads
 * short where it is read. The fd's offset moves: use pread and pwrite. */
bool sparse_hole(int fd, uint64_t off, uint64_t len, struct sparse_scan *sc);

#endif
