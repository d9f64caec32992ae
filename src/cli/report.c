// SPDX-License-Identifier: Apache-2.0
/* report: the bar, the entries not copied, and the --json output. */
#include "cli/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/json.h"
#include "sys/log.h"
#include "wire/proto.h"

/* pcopy_hooks.progress: on the copy's control thread. */
static void report_on_progress(void *arg, const struct pcopy_progress *p)
{
	struct report *r = arg;
	struct json j;

	if (r->bar_on)
		tty_update(&r->bar, p);
	if (r->json == NULL || r->json_every_s == 0 || p->elapsed_s < r->json_next_s)
		return;
	r->json_next_s = p->elapsed_s + r->json_every_s;
	json_init(&j, r->json);
	json_object(&j, NULL);
	json_str(&j, "type", "progress");
	json_num(&j, "elapsed_s", p->elapsed_s);
	json_u64(&j, "bytes", p->bytes);
	json_u64(&j, "total", p->total);
	json_bool(&j, "total_final", p->total_final);
	json_u64(&j, "entries_done", p->entries_done);
	json_u64(&j, "entries_total", p->entries_total);
	json_num(&j, "mb_per_s", p->elapsed_s > 0 ? (double)p->bytes / p->elapsed_s / 1e6 : 0);
	json_str(&j, "current", p->current);
	json_close(&j);
	(void)json_end(&j); /* a failed stream shows again at the summary */
}

static char *report_strdup(const char *s)
{
	return s != NULL ? strdup(s) : NULL;
}

/* A copy of msg as it was printed: control bytes and bytes that are not
 * UTF-8 as \xNN (JSON would make those U+FFFD, and a name with them could
 * not be told from another). NULL on ENOMEM. */
static char *report_escaped(const char *msg)
{
	size_t cap = 4 * strlen(msg) + 1;
	char *out = malloc(cap);

	if (out != NULL)
		log_escape(out, cap, msg);
	return out;
}

/* pcopy_hooks.failed: any thread. */
static void report_on_failed(void *arg, const char *path, const char *reason, bool skipped)
{
	struct report *r = arg;
	struct report_fail f = { report_strdup(path), report_escaped(reason), skipped };

	if (pthread_mutex_lock(&r->lock) != 0)
		abort();
	if (r->nfails == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct report_fail *n = realloc(r->fails, cap * sizeof(*n));
		if (n != NULL) {
			r->fails = n;
			r->cap = cap;
		}
	}
	if (r->nfails < r->cap && f.reason != NULL && (path == NULL || f.path != NULL)) {
		r->fails[r->nfails++] = f;
	} else {
		r->oom = true;
		free(f.path);
		free(f.reason);
	}
	if (pthread_mutex_unlock(&r->lock) != 0)
		abort();
}

/* pcopy_hooks.listed: the control thread. With -n, the listing goes to
 * standard output (standard error when --json has it), a line per entry:
 * "copy PATH", "update PATH" or "delete PATH"; otherwise a removal shows
 * with -v. The path comes from the peer: its control bytes (and its
 * backslashes, so that a line names one path) are escaped. */
static void report_on_listed(void *arg, int what, const char *path)
{
	static const char *const verb[] = {
		[PCOPY_LISTED_NEW] = "copy", [PCOPY_LISTED_CHANGED] = "update",
		[PCOPY_LISTED_GONE] = "delete",
	};
	struct report *r = arg;
	char safe[4 * PROTO_MAX_MSG + 1];

	if (what < PCOPY_LISTED_NEW || what > PCOPY_LISTED_GONE)
		return;
	if (!r->dry_run) {
		if (what == PCOPY_LISTED_GONE)
			log_info("deleted '%s'", path);
		return;
	}
	log_escape_name(safe, sizeof(safe), path);
	if (r->bar_on)
		tty_log_before(&r->bar);
	fprintf(r->json == stdout ? stderr : stdout, "%s %s\n", verb[what], safe);
	if (r->bar_on)
		tty_log_after(&r->bar);
}

int report_init(struct report *r, int fd, bool bar, bool tree, FILE *json, bool json_close,
		unsigned json_every_s)
{
	int ret;

	memset(r, 0, sizeof(*r));
	ret = pthread_mutex_init(&r->lock, NULL);
	if (ret != 0)
		return -ret;
	if (bar) {
		ret = tty_init(&r->bar, fd, tree);
		if (ret < 0) {
			(void)pthread_mutex_destroy(&r->lock);
			return ret;
		}
	}
	r->bar_on = bar;
	r->json = json;
	r->json_close = json_close;
	r->json_every_s = json != NULL ? json_every_s : 0;
	r->json_next_s = json_every_s;
	r->hooks = (struct pcopy_hooks){
		.progress = bar || r->json_every_s > 0 ? report_on_progress : NULL,
		/* The bar's pace; -P's when only the JSON events want it. */
		.interval_ms = bar ? REPORT_BAR_MS : json_every_s * 1000u,
		.failed = report_on_failed,
		.listed = report_on_listed,
		.arg = r,
	};
	return 0;
}

void report_bar_clear(struct report *r)
{
	if (r->bar_on)
		tty_clear(&r->bar);
}

static const char *report_via_name(int via)
{
	static const char *const names[] = {
		[PCOPY_VIA_NONE] = "none", [PCOPY_VIA_LOCAL] = "local",
		[PCOPY_VIA_DIRECT] = "direct", [PCOPY_VIA_SSH] = "ssh",
		[PCOPY_VIA_RELAY] = "relay", [PCOPY_VIA_HOSTS] = "hosts",
	};

	return via >= 0 && via < (int)(sizeof(names) / sizeof(names[0])) ? names[via] : "none";
}

static void report_side(struct json *j, const char *key, const struct pcopy_side_stats *s)
{
	json_object(j, key);
	json_u64(j, "bytes", s->bytes);
	json_u64(j, "wire_bytes", s->wire_bytes);
	json_num(j, "cpu_s", s->cpu_s);
	json_num(j, "codec_cpu_s", s->codec_cpu_s);
	json_u64(j, "maxrss_kib", s->maxrss_kib);
	json_close(j);
}

/* "files": counts, and each entry not copied. Takes the lock: a worker
 * of a copy that failed may still be reporting. */
static void report_files(struct report *r, struct json *j, const struct pcopy_result *res)
{
	size_t skipped = 0;

	if (pthread_mutex_lock(&r->lock) != 0)
		abort();
	for (size_t i = 0; i < r->nfails; i++)
		skipped += r->fails[i].skipped;
	json_object(j, "files");
	json_u64(j, "copied", res->sink.files);
	json_u64(j, "directories", res->sink.dirs);
	json_u64(j, "links", res->sink.links);
	json_u64(j, "unchanged", res->sink.unchanged);
	json_u64(j, "bytes_unchanged", res->sink.unchanged_bytes);
	json_u64(j, "deleted", res->sink.deleted);
	json_u64(j, "resumed", res->sink.resumed);
	json_u64(j, "skipped", skipped);
	json_u64(j, "failed", res->files_failed > skipped ? res->files_failed - skipped : 0);
	json_bool(j, "list_complete", !r->oom);
	json_array(j, "not_copied");
	for (size_t i = 0; i < r->nfails; i++) {
		json_object(j, NULL);
		json_str(j, "path", r->fails[i].path);
		json_str(j, "reason", r->fails[i].reason);
		json_bool(j, "skipped", r->fails[i].skipped);
		json_close(j);
	}
	json_close(j);
	json_close(j);
	if (pthread_mutex_unlock(&r->lock) != 0)
		abort();
}

static void report_streams(struct json *j, const struct pcopy_result *res)
{
	json_object(j, "streams");
	json_u64(j, "count", res->streams);
	if (res->nstream_stats == 0) {
		json_null(j, "per_stream");
	} else {
		json_array(j, "per_stream");
		for (unsigned i = 0; i < res->nstream_stats; i++) {
			json_object(j, NULL);
			json_str(j, "codec", res->stream[i].codec);
			json_u64(j, "bytes", res->stream[i].raw);
			json_u64(j, "wire_bytes", res->stream[i].wire);
			json_close(j);
		}
		json_close(j);
	}
	json_close(j);
}

/* The slowest link of the copy and every stage's shares (null when the
 * copy measured none: it failed, or nothing moved). */
static void report_bottleneck(struct json *j, const struct pcopy_result *res)
{
	const struct pcopy_bottleneck *b = &res->bottleneck;

	if (res->nstages == 0 || b->verdict == PCOPY_VERDICT_UNKNOWN) {
		json_null(j, "bottleneck");
		return;
	}
	json_object(j, "bottleneck");
	json_str(j, "verdict", b->key);
	json_str(j, "name", b->name);
	json_num(j, "busy", b->busy);
	json_str(j, "busiest", b->busiest[0] != '\0' ? b->busiest : NULL);
	json_str(j, "second_label", b->second_label);
	json_num(j, "second", b->second);
	json_array(j, "stages");
	for (unsigned i = 0; i < res->nstages; i++) {
		const struct pcopy_stage_stats *st = &res->stage[i];
		json_object(j, NULL);
		json_str(j, "name", st->name);
		json_str(j, "side", st->side);
		json_u64(j, "threads", st->threads);
		json_num(j, "busy", st->busy);
		json_num(j, "blocked_in", st->blocked_in);
		json_num(j, "blocked_out", st->blocked_out);
		json_close(j);
	}
	json_close(j);
	json_close(j);
}

int report_summary(struct report *r, const struct pcopy_opts *o, const struct pcopy_result *res,
		   int ret, int exit_code)
{
	const struct pcopy_side_stats *src = &res->source;
	struct json j;

	if (r->json == NULL)
		return 0;
	json_init(&j, r->json);
	json_object(&j, NULL);
	json_str(&j, "type", "summary");
	json_int(&j, "schema", REPORT_JSON_SCHEMA);
	json_str(&j, "pcopy_version", pcopy_version());
	json_bool(&j, "ok", ret == 0);
	json_bool(&j, "dry_run", r->dry_run);
	json_int(&j, "exit_code", exit_code);
	json_str(&j, "error", ret < 0 ? res->msg : NULL);
	json_u64(&j, "bytes", res->sink.bytes);
	report_files(r, &j, res);
	json_object(&j, "seconds");
	json_num(&j, "wall", res->wall_s);
	json_num(&j, "transfer", res->xfer_s);
	json_close(&j);
	if (r->dry_run) /* bytes it would write: no rate of them */
		json_null(&j, "mb_per_s");
	else
		json_num(&j, "mb_per_s",
			 res->wall_s > 0 ? (double)res->sink.bytes / res->wall_s / 1e6 : 0);
	report_streams(&j, res);
	report_side(&j, "source", &res->source);
	report_side(&j, "sink", &res->sink);
	json_object(&j, "compression");
	json_str(&j, "codec", o->codec != NULL ? o->codec : "none");
	if (src->wire_bytes > 0 && res->compressed)
		json_num(&j, "ratio", (double)src->bytes / (double)src->wire_bytes);
	else
		json_null(&j, "ratio");
	json_close(&j);
	json_str(&j, "security", res->security[0] != '\0' ? res->security : NULL);
	json_str(&j, "data_via", report_via_name(res->data_via));
	json_str(&j, "data_via_reason", res->via_reason[0] != '\0' ? res->via_reason : NULL);
	report_bottleneck(&j, res);
	json_close(&j);
	return json_end(&j);
}

int report_free(struct report *r)
{
	int ret = 0;

	for (size_t i = 0; i < r->nfails; i++) {
		free(r->fails[i].path);
		free(r->fails[i].reason);
	}
	free(r->fails);
	if (r->bar_on)
		tty_destroy(&r->bar);
	(void)pthread_mutex_destroy(&r->lock);
	if (r->json != NULL && r->json_close && fclose(r->json) != 0)
		ret = -1;
	else if (r->json != NULL && !r->json_close && fflush(r->json) != 0)
		ret = -1;
	r->json = NULL;
	return ret;
}
