// SPDX-License-Identifier: Apache-2.0
/* json: a small streaming JSON writer, enough for pcopy's summary and
 * progress events: objects, arrays, strings, numbers, booleans and null,
 * written straight to a FILE.
 *
 * Strings are written as JSON requires and always as valid UTF-8: '"'
 * and '\\' escaped, the control characters U+0000..U+001F and U+007F as
 * \b \f \n \r \t or \u00XX, valid UTF-8 sequences as they are, and every
 * byte that is not part of one (a file name in another encoding) as
 * \uFFFD, the replacement character. A name with such bytes therefore
 * cannot be recovered exactly from the JSON; the summary's "reason" texts
 * say the same name with \xNN escapes (the log's form).
 *
 * Not thread-safe: one writer per thread. Nesting is limited to
 * JSON_MAX_DEPTH; deeper calls are ignored and make json_end fail. */
#ifndef PCOPY_CLI_JSON_H
#define PCOPY_CLI_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 8

struct json {
	FILE *f;                 /* borrowed */
	int depth;               /* open objects and arrays */
	bool first[JSON_MAX_DEPTH]; /* no member written yet at this depth */
	char closer[JSON_MAX_DEPTH]; /* '}' or ']': what closes each open level */
	bool bad;                /* misuse (too deep, unbalanced) */
};

void json_init(struct json *j, FILE *f);

/* Members: key is the member's name inside an object, NULL inside an
 * array (or for the top value). */
void json_object(struct json *j, const char *key);   /* opens { */
void json_array(struct json *j, const char *key);    /* opens [ */
void json_close(struct json *j);                     /* closes the innermost */
void json_str(struct json *j, const char *key, const char *s); /* NULL: null */
void json_u64(struct json *j, const char *key, uint64_t v);
void json_int(struct json *j, const char *key, long long v);
/* A number with 3 decimals; NaN and infinities (not JSON) become null. */
void json_num(struct json *j, const char *key, double v);
void json_bool(struct json *j, const char *key, bool v);
void json_null(struct json *j, const char *key);

/* Ends the top value with a newline and flushes. Returns 0, or -1 if the
 * writer was misused or the FILE failed (errno set by stdio then). */
int json_end(struct json *j);

/* Writes s as a JSON string (quotes included) to f, escaped as above. */
void json_write_string(FILE *f, const char *s);

#endif
