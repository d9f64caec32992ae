/* SPDX-License-Identifier: Apache-2.0 */
/* datamemo: the hosts whose direct data connections failed lately. The
 * next copy there with --data-via auto goes through ssh at once, as
 * --data-via ssh does (the streams start with the control connection), and
 * says so, instead of losing a race again (datapath.h).
 *
 * A hint, kept per user in ${XDG_CACHE_HOME:-$HOME/.cache}/pcopy/
 * direct-failed (directories 0700, file 0600): one line per host,
 * "<64 hex digits> <unix seconds>", the digits an HMAC-SHA256 of the
 * host's key (host names are not stored in clear), at most DATAMEMO_MAX
 * lines, newest kept. An entry holds DATAMEMO_TTL_S from the fallback that
 * wrote it; copies that went through ssh because of it do not renew it,
 * so the race runs again after that, and a firewall that opened is found
 * within the hour; a race that direct connections win removes the entry.
 * Nothing here fails a copy: no home, a read-only or full disk, a corrupt
 * file, each only makes it forget, said at debug level (-vv). Lines that
 * are not of the form above are dropped. */
#ifndef PCOPY_DATAMEMO_H
#define PCOPY_DATAMEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DATAMEMO_TTL_S 3600u
#define DATAMEMO_MAX 256u
#define DATAMEMO_MAX_FILE 65536u /* bytes read of the file at most */

/* Whether key's direct data connections failed within the TTL before now
 * (unix seconds); if so, *age (may be NULL) receives how many seconds ago. */
bool datamemo_recall(const char *key, uint64_t now, uint64_t *age);

/* Records that key's direct data connections failed at now (failed), or
 * that one succeeded (!failed: the entry goes). */
void datamemo_note(const char *key, bool failed, uint64_t now);

/* The file's parser, for tests: whether text (the file's contents, NUL-
 * terminated) holds an entry with the 64 hex digits id newer than
 * now - DATAMEMO_TTL_S; its age in *age (may be NULL). */
bool datamemo_find(const char *text, const char *id, uint64_t now, uint64_t *age);

#endif
