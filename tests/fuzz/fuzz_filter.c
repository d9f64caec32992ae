/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for filter: a filter rule as a hostile client puts it in
 * REQUEST.filters, which a daemon's source compiles and matches against
 * every path it walks.
 *
 * Input: a flags byte (bit 0: the paths are directories), then lines split
 * at '\n': the first is the pattern, each later one a path to test (cut at
 * PROTO_MAX_PATH bytes). The pattern longer than the wire allows, or empty,
 * must be refused by filter_add with -EINVAL; otherwise "- PATTERN" must
 * compile, and for every path the filter ["+ PATTERN", "- **"] must exclude
 * exactly the paths that ["- PATTERN"] does not (the first matching rule
 * decides; "**" matches every non-empty path). The matcher's cost is
 * O(pattern x path), so libFuzzer's -timeout also guards against a pattern
 * that would make a backtracking matcher explode. Anything else aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/filter.h"
#include "wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* The next line of data[*at..size), NUL-terminated in out (cap bytes, cut
 * short); NULL when none is left. */
static const char *fuzz_line(const uint8_t *data, size_t size, size_t *at, char *out, size_t cap)
{
	if (*at >= size)
		return NULL;
	const uint8_t *p = data + *at, *nl = memchr(p, '\n', size - *at);
	size_t n = nl != NULL ? (size_t)(nl - p) : size - *at;

	*at += n + (nl != NULL);
	n = n < cap - 1 ? n : cap - 1;
	memcpy(out, p, n);
	out[n] = '\0';
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char rule[PROTO_MAX_FILTER + 64], incl[PROTO_MAX_FILTER + 64];
	static char path[PROTO_MAX_PATH + 1];
	struct filter *ex, *in;
	size_t at = 1;

	if (size < 1)
		return 0;
	bool is_dir = data[0] & 1;
	memcpy(rule, "- ", 2);
	if (fuzz_line(data, size, &at, rule + 2, sizeof(rule) - 2) == NULL)
		return 0;
	size_t plen = strlen(rule + 2);
	ex = filter_new();
	in = filter_new();
	fuzz_require(ex != NULL && in != NULL);
	int ret = filter_add(ex, rule);
	if (plen == 0 || plen + 2 > PROTO_MAX_FILTER) {
		fuzz_require(ret == -EINVAL);
		fuzz_require(filter_count(ex) == 0);
	} else {
		fuzz_require(ret == 0);
		memcpy(incl, rule, plen + 3);
		incl[0] = '+';
		fuzz_require(filter_add(in, incl) == 0);
		fuzz_require(filter_add(in, "- **") == 0);
		fuzz_require(filter_count(in) == 2);
		while (fuzz_line(data, size, &at, path, sizeof(path)) != NULL) {
			if (path[0] == '\0')
				continue;
			bool x = filter_excludes(ex, path, is_dir);
			fuzz_require(filter_excludes(in, path, is_dir) == !x);
		}
	}
	filter_free(ex);
	filter_free(in);
	return 0;
}
