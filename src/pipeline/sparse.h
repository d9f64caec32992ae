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

#endif
