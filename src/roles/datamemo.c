// SPDX-License-Identifier: Apache-2.0
/* datamemo: the hosts whose direct data connections failed (datamemo.h). */
#include "roles/datamemo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sys/crypto.h"
#include "sys/log.h"

#define DATAMEMO_ID 64 /* hex digits */
#define DATAMEMO_LINE (DATAMEMO_ID + 1 + 20 + 1)

/* The file's path in buf[cap], creating its directory; false if there is
 * no place for it. */
static bool datamemo_path(char *buf, size_t cap, bool create)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char dir[PATH_MAX];
	int n;

	if (xdg != NULL && xdg[0] == '/')
		n = snprintf(dir, sizeof(dir), "%s", xdg);
	else if (home != NULL && home[0] == '/')
		n = snprintf(dir, sizeof(dir), "%s/.cache", home);
	else
		return false;
	if (n < 0 || (size_t)n >= sizeof(dir) - 8)
		return false;
	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return false;
	strcat(dir, "/pcopy");
	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return false;
	n = snprintf(buf, cap, "%s/direct-failed", dir);
	return n > 0 && (size_t)n < cap;
}

/* key's id: HMAC-SHA256 under a fixed label, in hex, into id[DATAMEMO_ID + 1]. */
static bool datamemo_id(const char *key, char *id)
{
	static const uint8_t label[] = "pcopy direct-failed v1";
	uint8_t mac[CRYPTO_MAC_LEN];
	struct iovec iov = { .iov_base = (void *)(uintptr_t)key, .iov_len = strlen(key) };

	if (crypto_hmac(label, sizeof(label) - 1, &iov, 1, mac) < 0)
		return false;
	for (size_t i = 0; i < sizeof(mac); i++)
		snprintf(id + 2 * i, 3, "%02x", mac[i]);
	return true;
}

/* One line of the file: its id (DATAMEMO_ID hex digits) and time. */
static bool datamemo_line(const char *line, size_t len, const char **id, uint64_t *t)
{
	uint64_t v = 0;

	if (len < DATAMEMO_ID + 2 || len > DATAMEMO_LINE - 1 || line[DATAMEMO_ID] != ' ')
		return false;
	for (size_t i = 0; i < DATAMEMO_ID; i++)
		if (strchr("0123456789abcdef", line[i]) == NULL || line[i] == '\0')
			return false;
	for (size_t i = DATAMEMO_ID + 1; i < len; i++) {
		if (line[i] < '0' || line[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(line[i] - '0');
	}
	*id = line;
	*t = v;
	return true;
}

/* Calls fn for each good line of text, newest last as written. */
static void datamemo_each(const char *text, void (*fn)(const char *id, uint64_t t, void *arg),
			  void *arg)
{
	while (*text != '\0') {
		size_t n = strcspn(text, "\n");
		const char *id;
		uint64_t t;
		if (datamemo_line(text, n, &id, &t))
			fn(id, t, arg);
		text += n + (text[n] == '\n');
	}
}

struct datamemo_seek {
	const char *id;
	uint64_t now;
	bool found;
	uint64_t age;
};

static void datamemo_seek_one(const char *id, uint64_t t, void *arg)
{
	struct datamemo_seek *s = arg;

	if (memcmp(id, s->id, DATAMEMO_ID) == 0 && t <= s->now && s->now - t < DATAMEMO_TTL_S) {
		s->found = true;
		s->age = s->now - t;
	}
}

bool datamemo_find(const char *text, const char *id, uint64_t now, uint64_t *age)
{
	struct datamemo_seek s = { .id = id, .now = now };

	datamemo_each(text, datamemo_seek_one, &s);
	if (s.found && age != NULL)
		*age = s.age;
	return s.found;
}

/* The file's text (NUL-terminated, malloc'd) or NULL. */
static char *datamemo_read(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *text;
	size_t got = 0;
	ssize_t r;

	if (fd < 0)
		return NULL;
	if ((text = malloc(DATAMEMO_MAX_FILE + 1)) != NULL) {
		while (got < DATAMEMO_MAX_FILE &&
		       ((r = read(fd, text + got, DATAMEMO_MAX_FILE - got)) > 0 ||
			(r < 0 && errno == EINTR)))
			got += r > 0 ? (size_t)r : 0;
		text[got] = '\0';
	}
	close(fd);
	return text;
}

bool datamemo_recall(const char *key, uint64_t now, uint64_t *age)
{
	char path[PATH_MAX], id[DATAMEMO_ID + 1], *text;
	bool found;

	if (!datamemo_path(path, sizeof(path), false) || !datamemo_id(key, id) ||
	    (text = datamemo_read(path)) == NULL)
		return false;
	found = datamemo_find(text, id, now, age);
	free(text);
	return found;
}

/* The lines kept when the file is written again. */
struct datamemo_keep {
	const char *skip;          /* the id being noted: its old line goes */
	uint64_t now;
	char (*lines)[DATAMEMO_LINE];
	unsigned n;
};

static void datamemo_keep_one(const char *id, uint64_t t, void *arg)
{
	struct datamemo_keep *k = arg;

	if (memcmp(id, k->skip, DATAMEMO_ID) == 0 || t > k->now || k->now - t >= DATAMEMO_TTL_S)
		return;
	if (k->n == DATAMEMO_MAX) { /* the oldest goes */
		memmove(k->lines[0], k->lines[1], (size_t)(DATAMEMO_MAX - 1) * DATAMEMO_LINE);
		k->n--;
	}
	snprintf(k->lines[k->n++], DATAMEMO_LINE, "%.*s %llu", DATAMEMO_ID, id,
		 (unsigned long long)t);
}

void datamemo_note(const char *key, bool failed, uint64_t now)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16], id[DATAMEMO_ID + 1], *text;
	struct datamemo_keep k = { .skip = id, .now = now };
	FILE *f;
	int fd, ret = 0;

	/* Only something to remember makes the directories. */
	if (!datamemo_path(path, sizeof(path), failed) || !datamemo_id(key, id)) {
		if (failed)
			log_debug("no place to remember whether direct data connections work");
		return;
	}
	text = datamemo_read(path);
	if (!failed && (text == NULL || strstr(text, id) == NULL)) {
		free(text);
		return; /* nothing to forget */
	}
	if ((k.lines = calloc(DATAMEMO_MAX + 1, DATAMEMO_LINE)) == NULL) {
		free(text);
		return;
	}
	if (text != NULL)
		datamemo_each(text, datamemo_keep_one, &k);
	free(text);
	if (failed) {
		if (k.n == DATAMEMO_MAX)
			memmove(k.lines[0], k.lines[1], (size_t)(DATAMEMO_MAX - 1) * DATAMEMO_LINE);
		k.n -= k.n == DATAMEMO_MAX;
		snprintf(k.lines[k.n++], DATAMEMO_LINE, "%s %llu", id, (unsigned long long)now);
	}
	/* A new file renamed over the old one: readers never see half of it. */
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0 || (f = fdopen(fd, "w")) == NULL) {
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		log_debug("cannot write %s: %s", tmp, strerror(errno));
		free(k.lines);
		return;
	}
	for (unsigned i = 0; i < k.n && ret >= 0; i++)
		ret = fprintf(f, "%s\n", k.lines[i]);
	if (fclose(f) != 0 || ret < 0 || rename(tmp, path) != 0) {
		log_debug("cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
	}
	free(k.lines);
}
