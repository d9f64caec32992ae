/* SPDX-License-Identifier: Apache-2.0 */
/* entry: TEMPORARY stand-in for the tree entry of protocol version 3
 * (struct proto_entry and proto_check_relpath), which another branch adds
 * to src/wire/proto.{h,c}. It exists only so that the destination module
 * (dest.c) can be built and tested on its own; the integrator deletes this
 * file on merge and includes "wire/proto.h" instead. The names, values and
 * rules follow /work/notes/tree-contract.md, section 1.2. */
#ifndef PCOPY_ENTRY_H
#define PCOPY_ENTRY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sys/err.h"
#include "wire/proto.h"

enum proto_entry_type {
	PROTO_ENT_REG = 1,
	PROTO_ENT_DIR = 2,
	PROTO_ENT_SYMLINK = 3,
	PROTO_ENT_HARDLINK = 4,
	PROTO_ENT_FIFO = 5,
	PROTO_ENT_CHR = 6,
	PROTO_ENT_BLK = 7,
	PROTO_ENT_SOCK = 8,
	PROTO_ENT_DIR_END = 9,
};

#define PROTO_ENTF_SIZE_UNKNOWN 0x1u /* REG only: a stream, FILE_END gives the size */
#define PROTO_ENTF_LINKED 0x2u       /* REG only: later HARDLINK entries may name it */

#define PROTO_MAX_NAME 255u /* bytes in a user or group name */

struct proto_entry {
	uint32_t id;
	uint8_t type, flags;
	uint32_t mode, uid, gid;
	int64_t mtime_s;
	uint32_t mtime_ns;
	int64_t atime_s;
	uint32_t atime_ns;
	uint64_t size, rdev;
	uint32_t link_id;
	char path[PROTO_MAX_PATH + 1];
	char target[PROTO_MAX_PATH + 1];
	char user[PROTO_MAX_NAME + 1];
	char group[PROTO_MAX_NAME + 1];
};

/* TEMPORARY (the real one comes with proto.c). A relative path of len
 * bytes at p (not necessarily NUL-terminated): 1..PROTO_MAX_PATH bytes, no
 * NUL, not starting with '/', no empty component (no "//", no trailing
 * '/'), no component "." or "..", each component 1..255 bytes. Returns 0
 * or -PC_E_PROTO. Pure. */
static inline int proto_check_relpath(const char *p, size_t len)
{
	const char *end = p + len;

	if (len == 0 || len > PROTO_MAX_PATH || memchr(p, '\0', len) != NULL)
		return -PC_E_PROTO;
	for (;;) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t n = (size_t)((slash != NULL ? slash : end) - p);

		if (n == 0 || n > 255 || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.'))))
			return -PC_E_PROTO;
		if (slash == NULL)
			return 0;
		p = slash + 1;
	}
}

#endif
