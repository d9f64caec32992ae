/* SPDX-License-Identifier: Apache-2.0 */
/* The input format of fuzz_tree, shared with its seed generator (mkseeds).
 *
 * Byte 0, options: bit 0 preserve, bit 1 numeric_ids, bit 2 strip_setid,
 * bit 3 rename_top ("renamed"), bits 4-5 the umask (022, 077, 0, 027).
 * Then operations until the input ends; an operation cut short is dropped:
 *
 *   u8 op         low 4 bits: FUZZ_TREE_* below; high 4 bits: which of 16
 *                 attribute sets (mode, owner ids and names, times)
 *   u8 len, path  the entry's path, len bytes, as the wire would carry it
 *                 (any bytes: the checks are part of what is fuzzed)
 *   then, by op:
 *     FILE         u8 n, u8 extra: n bytes of contents, size n + extra % 4
 *     SYMLINK      u8 target: FUZZ_TREE_TARGETS picks one of the harness's
 *                  targets (never a real system path)
 *     HARDLINK     u8 len, path: the target's path
 *
 * FILE_OPEN opens a file and keeps it (at most FUZZ_TREE_OPEN at once);
 * COMMIT and ABORT finish the oldest one kept; what is still open at the
 * end is aborted. */
#ifndef PCOPY_FUZZ_TREE_H
#define PCOPY_FUZZ_TREE_H

enum fuzz_tree_op {
	FUZZ_TREE_MKDIR = 0,
	FUZZ_TREE_DIR_END = 1,
	FUZZ_TREE_FILE = 2,
	FUZZ_TREE_FILE_OPEN = 3,
	FUZZ_TREE_COMMIT = 4,
	FUZZ_TREE_ABORT = 5,
	FUZZ_TREE_SYMLINK = 6,
	FUZZ_TREE_FIFO = 7,
	FUZZ_TREE_SOCK = 8,
	FUZZ_TREE_CHR = 9,
	FUZZ_TREE_BLK = 10,
	FUZZ_TREE_HARDLINK = 11,
	FUZZ_TREE_OPS
};

#define FUZZ_TREE_OPT_PRESERVE 0x1u
#define FUZZ_TREE_OPT_NUMERIC 0x2u
#define FUZZ_TREE_OPT_STRIP 0x4u
#define FUZZ_TREE_OPT_RENAME 0x8u

/* Symlink targets by index (the target byte modulo their number):
 * "../outside", the sandbox's outside directory by its absolute path,
 * "..", ".", then relative names. */
#define FUZZ_TREE_TARGETS 8u

#define FUZZ_TREE_OPEN 8u

#endif
