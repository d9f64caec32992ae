/* SPDX-License-Identifier: Apache-2.0 */
/* relay: control messages between the two ends of a third-party copy. */
#include "roles/relay.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "pipeline/entcount.h"
#include "sys/log.h"
#include "sys/platform.h"

struct relay {
	struct ctl *src, *sink;
	struct relay_result *r;
	struct pc_err *e;
	uint64_t total, done;      /* announced and finished bytes, for progress */
	uint32_t unsized;          /* files announced with no size, before their FILE_END */
	const struct pcopy_hooks *hooks; /* borrowed; NULL: none */
	uint64_t *sizes;           /* [PROTO_MAX_INFLIGHT], by id % PROTO_MAX_INFLIGHT: the
	                              size of each entry announced and not acknowledged,
	                              RELAY_FAILED once its FILE_DONE came */
	uint32_t announced;        /* entries announced by the source */
	uint32_t acked;            /* the sink's last ACK */
	struct entcount ents;      /* the entries shown in progress */
	struct proto_entry ent;    /* the entry being counted */
	uint32_t npaths;           /* paths of the source's REQUEST */
	uint32_t next_skip;        /* lowest index the source's next SKIP may have */
	bool flat;                 /* relay_report's */
	uint32_t tops;             /* entries and SKIPs that came, against npaths (flat) */
	bool src_end;              /* the source's END went to the sink */
	bool finished;             /* the sink's DONE went to the source */
};

#define RELAY_FAILED UINT64_MAX
/* How long an end's ERROR that says it lost its data connections waits
 * for the other end's control channel to close (relay_cause). */
#define RELAY_CAUSE_MS 1000

/* Both ends learn of a failure; the first one recorded is what we report. */
static int relay_fail(struct relay *rl, int code, const char *msg)
{
	(void)ctl_send_error(rl->src, code, msg);
	(void)ctl_send_error(rl->sink, code, msg);
	return pc_err_set(rl->e, code, "%s", msg);
}

static int relay_forward(struct relay *rl, struct ctl *to, const struct proto_msg *m)
{
	int ret = ctl_send(to, m);

	if (ret < 0)
		return pc_err_set(rl->e, -PC_E_NET, "lost control connection to %s", ctl_peer(to));
	return 0;
}

/* Tells the hooks of an entry not copied; the message names it. */
static void relay_failed(const struct relay *rl, const char *msg, bool skipped)
{
	if (rl->hooks != NULL && rl->hooks->failed != NULL)
		rl->hooks->failed(rl->hooks->arg, NULL, msg, skipped);
}

/* A source h1 could not open: reported here, never forwarded (the sink
 * has nobody to tell). */
static int relay_skip(struct relay *rl, struct ctl *from, const struct proto_skip *k)
{
	char msg[PROTO_MAX_MSG + 64];

	if (rl->src_end || !proto_skip_in_order(k, rl->npaths, &rl->next_skip)) {
		snprintf(msg, sizeof(msg), "%s skipped source %u %s", ctl_peer(from),
			 (unsigned)k->index,
			 rl->src_end ? "after END" : "out of order or out of range");
		return relay_fail(rl, -PC_E_PROTO, msg);
	}
	rl->r->failed++;
	rl->tops++;
	snprintf(msg, sizeof(msg), "%s: %s", ctl_peer(from),
		 k->msg[0] ? k->msg : pc_strerror(k->status));
	log_error("%s", msg);
	relay_failed(rl, msg, true);
	return 0;
}

/* Checks a batch's ids against what came before and counts its bytes. */
static int relay_entries(struct relay *rl, const struct proto_entries *es)
{
	char msg[128];
	size_t pos = 0;
	int ret;

	if (rl->src_end || es->first_id != rl->announced ||
	    (uint64_t)rl->announced + es->count - rl->acked > PROTO_MAX_INFLIGHT) {
		snprintf(msg, sizeof(msg), "%s announced entries %s", ctl_peer(rl->src),
			 rl->src_end ? "after END" : "out of order or too far ahead of the sink");
		return relay_fail(rl, -PC_E_PROTO, msg);
	}
	while ((ret = proto_entries_next(es, &pos, &rl->ent)) == 1) {
		rl->sizes[rl->ent.id % PROTO_MAX_INFLIGHT] = rl->ent.size;
		entcount_announce(&rl->ents, rl->ent.id, rl->ent.type);
		rl->total += rl->ent.size;
		rl->unsized += rl->ent.type == PROTO_ENT_REG &&
			       (rl->ent.flags & PROTO_ENT_SIZE_UNKNOWN);
	}
	if (ret < 0)
		return relay_fail(rl, ret, "malformed ENTRIES");
	rl->announced += es->count;
	rl->tops += es->count;
	return 0;
}

/* True if id names an entry announced and not yet acknowledged. */
static bool relay_open_id(const struct relay *rl, uint32_t id)
{
	return id >= rl->acked && id < rl->announced;
}

/* Every entry below a->upto finished: those that did not fail count in full. */
static int relay_ack(struct relay *rl, const struct proto_ack *a)
{
	char msg[128];

	if (a->upto < rl->acked || a->upto > rl->announced) {
		snprintf(msg, sizeof(msg), "%s acknowledged entries up to id %u, out of order",
			 ctl_peer(rl->sink), (unsigned)a->upto);
		return relay_fail(rl, -PC_E_PROTO, msg);
	}
	entcount_done(&rl->ents, rl->acked, a->upto);
	for (; rl->acked < a->upto; rl->acked++) {
		uint64_t n = rl->sizes[rl->acked % PROTO_MAX_INFLIGHT];
		rl->done += n == RELAY_FAILED ? 0 : n;
	}
	return 0;
}

/* -u: the files h2 has already count for nothing: out of the total, and
 * done as nothing when acknowledged. The source checks the rest. */
static void relay_have(struct relay *rl, const struct proto_have *h)
{
	for (uint32_t i = 0; i < h->count; i++) {
		uint32_t id = h->first_id + i;
		if (!proto_have_bit(h, i) || !relay_open_id(rl, id))
			continue;
		uint64_t *n = &rl->sizes[id % PROTO_MAX_INFLIGHT];
		if (*n != RELAY_FAILED) {
			rl->total -= *n <= rl->total ? *n : rl->total;
			*n = 0;
		}
	}
}

/* Milliseconds from now to due (0 if past). */
static int relay_ms_until(uint64_t due)
{
	uint64_t now = platform_now_ns();

	return now >= due ? 0 : (int)((due - now) / 1000000u) + 1;
}

/* from's ERROR m says that it lost its data connections. The cause may
 * be the other end going away (killed, its host down): then its control
 * channel closes about when the data connections did, and that end is
 * the one to name. Waits up to RELAY_CAUSE_MS for that; what the other
 * end sends meanwhile is dropped, for the copy has failed. Returns true
 * with the report in rl->e if it closed; false if it is still there or
 * sent an ERROR of its own (the first ERROR stands). */
static bool relay_cause(struct relay *rl, struct ctl *from, struct ctl *other,
			const struct proto_msg *m)
{
	uint64_t due = platform_now_ns() + (uint64_t)RELAY_CAUSE_MS * 1000000u;
	struct proto_msg m2;
	bool gone = false;

	ctl_set_deadline(other, RELAY_CAUSE_MS / 1000 + 1); /* no trickle holds us */
	for (;;) {
		struct pollfd p = { .fd = ctl_rfd(other), .events = POLLIN };
		int left = relay_ms_until(due);
		if (!ctl_pending(other) && (left == 0 || poll(&p, 1, left) <= 0))
			break;
		int ret = ctl_recv(other, &m2);
		if (ret == -PC_E_NET) {
			gone = true;
			break;
		}
		if (ret < 0 || m2.type == PROTO_ERROR)
			break;
	}
	ctl_set_deadline(other, 0);
	if (gone)
		(void)pc_err_set(rl->e, -PC_E_NET,
				 "lost control connection to %s; then %s said: %s", ctl_peer(other),
				 ctl_peer(from), m->u.error.msg);
	return gone;
}

/* One message from `from`; allowed lists the types that may come from it. */
static int relay_one(struct relay *rl, struct ctl *from, struct ctl *to)
{
	struct proto_msg m;
	char msg[PROTO_MAX_MSG + 64];
	int ret = ctl_recv(from, &m);

	if (ret == -PC_E_PROTO && ctl_why(from)[0] != '\0') {
		snprintf(msg, sizeof(msg), "%s sent a malformed ENTRIES: %.900s", ctl_peer(from),
			 ctl_why(from));
		return relay_fail(rl, ret, msg);
	}
	if (ret < 0) {
		snprintf(msg, sizeof(msg), "lost control connection to %s: %s", ctl_peer(from),
			 pc_strerror(ret));
		return relay_fail(rl, ret == -PC_E_PROTO ? ret : -PC_E_NET, msg);
	}
	if (m.type == PROTO_ERROR) {
		(void)ctl_send(to, &m);
		if (m.u.error.code == -PC_E_NET && relay_cause(rl, from, to, &m))
			return -PC_E_NET;
		return pc_err_set(rl->e, m.u.error.code < 0 ? m.u.error.code : -PC_E_PROTO, "%s: %s",
				  ctl_peer(from), m.u.error.msg);
	}
	bool from_src = from == rl->src;
	switch (m.type) {
	case PROTO_ENTRIES:
		if (!from_src)
			break;
		ret = relay_entries(rl, &m.u.entries);
		return ret < 0 ? ret : relay_forward(rl, to, &m);
	case PROTO_FILE_END:
		if (!from_src)
			break;
		rl->total += m.u.file_end.size;
		rl->unsized -= rl->unsized > 0;
		if (relay_open_id(rl, m.u.file_end.id) &&
		    rl->sizes[m.u.file_end.id % PROTO_MAX_INFLIGHT] != RELAY_FAILED)
			rl->sizes[m.u.file_end.id % PROTO_MAX_INFLIGHT] = m.u.file_end.size;
		return relay_forward(rl, to, &m);
	case PROTO_FILE_FAIL:
		if (!from_src)
			break;
		return relay_forward(rl, to, &m);
	case PROTO_END:
		if (!from_src)
			break;
		rl->r->src = m.u.stats;
		rl->src_end = true;
		return relay_forward(rl, to, &m);
	case PROTO_SKIP:
		if (!from_src)
			break;
		return relay_skip(rl, from, &m.u.skip);
	case PROTO_FILE_DONE:
		if (from_src)
			break;
		if (!relay_open_id(rl, m.u.file_done.id))
			return relay_fail(rl, -PC_E_PROTO, "the sink reported an unknown file id");
		rl->done += m.u.file_done.bytes;
		rl->sizes[m.u.file_done.id % PROTO_MAX_INFLIGHT] = RELAY_FAILED;
		rl->r->failed++;
		rl->r->unverified += m.u.file_done.status == -PC_E_INTEGRITY;
		snprintf(msg, sizeof(msg), "%s: %s", ctl_peer(from), m.u.file_done.msg);
		log_error("%s", msg);
		relay_failed(rl, msg, false);
		return relay_forward(rl, to, &m);
	case PROTO_HAVE:
		if (from_src)
			break;
		relay_have(rl, &m.u.have);
		return relay_forward(rl, to, &m);
	case PROTO_SUMS: /* --checksum: the source checks them */
		if (from_src)
			break;
		return relay_forward(rl, to, &m);
	case PROTO_LIST: /* for the user, who is here: not passed on */
		if (from_src)
			break;
		if (rl->hooks != NULL && rl->hooks->listed != NULL)
			rl->hooks->listed(rl->hooks->arg, m.u.list.what, m.u.list.path);
		return 0;
	case PROTO_ACK:
		if (from_src)
			break;
		ret = relay_ack(rl, &m.u.ack);
		return ret < 0 ? ret : relay_forward(rl, to, &m);
	case PROTO_DONE:
		if (from_src)
			break;
		rl->r->sink = m.u.stats;
		rl->finished = true;
		return relay_forward(rl, to, &m);
	default:
		break;
	}
	snprintf(msg, sizeof(msg), "%s sent %s out of place", ctl_peer(from),
		 proto_type_name(m.type));
	return relay_fail(rl, -PC_E_PROTO, msg);
}

static void relay_progress(struct relay *rl, uint64_t start_ns)
{
	char a[32], b[32];
	double secs = (double)(platform_now_ns() - start_ns) / 1e9;

	platform_fmt_bytes(rl->done, a, sizeof(a));
	platform_fmt_bytes(rl->total, b, sizeof(b));
	log_msg(LOG_ERROR, "progress: %s of %s in finished files, %.0f s", a, b, secs);
}

/* The hooks' snapshot. */
static void relay_hook(const struct relay *rl, uint64_t start_ns)
{
	struct pcopy_progress p = {
		.elapsed_s = (double)(platform_now_ns() - start_ns) / 1e9,
		.bytes = rl->done, .total = rl->total,
		.total_final = (rl->src_end || (rl->flat && rl->tops >= rl->npaths)) &&
			       rl->unsized == 0,
		.entries_done = entcount_shown_done(&rl->ents, rl->acked),
		.entries_total = entcount_shown_total(&rl->ents, rl->announced),
	};

	rl->hooks->progress(rl->hooks->arg, &p);
}

int relay_run(struct ctl *src, struct ctl *sink, int sigfd, const struct relay_report *rep,
	      uint32_t npaths, struct relay_result *r, struct pc_err *e)
{
	struct relay *rl = calloc(1, sizeof(*rl));
	struct pollfd p[3] = { { .fd = ctl_rfd(src), .events = POLLIN },
			       { .fd = ctl_rfd(sink), .events = POLLIN },
			       { .fd = sigfd, .events = POLLIN } };
	unsigned progress_s = rep->progress_s;
	bool hook = rep->hooks != NULL && rep->hooks->progress != NULL;
	uint64_t every = hook ? (uint64_t)(rep->hooks->interval_ms < 50 ? 50
					   : rep->hooks->interval_ms) * 1000000u : 0;
	uint64_t start = platform_now_ns(), next = start + (uint64_t)progress_s * 1000000000u;
	uint64_t next_hook = start + every;
	int ret = 0;

	memset(r, 0, sizeof(*r));
	if (rl != NULL)
		rl->sizes = calloc(PROTO_MAX_INFLIGHT, sizeof(*rl->sizes));
	if (rl == NULL || rl->sizes == NULL) {
		free(rl);
		return pc_err_set(e, -ENOMEM, "out of memory");
	}
	*rl = (struct relay){ .src = src, .sink = sink, .r = r, .e = e, .npaths = npaths,
			      .sizes = rl->sizes, .hooks = rep->hooks, .flat = rep->flat };
	while (ret == 0 && !rl->finished) {
		int timeout = progress_s > 0 ? relay_ms_until(next) : -1;
		if (hook && (timeout < 0 || relay_ms_until(next_hook) < timeout))
			timeout = relay_ms_until(next_hook);
		/* A message already inside a ctl is not seen by poll: take it
		 * now, after a look at the signalfd. */
		bool src_pending = ctl_pending(src), sink_pending = ctl_pending(sink);
		int n = poll(p, sigfd >= 0 ? 3 : 2, src_pending || sink_pending ? 0 : timeout);
		if (n < 0 && errno != EINTR) {
			ret = pc_err_set(e, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (n > 0 && (p[2].revents & POLLIN)) {
			struct signalfd_siginfo si;
			ssize_t got = read(sigfd, &si, sizeof(si));
			char msg[64];
			snprintf(msg, sizeof(msg), "interrupted by signal %s",
				 got == (ssize_t)sizeof(si) ? strsignal((int)si.ssi_signo) : "?");
			ret = relay_fail(rl, -PC_E_INTERRUPTED, msg);
			break;
		}
		if (src_pending || (n > 0 && p[0].revents))
			ret = relay_one(rl, src, sink);
		if (ret == 0 && (sink_pending || (n > 0 && p[1].revents)))
			ret = relay_one(rl, sink, src);
		if (progress_s > 0 && platform_now_ns() >= next) {
			relay_progress(rl, start);
			next = platform_now_ns() + (uint64_t)progress_s * 1000000000u;
		}
		if (hook && platform_now_ns() >= next_hook) {
			relay_hook(rl, start);
			next_hook = platform_now_ns() + every;
		}
	}
	free(rl->sizes);
	free(rl);
	if (ret == 0 && r->failed > 0)
		ret = -PC_E_PARTIAL;
	return ret;
}
