/* SPDX-License-Identifier: Apache-2.0 */
/* verify: the digest -e (--verify) compares. A file's digest is the sum,
 * modulo 2^64, of one mix per block: XXH3-64 of the block's index and its
 * checksum (proto_checksum of its raw bytes, the checksum its block header
 * carried). The sum does not care in which order the blocks arrive, so the
 * sink adds each block's share as it writes it, and then reads the file
 * back from the disk and computes the same sum from what is there. Pure but
 * for verify_read_back, which reads one file. */
#ifndef PCOPY_VERIFY_H
#define PCOPY_VERIFY_H

#include <stddef.h>
#include <stdint.h>

/* Block index's share of a file's digest, the block's checksum given. */
uint64_t verify_mix(uint64_t index, uint64_t checksum);

/* proto_checksum of len zero bytes: the checksum of a hole block. */
uint64_t verify_zeros(size_t len);

/* Flushes fd's file to the disk, drops it from the page cache (so that
 * what follows reads the disk, where a file system keeps one), reads its
 * size bytes back in blocks of block bytes and puts their digest in
 * *digest. Returns 0, or -errno (a read that ends early: -EIO). */
int verify_read_back(int fd, uint64_t size, uint32_t block, uint64_t *digest);

#endif
