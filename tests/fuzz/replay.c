/* SPDX-License-Identifier: Apache-2.0 */
/* replay: a stand-in for libFuzzer in ordinary builds.
 *
 * Usage: fuzz_<name> [SEED_DIR...]. Runs LLVMFuzzerTestOneInput on every
 * file in each SEED_DIR (the hand-made seeds, then the committed corpus; a
 * missing directory means no seeds from it), then on REPLAY_RUNS (or the
 * target's own fuzz_replay_runs, if it defines one: fewer for a target
 * that works on the file system at every input)
 * inputs from a fixed-seed PRNG: seeds mutated (bytes flipped, truncated,
 * spliced, appended, random bytes inserted) and purely random inputs. The
 * sequence is the same on every run, so a failure reproduces. Each input
 * sits in its own exactly-sized allocation so that sanitizers catch any
 * overread. A crash ends the process, so reaching the summary means none. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_RUNS 200000u
/* A target may define this to run another number of generated inputs. */
extern const size_t fuzz_replay_runs __attribute__((weak));
#define REPLAY_MAX_RANDOM 512u   /* longest purely random input */
#define REPLAY_MAX_SEED (1u << 20) /* longer seed files are cut */
#define REPLAY_MAX_STEPS 4u      /* mutations applied to one input */

struct seed {
	uint8_t *data;
	size_t len;
};

struct seeds {
	struct seed *v;
	size_t n;
	size_t max_len;
};

/* A growable input under construction, at most cap bytes. */
struct input {
	uint8_t *buf;
	size_t len;
	size_t cap;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return x;
}

/* Uniform enough in [0, n); n > 0. */
static size_t rng_below(size_t n)
{
	return (size_t)(rng_next() % n);
}

static int run_one(const uint8_t *data, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);

	if (copy == NULL)
		return -1;
	if (len > 0)
		memcpy(copy, data, len);
	LLVMFuzzerTestOneInput(copy, len);
	free(copy);
	return 0;
}

static int seed_read(const char *dir, const char *name, struct seed *s)
{
	char path[4096];
	uint8_t *shrunk;
	FILE *f;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return -1;
	f = fopen(path, "rb");
	if (f == NULL)
		return -1;
	s->data = malloc(REPLAY_MAX_SEED);
	s->len = s->data ? fread(s->data, 1, REPLAY_MAX_SEED, f) : 0;
	fclose(f);
	if (s->data == NULL)
		return -1;
	shrunk = realloc(s->data, s->len ? s->len : 1);
	if (shrunk != NULL)
		s->data = shrunk;
	return 0;
}

static int not_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Adds every file in dir to out, in name order so that runs are
 * reproducible. */
static void seeds_load(const char *dir, struct seeds *out)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, not_hidden, alphasort);
	struct seed *grown;

	if (n <= 0) {
		free(names);
		return;
	}
	grown = realloc(out->v, (out->n + (size_t)n) * sizeof(*out->v));
	if (grown != NULL)
		out->v = grown;
	for (int i = 0; i < n; i++) {
		struct seed s = { NULL, 0 };

		if (grown && seed_read(dir, names[i]->d_name, &s) == 0) {
			out->v[out->n++] = s;
			if (s.len > out->max_len)
				out->max_len = s.len;
		} else {
			free(s.data);
		}
		free(names[i]);
	}
	free(names);
}

static void seeds_free(struct seeds *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].data);
	free(s->v);
}

static void input_set(struct input *in, const uint8_t *data, size_t len)
{
	in->len = len < in->cap ? len : in->cap;
	if (in->len > 0)
		memcpy(in->buf, data, in->len);
}

static void mutate_flip(struct input *in)
{
	static const uint8_t special[] = { 0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff };
	size_t count = 1 + rng_below(4);

	if (in->len == 0)
		return;
	for (size_t i = 0; i < count; i++) {
		size_t at = rng_below(in->len);

		if (rng_below(2))
			in->buf[at] ^= (uint8_t)(1u << rng_below(8));
		else
			in->buf[at] = special[rng_below(sizeof(special))];
	}
}

static void mutate_truncate(struct input *in)
{
	in->len = rng_below(in->len + 1);
}

/* Replaces the tail after a random point with the tail of another seed. */
static void mutate_splice(struct input *in, const struct seed *other)
{
	size_t at = rng_below(in->len + 1);
	size_t from = rng_below(other->len + 1);
	size_t n = other->len - from;

	if (n > in->cap - at)
		n = in->cap - at;
	if (n > 0)
		memcpy(in->buf + at, other->data + from, n);
	in->len = at + n;
}

/* Appends a whole seed: a stream of several frames. */
static void mutate_append(struct input *in, const struct seed *other)
{
	size_t n = other->len;

	if (n > in->cap - in->len)
		n = in->cap - in->len;
	if (n > 0)
		memcpy(in->buf + in->len, other->data, n);
	in->len += n;
}

static void mutate_insert(struct input *in)
{
	size_t at = rng_below(in->len + 1);
	size_t n = 1 + rng_below(16);

	if (n > in->cap - in->len)
		n = in->cap - in->len;
	memmove(in->buf + at + n, in->buf + at, in->len - at);
	for (size_t i = 0; i < n; i++)
		in->buf[at + i] = (uint8_t)rng_next();
	in->len += n;
}

static void make_random(struct input *in)
{
	size_t n = rng_below(REPLAY_MAX_RANDOM + 1);

	in->len = n < in->cap ? n : in->cap;
	for (size_t i = 0; i < in->len; i++)
		in->buf[i] = (uint8_t)rng_next();
}

/* Builds the next input: one in four purely random, else a mutated seed. */
static void make_input(struct input *in, const struct seeds *s)
{
	const struct seed *base;
	size_t steps;

	if (s->n == 0 || rng_below(4) == 0) {
		make_random(in);
		return;
	}
	base = &s->v[rng_below(s->n)];
	input_set(in, base->data, base->len);
	steps = 1 + rng_below(REPLAY_MAX_STEPS);
	for (size_t i = 0; i < steps; i++) {
		switch (rng_below(5)) {
		case 0: mutate_flip(in); break;
		case 1: mutate_truncate(in); break;
		case 2: mutate_splice(in, &s->v[rng_below(s->n)]); break;
		case 3: mutate_append(in, &s->v[rng_below(s->n)]); break;
		default: mutate_insert(in); break;
		}
	}
}

int main(int argc, char **argv)
{
	struct seeds s;
	struct input in = { NULL, 0, 0 };
	size_t runs = 0;
	int ret = 1;

	memset(&s, 0, sizeof(s));
	for (int i = 1; i < argc; i++)
		seeds_load(argv[i], &s);
	in.cap = 2 * s.max_len + REPLAY_MAX_RANDOM;
	in.buf = malloc(in.cap);
	if (in.buf == NULL)
		goto out;
	for (size_t i = 0; i < s.n; i++, runs++)
		if (run_one(s.v[i].data, s.v[i].len) != 0)
			goto out;
	for (size_t i = 0; i < (&fuzz_replay_runs != NULL ? fuzz_replay_runs : REPLAY_RUNS);
	     i++, runs++) {
		make_input(&in, &s);
		if (run_one(in.buf, in.len) != 0)
			goto out;
	}
	printf("fuzz replay: %zu inputs (%zu from files), 0 crashes\n", runs, s.n);
	ret = 0;
out:
	if (ret != 0)
		fprintf(stderr, "fuzz replay: out of memory after %zu inputs\n", runs);
	free(in.buf);
	seeds_free(&s);
	return ret;
}
