/* SPDX-License-Identifier: Apache-2.0 */
/* datamemo: the hosts whose direct data connections failed lately, so that
 * the next copy there with --data-via auto starts its streams through ssh
 * together with the control connection, instead of after a race that it
 * lost before (datapath.h). The race still runs: a direct connection that
 * succeeds wins, and the host is forgotten.
 *
 * A hint, kept per user in ${XDG_CACHE_HOME:-$HOME/.cache}/pcopy/
 * direct-failed (directories 0700, file 0600): one line per host,
 * "<64 hex digits> <unix seconds>", the digits an HMAC-SHA256 of the
 * host's key (host names are not stored in clear), at most DATAMEMO_MAX
 * lines, newest kept. An entry holds DATAMEMO_TTL_S from the fallback that
 * wrote it; a copy that went through ssh because of the entry does not
 * renew it, so a host whose firewall opened is raced afresh within a day
 * even where ssh keeps winning. Nothing here fails a copy: no home, a
 * read-only or full disk, a corrupt file, each only makes it forget, said
 * at debug level (-vv). Lines that are not of the form above are dropped. */
#ifndef PCOPY_DATAMEMO_H
#define PCOPY_DATAMEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DATAMEMO_TTL_S 86400u
#define DATAMEMO_MAX 256u
#define DATAMEMO_MAX_FILE 65536u /* bytes read of the file at most */

/* Whether key's direct data connections failed within the TTL before now
 * (unix seconds). */
bool datamemo_recall(const char *key, uint64_t now);

/* Records that key's direct data connections failed at now (failed), or
 * that one succeeded (!failed: the entry goes). */
void datamemo_note(const char *key, bool failed, uint64_t now);

/* The file's parser, for tests: whether text (the file's contents, NUL-
 * terminated) holds an entry with the 64 hex digits id newer than
 * now - DATAMEMO_TTL_S. */
bool datamemo_find(const char *text, const char *id, uint64_t now);

#endif
