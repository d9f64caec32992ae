// SPDX-License-Identifier: Apache-2.0
/* json: a small streaming JSON writer. */
#include "cli/json.h"

#include <math.h>

#include "sys/utf8.h"

void json_init(struct json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->first[0] = true;
	j->bad = false;
}

void json_write_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = 0;

	while (p[n] != '\0')
		n++;
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		unsigned char c = p[i];
		size_t len = utf8_seq_len(p + i, n - i);
		if (len == 0) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		if (len > 1) {
			fwrite(p + i, 1, len, f);
			i += len;
			continue;
		}
		i++;
		switch (c) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (c < 0x20 || c == 0x7f)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		}
	}
	fputc('"', f);
}

/* The separator and key before a value. */
static bool json_member(struct json *j, const char *key)
{
	if (j->bad)
		return false;
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	if (key != NULL) {
		json_write_string(j->f, key);
		fputc(':', j->f);
	}
	return true;
}

static void json_open(struct json *j, const char *key, char c)
{
	if (j->depth + 1 >= JSON_MAX_DEPTH) {
		j->bad = true;
		return;
	}
	if (!json_member(j, key))
		return;
	fputc(c, j->f);
	j->depth++;
	j->first[j->depth] = true;
	j->closer[j->depth] = c == '{' ? '}' : ']';
}

void json_object(struct json *j, const char *key)
{
	json_open(j, key, '{');
}

void json_array(struct json *j, const char *key)
{
	json_open(j, key, '[');
}

void json_close(struct json *j)
{
	if (j->bad || j->depth == 0) {
		j->bad = true;
		return;
	}
	fputc(j->closer[j->depth], j->f);
	j->depth--;
}

void json_str(struct json *j, const char *key, const char *s)
{
	if (!json_member(j, key))
		return;
	if (s == NULL)
		fputs("null", j->f);
	else
		json_write_string(j->f, s);
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
	if (json_member(j, key))
		fprintf(j->f, "%llu", (unsigned long long)v);
}

void json_int(struct json *j, const char *key, long long v)
{
	if (json_member(j, key))
		fprintf(j->f, "%lld", v);
}

void json_num(struct json *j, const char *key, double v)
{
	if (!json_member(j, key))
		return;
	if (isfinite(v))
		fprintf(j->f, "%.3f", v);
	else
		fputs("null", j->f);
}

void json_bool(struct json *j, const char *key, bool v)
{
	if (json_member(j, key))
		fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
	if (json_member(j, key))
		fputs("null", j->f);
}

int json_end(struct json *j)
{
	if (j->depth != 0)
		j->bad = true;
	fputc('\n', j->f);
	if (fflush(j->f) != 0 || ferror(j->f))
		return -1;
	return j->bad ? -1 : 0;
}
