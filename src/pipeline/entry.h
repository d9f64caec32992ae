// SPDX-License-Identifier: Apache-2.0
/* entry: one tree entry as it goes on the wire in ENTRIES (protocol
 * version 3, /work/notes/tree-contract.md section 1.2).
 *
 * temporary: moves to wire/proto.h with protocol version 3. It is here only
 * so that the walker can be built before proto.h gains these names; the
 * integrator deletes this file on merge and walk.h includes wire/proto.h
 * instead. Keep it to exactly the names and values of the contract. */
#ifndef PCOPY_ENTRY_H
#define PCOPY_ENTRY_H

#include <stdint.h>

#include "wire/proto.h"

#define PROTO_MAX_NAME 255u /* bytes in a user or group name, no NUL */

/* proto_entry.type */
enum proto_entry_type {
	PROTO_ENT_REG = 1,      /* regular file; its contents follow in blocks */
	PROTO_ENT_DIR = 2,      /* directory, in pre-order: before anything inside it */
	PROTO_ENT_SYMLINK = 3,  /* symbolic link; target is its text */
	PROTO_ENT_HARDLINK = 4, /* another name for the earlier REG link_id */
	PROTO_ENT_FIFO = 5,
	PROTO_ENT_CHR = 6,      /* character device; rdev */
	PROTO_ENT_BLK = 7,      /* block device; rdev */
	PROTO_ENT_SOCK = 8,
	PROTO_ENT_DIR_END = 9,  /* same path as its DIR, after everything inside it */
};

/* proto_entry.flags */
#define PROTO_ENTF_SIZE_UNKNOWN 0x1u /* REG only: a stream; FILE_END gives the size */
#define PROTO_ENTF_LINKED 0x2u       /* REG only: later HARDLINK entries may name this id */

struct proto_entry {
	uint32_t id;            /* position in the session's entry sequence, from 0 */
	uint8_t type;           /* enum proto_entry_type */
	uint8_t flags;          /* PROTO_ENTF_* */
	uint32_t mode;          /* permission bits, <= 07777 */
	uint32_t uid;
	uint32_t gid;
	int64_t mtime_s;
	uint32_t mtime_ns;      /* < 1e9 */
	int64_t atime_s;
	uint32_t atime_ns;      /* < 1e9 */
	uint64_t size;          /* REG: bytes (0 with SIZE_UNKNOWN); others: 0 */
	uint64_t rdev;          /* CHR/BLK: device number (Linux dev_t); others: 0 */
	uint32_t link_id;       /* HARDLINK: id of an earlier LINKED REG; others: 0 */
	char path[PROTO_MAX_PATH + 1];   /* relative; first component = the source's name */
	char target[PROTO_MAX_PATH + 1]; /* SYMLINK: the link text; others: empty */
	char user[PROTO_MAX_NAME + 1];   /* owner's name; empty: unknown */
	char group[PROTO_MAX_NAME + 1];  /* group's name; empty: unknown */
};

#endif
