/* SPDX-License-Identifier: Apache-2.0 */
/* journal: the record -a keeps beside a partial file (journal.h). */
#include "pipeline/journal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "sys/platform.h"

static const char journal_magic[8] = { 'P', 'C', 'O', 'P', 'Y', 'J', 'R', 'N' };

/* Big-endian fields, n bytes. */
static void journal_put(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

static uint64_t journal_get(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static uint64_t journal_blocks(const struct journal_id *id)
{
	return id->size / id->block + (id->size % id->block != 0);
}

bool journal_fits(const struct journal_id *id)
{
	return id->block > 0 && journal_blocks(id) <= (uint64_t)JOURNAL_MAX_BITMAP * 8;
}

size_t journal_len(const struct journal_id *id)
{
	return JOURNAL_HDR_LEN + (size_t)((journal_blocks(id) + 7) / 8);
}

static void journal_header(const struct journal_id *id, uint8_t *h)
{
	memcpy(h, journal_magic, sizeof(journal_magic));
	journal_put(h + 8, JOURNAL_FORMAT, 4);
	journal_put(h + 12, id->block, 4);
	journal_put(h + 16, id->size, 8);
	journal_put(h + 24, (uint64_t)id->mtime_s, 8);
	journal_put(h + 32, id->mtime_ns, 4);
	journal_put(h + 36, 0, 4);
	journal_put(h + 40, XXH3_64bits(h, 40), 8);
}

enum journal_verdict journal_parse(const uint8_t *buf, size_t len, const struct journal_id *want,
				   uint8_t *bits, uint64_t *ndone, const char **why)
{
	uint64_t nblocks = journal_blocks(want);
	size_t nbytes = (size_t)((nblocks + 7) / 8);

	*ndone = 0;
	if (len < JOURNAL_HDR_LEN || memcmp(buf, journal_magic, sizeof(journal_magic)) != 0) {
		*why = "is not a pcopy journal";
		return JOURNAL_BAD;
	}
	if (journal_get(buf + 40, 8) != XXH3_64bits(buf, 40)) {
		*why = "has a damaged header";
		return JOURNAL_BAD;
	}
	if (journal_get(buf + 8, 4) != JOURNAL_FORMAT || journal_get(buf + 36, 4) != 0) {
		*why = "is of another format";
		return JOURNAL_BAD;
	}
	if (journal_get(buf + 12, 4) != want->block || journal_get(buf + 16, 8) != want->size ||
	    (int64_t)journal_get(buf + 24, 8) != want->mtime_s ||
	    journal_get(buf + 32, 4) != want->mtime_ns) {
		*why = "is of another version of the source (its size, time or the block size "
		       "changed)";
		return JOURNAL_STALE;
	}
	if (len != JOURNAL_HDR_LEN + nbytes) {
		*why = "has the wrong length";
		return JOURNAL_BAD;
	}
	memcpy(bits, buf + JOURNAL_HDR_LEN, nbytes);
	if (nblocks % 8 != 0 && (bits[nbytes - 1] >> (nblocks % 8)) != 0) {
		*why = "names blocks past the end of the file";
		return JOURNAL_BAD;
	}
	for (size_t i = 0; i < nbytes; i++)
		*ndone += (uint64_t)__builtin_popcount(bits[i]);
	return JOURNAL_OK;
}

static struct journal *journal_new(int fd, const struct journal_id *id)
{
	struct journal *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->fd = fd;
	j->nblocks = journal_blocks(id);
	j->bits = calloc(1, (size_t)((j->nblocks + 7) / 8) + 1);
	if (j->bits == NULL) {
		free(j);
		return NULL;
	}
	return j;
}

int journal_load(int fd, const struct journal_id *want, struct journal **out, const char **why)
{
	size_t len = journal_len(want);
	struct journal *j = NULL;
	struct stat st;
	uint8_t *buf = NULL;
	int ret;

	*out = NULL;
	if (fstat(fd, &st) != 0) {
		ret = -errno;
		goto fail;
	}
	if ((uint64_t)st.st_size != len) {
		*why = st.st_size < JOURNAL_HDR_LEN ? "is cut short" : "has the wrong length";
		ret = JOURNAL_BAD;
		/* Its header may still say it is of another version: */
		if (st.st_size < JOURNAL_HDR_LEN)
			goto fail;
		len = JOURNAL_HDR_LEN;
	}
	buf = malloc(len);
	j = journal_new(fd, want);
	if (buf == NULL || j == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	ssize_t got = platform_pread_full(fd, buf, len, 0);
	if (got < 0) {
		ret = (int)got;
		goto fail;
	}
	if ((size_t)got != len) {
		*why = "is cut short";
		ret = JOURNAL_BAD;
		goto fail;
	}
	/* A header alone (the length was wrong) is parsed to tell a stale
	 * journal from a damaged one; it never passes. */
	ret = (int)journal_parse(buf, (size_t)got, want, j->bits, &j->ndone, why);
	if ((uint64_t)st.st_size != journal_len(want) && ret == JOURNAL_OK) {
		*why = "has the wrong length";
		ret = JOURNAL_BAD;
	}
	if (ret != JOURNAL_OK)
		goto fail;
	free(buf);
	*out = j;
	return JOURNAL_OK;
fail:
	free(buf);
	if (j != NULL) {
		j->fd = -1;
		journal_free(j);
	}
	close(fd);
	return ret;
}

int journal_create(int fd, const struct journal_id *id, struct journal **out)
{
	uint8_t h[JOURNAL_HDR_LEN];
	struct journal *j = journal_new(fd, id);
	int ret = j == NULL ? -ENOMEM : 0;

	*out = NULL;
	journal_header(id, h);
	/* The bitmap's zeros first, then the header that makes it a journal:
	 * a run killed in between leaves one that is cut short or unnamed. */
	if (ret == 0 && ftruncate(fd, (off_t)journal_len(id)) != 0)
		ret = -errno;
	if (ret == 0)
		ret = platform_pwrite_full(fd, h, sizeof(h), 0);
	if (ret < 0) {
		if (j != NULL) {
			j->fd = -1;
			journal_free(j);
		}
		close(fd);
		return ret;
	}
	*out = j;
	return 0;
}

int journal_mark(struct journal *j, uint64_t idx)
{
	uint8_t bit = (uint8_t)(1u << (idx % 8));

	if (j->bits[idx / 8] & bit)
		return 0;
	j->bits[idx / 8] |= bit;
	j->ndone++;
	return platform_pwrite_full(j->fd, &j->bits[idx / 8], 1, JOURNAL_HDR_LEN + idx / 8);
}

bool journal_has(const struct journal *j, uint64_t idx)
{
	return idx < j->nblocks && (j->bits[idx / 8] >> (idx % 8)) & 1u;
}

void journal_free(struct journal *j)
{
	if (j == NULL)
		return;
	if (j->fd >= 0)
		close(j->fd);
	free(j->bits);
	free(j);
}

bool journal_name_reserved(const char *name)
{
	static const char *const tails[] = { ".pcopy-part", ".pcopy-jrnl" };
	size_t n = strlen(name), t = strlen(tails[0]);

	if (name[0] != '.' || n <= t + 1)
		return false;
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
		if (memcmp(name + n - t, tails[i], t) == 0)
			return true;
	return false;
}

void journal_names(const char *name, char *part, char *jrnl)
{
	size_t n = strlen(name);

	if (n <= 180) {
		snprintf(part, TMPFILE_NAME_CAP, ".%s.pcopy-part", name);
		snprintf(jrnl, TMPFILE_NAME_CAP, ".%s.pcopy-jrnl", name);
		return;
	}
	unsigned long long h = (unsigned long long)XXH3_64bits(name, n);
	snprintf(part, TMPFILE_NAME_CAP, ".%.180s~%016llx.pcopy-part", name, h);
	snprintf(jrnl, TMPFILE_NAME_CAP, ".%.180s~%016llx.pcopy-jrnl", name, h);
}
