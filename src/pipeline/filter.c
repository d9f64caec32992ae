// SPDX-License-Identifier: Apache-2.0
/* filter: compiles rsync-like patterns into token lists and matches them by
 * simulating all paths through the pattern at once (see filter.h). */
#include "pipeline/filter.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"

enum tok_kind {
	TOK_BYTE,     /* exactly .byte */
	TOK_ONE,      /* '?': one byte but '/' */
	TOK_SET,      /* "[...]": one byte of .set (never '/') */
	TOK_STAR,     /* '*': any run of bytes but '/' */
	TOK_STARSTAR, /* "**": any run of bytes */
};

struct tok {
	uint8_t kind;    /* enum tok_kind */
	uint8_t byte;    /* TOK_BYTE */
	uint16_t set;    /* TOK_SET: index in rule.sets */
};

struct rule {
	bool include;     /* "+": a match includes; "-": it excludes */
	bool dir_only;    /* the pattern ended in '/' */
	bool anchored;    /* it started with '/' */
	bool whole;       /* match whole paths (or tails), not the last component */
	unsigned ntok;
	struct tok *tok;  /* ntok tokens, then the sets: one allocation */
	uint32_t (*sets)[8]; /* 256-bit byte sets */
};

struct filter {
	unsigned n, cap;
	struct rule *rules;
};

/* The pattern compiler never makes more tokens than the pattern has bytes. */
#define FILTER_MAX_TOK PROTO_MAX_FILTER

static bool is_star(const struct tok *t)
{
	return t->kind == TOK_STAR || t->kind == TOK_STARSTAR;
}

static void set_add(uint32_t *set, unsigned c)
{
	set[c / 32] |= 1u << (c % 32);
}

static bool set_has(const uint32_t *set, unsigned c)
{
	return (set[c / 32] >> (c % 32)) & 1u;
}

/* Compiles the bracket expression at p (p[0] == '[', end the pattern's end)
 * into set. Returns the byte after its ']', or NULL when it has none (the
 * '[' is then a literal byte). */
static const char *compile_set(const char *p, const char *end, uint32_t *set)
{
	const char *q = p + 1;
	bool negate = false;

	memset(set, 0, 8 * sizeof(uint32_t));
	if (q < end && (*q == '!' || *q == '^')) {
		negate = true;
		q++;
	}
	/* A ']' first is a member, as in fnmatch. */
	for (bool first = true; q < end && (*q != ']' || first); first = false) {
		unsigned lo = (unsigned char)*q++;
		if (lo == '\\' && q < end)
			lo = (unsigned char)*q++;
		unsigned hi = lo;
		if (q + 1 < end && *q == '-' && q[1] != ']') {
			hi = (unsigned char)q[1];
			q += 2;
			if (hi == '\\' && q < end)
				hi = (unsigned char)*q++;
		}
		for (unsigned c = lo; c <= hi; c++)
			set_add(set, c);
	}
	if (q >= end)
		return NULL;
	if (negate)
		for (unsigned i = 0; i < 8; i++)
			set[i] = ~set[i];
	set[(unsigned char)'/' / 32] &= ~(1u << ((unsigned char)'/' % 32));
	return q + 1;
}

/* Compiles pattern p[0..len) into r's tokens. Returns 0 or -ENOMEM. */
static int compile(struct rule *r, const char *p, size_t len)
{
	const char *end = p + len;
	size_t nsets = 0;

	for (size_t i = 0; i < len; i++)
		nsets += p[i] == '[';
	/* Tokens first, then the sets, aligned for uint32_t. */
	size_t toks = (len + 1) * sizeof(struct tok);
	toks = (toks + sizeof(uint32_t) - 1) / sizeof(uint32_t) * sizeof(uint32_t);
	char *mem = malloc(toks + nsets * sizeof(*r->sets) + 1);
	if (mem == NULL)
		return -ENOMEM;
	r->tok = (struct tok *)(void *)mem;
	r->sets = (uint32_t(*)[8])(void *)(mem + toks);
	r->ntok = 0;
	unsigned nset = 0;
	while (p < end) {
		struct tok *t = &r->tok[r->ntok++];
		const char *after;
		memset(t, 0, sizeof(*t));
		if (*p == '*') {
			bool two = p + 1 < end && p[1] == '*';
			t->kind = two ? TOK_STARSTAR : TOK_STAR;
			while (p < end && *p == '*') /* "***" is "**" */
				p++;
			/* Stars in a row are one, "**" if either is. */
			struct tok *prev = r->ntok > 1 ? &r->tok[r->ntok - 2] : NULL;
			if (prev != NULL && is_star(prev)) {
				if (t->kind == TOK_STARSTAR)
					prev->kind = TOK_STARSTAR;
				r->ntok--;
			}
		} else if (*p == '?') {
			t->kind = TOK_ONE;
			p++;
		} else if (*p == '[' && (after = compile_set(p, end, r->sets[nset])) != NULL) {
			t->kind = TOK_SET;
			t->set = (uint16_t)nset++;
			p = after;
		} else {
			if (*p == '\\' && p + 1 < end)
				p++;
			t->kind = TOK_BYTE;
			t->byte = (uint8_t)*p++;
		}
	}
	return 0;
}

/* Whether token t takes byte c. */
static bool tok_takes(const struct rule *r, const struct tok *t, unsigned char c)
{
	switch (t->kind) {
	case TOK_BYTE:
		return c == t->byte;
	case TOK_SET:
		return set_has(r->sets[t->set], c);
	case TOK_STARSTAR:
		return true;
	default: /* TOK_ONE, TOK_STAR */
		return c != '/';
	}
}

/* A star may match nothing: a state before one is also a state after it. */
static void closure(const struct rule *r, uint8_t *st)
{
	for (unsigned i = 0; i < r->ntok; i++)
		if (st[i] && is_star(&r->tok[i]))
			st[i + 1] = 1;
}

/* Whether r's pattern matches all of s[0..n). st[i] set: the bytes so far
 * can be followed by token i (i == ntok: the pattern is done). */
static bool match(const struct rule *r, const char *s, size_t n)
{
	uint8_t a[FILTER_MAX_TOK + 1], b[FILTER_MAX_TOK + 1];
	uint8_t *cur = a, *next = b;
	size_t width = r->ntok + 1;

	memset(cur, 0, width);
	cur[0] = 1;
	closure(r, cur);
	for (size_t k = 0; k < n; k++) {
		unsigned char c = (unsigned char)s[k];
		bool alive = false;
		memset(next, 0, width);
		for (unsigned i = 0; i < r->ntok; i++) {
			if (!cur[i] || !tok_takes(r, &r->tok[i], c))
				continue;
			next[is_star(&r->tok[i]) ? i : i + 1] = 1;
			alive = true;
		}
		if (!alive)
			return false;
		closure(r, next);
		uint8_t *t = cur;
		cur = next;
		next = t;
	}
	return cur[r->ntok] != 0;
}

/* Whether rule r matches the entry at path. */
static bool rule_matches(const struct rule *r, const char *path, bool is_dir)
{
	size_t n = strlen(path);

	if (r->dir_only && !is_dir)
		return false;
	if (r->anchored)
		return match(r, path, n);
	if (!r->whole) {
		const char *last = strrchr(path, '/');
		last = last != NULL ? last + 1 : path;
		return match(r, last, n - (size_t)(last - path));
	}
	/* Each tail that starts at a component: the path, then after each '/'. */
	for (const char *p = path;; p++) {
		if (match(r, p, n - (size_t)(p - path)))
			return true;
		p = strchr(p, '/');
		if (p == NULL)
			return false;
	}
}

struct filter *filter_new(void)
{
	return calloc(1, sizeof(struct filter));
}

int filter_add(struct filter *f, const char *rule)
{
	if (!proto_filter_rule_ok(rule))
		return -EINVAL;
	if (f->n == f->cap) {
		unsigned cap = f->cap != 0 ? f->cap * 2 : 8;
		struct rule *r = realloc(f->rules, cap * sizeof(*r));
		if (r == NULL)
			return -ENOMEM;
		f->rules = r;
		f->cap = cap;
	}
	struct rule *r = &f->rules[f->n];
	const char *p = rule + 2;
	size_t len = strlen(p);

	memset(r, 0, sizeof(*r));
	r->include = rule[0] == '+';
	if (len > 0 && p[len - 1] == '/') {
		r->dir_only = true;
		len--;
	}
	if (len > 0 && p[0] == '/') {
		r->anchored = true;
		p++;
		len--;
	}
	r->whole = r->anchored || memchr(p, '/', len) != NULL;
	for (size_t i = 0; i + 1 < len && !r->whole; i++)
		r->whole = p[i] == '*' && p[i + 1] == '*';
	int ret = compile(r, p, len);
	if (ret < 0)
		return ret;
	f->n++;
	return 0;
}

bool filter_excludes(const struct filter *f, const char *path, bool is_dir)
{
	if (f == NULL)
		return false;
	for (unsigned i = 0; i < f->n; i++)
		if (rule_matches(&f->rules[i], path, is_dir))
			return !f->rules[i].include;
	return false;
}

unsigned filter_count(const struct filter *f)
{
	return f != NULL ? f->n : 0;
}

void filter_free(struct filter *f)
{
	if (f == NULL)
		return;
	for (unsigned i = 0; i < f->n; i++)
		free(f->rules[i].tok);
	free(f->rules);
	free(f);
}
