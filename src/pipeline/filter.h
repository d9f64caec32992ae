// SPDX-License-Identifier: Apache-2.0
/* filter: which entries of a tree the copy leaves out (--exclude, --include,
 * --exclude-from; issue #13).
 *
 * A filter is an ordered list of rules, each "- PATTERN" (exclude) or
 * "+ PATTERN" (include), as REQUEST.filters carries them. An entry is tested
 * against the rules in order; the first whose pattern matches decides, and
 * an entry no rule matches is included. The source's walk leaves out an
 * excluded entry, and everything beneath an excluded directory (it does not
 * descend into it, so an include rule cannot bring back something inside).
 * The sink's --delete never removes an excluded name.
 *
 * The paths tested are the entries' wire paths (docs/PROTOCOL.md 4.6): the
 * first component is the name of the top-level source, as in rsync when
 * the source is named without a trailing '/'.
 *
 * Patterns, the subset of rsync's rules pcopy(1) documents:
 *   - a pattern ending in '/' matches only directories (the '/' is not part
 *     of what is matched);
 *   - a pattern starting with '/' is anchored: it must match the whole path
 *     from its first component;
 *   - otherwise a pattern with a '/' in it (or "**") must match a whole
 *     tail of the path that starts at a component ("b/c" matches "a/b/c",
 *     not "a/xb/c");
 *   - otherwise the pattern is matched against the last component only;
 *   - '*' matches any run of bytes but '/', "**" any run including '/', '?'
 *     one byte but '/', "[...]" one byte of a set ("[a-z]", "[!0-9]" or
 *     "[^0-9]" for its complement; never '/'), '\' makes the next byte
 *     literal. A '[' without its ']' is literal.
 * Bytes are compared as they are: no case folding, no locale.
 *
 * Cost. Matching simulates the pattern as an automaton: time O(pattern x
 * path) for one rule, whatever the pattern (no backtracking blow-up from a
 * hostile "*a*a*a*..."), memory O(pattern) on the stack. A filter is
 * immutable once built, and may then be used by any number of threads. */
#ifndef PCOPY_FILTER_H
#define PCOPY_FILTER_H

#include <stdbool.h>

struct filter;

/* An empty filter (excludes nothing). Returns NULL on ENOMEM. */
struct filter *filter_new(void);

/* Appends the rule "- PATTERN" or "+ PATTERN" (proto_filter_rule_ok's
 * shape: at most PROTO_MAX_FILTER bytes, a pattern of one byte or more).
 * Returns 0, -EINVAL for a rule of another shape, or -ENOMEM. */
int filter_add(struct filter *f, const char *rule);

/* Whether the rules leave out the entry at path (relative, as on the wire;
 * no leading or trailing '/'), a directory when is_dir. False for a NULL or
 * empty filter. */
bool filter_excludes(const struct filter *f, const char *path, bool is_dir);

/* The number of rules. */
unsigned filter_count(const struct filter *f);

/* Frees f. filter_free(NULL) is a no-op. */
void filter_free(struct filter *f);

#endif
