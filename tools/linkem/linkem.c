/* SPDX-License-Identifier: Apache-2.0 */
/* linkem: a user-space WAN link emulator between two network namespaces.
 *
 * The main thread opens a TUN device in each namespace, starts the workers
 * (link_run: one per direction, or one for both) and then only handles
 * signals: SIGUSR1 prints statistics, SIGTERM/SIGINT/SIGHUP stop. */
#include "link.h"
#include "opts.h"
#include "tun.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#define LINKEM_VERSION "1.0"

struct linkem_worker {
	pthread_t tid;
	bool started;              /* main thread only */
	struct link *links[2];     /* fixed before start */
	size_t n;
	int wake_fd;               /* worker polls it; main writes it */
	int done_fd;               /* worker writes it when it returns */
	const atomic_bool *stop;
	int ret;                   /* worker's, read by main after join */
	char err[256];             /* worker's, read by main after join */
};

static double linkem_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *linkem_worker_main(void *arg)
{
	struct linkem_worker *w = arg;
	uint64_t one = 1;

	w->ret = link_run(w->links, w->n, w->wake_fd, w->stop, w->err,
			  sizeof(w->err));
	if (write(w->done_fd, &one, sizeof(one)) < 0)
		w->ret = w->ret < 0 ? w->ret : -errno;
	return NULL;
}

/* Prints one block of statistics for both directions. */
static void linkem_print_stats(struct link **links, const char *why,
			       double t0)
{
	struct link_stats s;
	double mean;
	int d;

	printf("[stats %s uptime=%.3fs]\n", why, linkem_now_s() - t0);
	for (d = 0; d < 2; d++) {
		link_stats(links[d], &s);
		mean = s.tx_pkts ? (double)s.late_sum_ns / (double)s.tx_pkts
				 : 0.0;
		printf("%s rx_pkts=%llu rx_segs=%llu rx_bytes=%llu "
		       "tx_pkts=%llu tx_segs=%llu tx_bytes=%llu "
		       "drop_queue=%llu drop_loss=%llu drop_ring=%llu "
		       "drop_write=%llu qmax_bytes=%llu qmax_pkts=%llu "
		       "late_mean_us=%.1f late_max_us=%.1f late_over_1ms=%llu\n",
		       link_name(links[d]),
		       (unsigned long long)s.rx_pkts,
		       (unsigned long long)s.rx_segs,
		       (unsigned long long)s.rx_bytes,
		       (unsigned long long)s.tx_pkts,
		       (unsigned long long)s.tx_segs,
		       (unsigned long long)s.tx_bytes,
		       (unsigned long long)s.drop_queue,
		       (unsigned long long)s.drop_loss,
		       (unsigned long long)s.drop_ring,
		       (unsigned long long)s.drop_write,
		       (unsigned long long)s.qmax_bytes,
		       (unsigned long long)s.qmax_pkts,
		       mean / 1e3, (double)s.late_max_ns / 1e3,
		       (unsigned long long)s.late_1ms);
	}
	printf("[end stats]\n");
	fflush(stdout);
}

static void linkem_print_config(const struct opts *o)
{
	static const char *const dirs[2] = { "A->B", "B->A" };
	int d;

	printf("linkem %s: pid %d, A = %s/%s, B = %s/%s, offload %s, "
	       "threads %d\n", LINKEM_VERSION, (int)getpid(),
	       o->ns[0] ? o->ns[0] : "-", o->dev[0],
	       o->ns[1] ? o->ns[1] : "-", o->dev[1],
	       o->offload ? "on" : "off", o->threads);
	for (d = 0; d < 2; d++)
		printf("%s delay_ms=%.3f rate_mbit=%.3f queue_bytes=%llu "
		       "burst_bytes=%llu loss_pct=%.4f overhead=%u seed=%llu\n",
		       dirs[d], (double)o->p[d].delay_ns / 1e6,
		       (double)o->p[d].rate_bps / 1e6,
		       (unsigned long long)o->p[d].queue_bytes,
		       (unsigned long long)o->p[d].burst_bytes,
		       o->p[d].loss * 100.0, o->p[d].overhead,
		       (unsigned long long)o->p[d].seed);
	fflush(stdout);
}

/* Waits for signals until one says stop or a worker returns. */
static void linkem_serve(int sig_fd, int done_fd, struct link **links,
			 double t0)
{
	struct signalfd_siginfo si;
	struct pollfd fds[2] = { { sig_fd, POLLIN, 0 }, { done_fd, POLLIN, 0 } };

	for (;;) {
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			return;
		if (fds[1].revents & POLLIN)
			return;
		if (!(fds[0].revents & POLLIN))
			continue;
		if (read(sig_fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
			continue;
		if (si.ssi_signo != SIGUSR1) {
			printf("linkem: signal %u: stopping\n", si.ssi_signo);
			return;
		}
		linkem_print_stats(links, "SIGUSR1", t0);
	}
}

/* Starts the workers: one per direction, or one for both. Returns how many
 * started; *err is set when fewer than wanted did. */
static int linkem_start(struct linkem_worker *w, const struct opts *o,
			struct link **links, int wake_fd, int done_fd,
			const atomic_bool *stop, char *err, size_t errlen)
{
	int i, n = o->threads, rc;

	for (i = 0; i < n; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].links[0] = n == 1 ? links[0] : links[i];
		w[i].links[1] = links[1];
		w[i].n = n == 1 ? 2 : 1;
		w[i].wake_fd = wake_fd;
		w[i].done_fd = done_fd;
		w[i].stop = stop;
		rc = pthread_create(&w[i].tid, NULL, linkem_worker_main, &w[i]);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start a worker thread: %s",
				 strerror(rc));
			return i;
		}
		w[i].started = true;
	}
	return n;
}

/* Stops and joins the started workers. Returns 0, or the first worker's
 * error after printing it. */
static int linkem_stop(struct linkem_worker *w, int n, atomic_bool *stop,
		       int wake_fd)
{
	uint64_t one = 1;
	int i, ret = 0;

	atomic_store(stop, true);
	if (write(wake_fd, &one, sizeof(one)) < 0)
		perror("linkem: eventfd write");
	for (i = 0; i < n; i++) {
		if (!w[i].started)
			continue;
		if (pthread_join(w[i].tid, NULL) != 0)
			perror("linkem: pthread_join");
		if (w[i].ret < 0) {
			fprintf(stderr, "linkem: %s\n", w[i].err);
			ret = ret < 0 ? ret : w[i].ret;
		}
	}
	return ret;
}

/* Blocks the signals we serve (before any thread starts, so workers
 * inherit the mask) and returns a signalfd for them, or -1. */
static int linkem_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
		return -1;
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &set, SFD_CLOEXEC);
}

/* Opens both TUN devices and makes both directions. */
static int linkem_open(const struct opts *o, int fd[2], struct link *l[2],
		       char *err, size_t errlen)
{
	int d;

	for (d = 0; d < 2; d++) {
		fd[d] = tun_open(o->ns[d], o->dev[d], o->offload, err, errlen);
		if (fd[d] < 0)
			return fd[d];
	}
	l[0] = link_new("A->B", fd[0], fd[1], &o->p[0]);
	l[1] = link_new("B->A", fd[1], fd[0], &o->p[1]);
	if (l[0] == NULL || l[1] == NULL) {
		snprintf(err, errlen, "cannot allocate the packet buffers "
			 "(queue or rate x delay too large?)");
		return -ENOMEM;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct link *links[2] = { NULL, NULL };
	struct linkem_worker w[2];
	atomic_bool stop = false;
	char err[512] = "";
	int fd[2] = { -1, -1 }, sig_fd = -1, wake_fd = -1, done_fd = -1;
	int ret = 1, started = 0, d;
	double t0 = linkem_now_s();

	if (opts_parse(&o, argc, argv, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkem: %s\n", err);
		return 2;
	}
	if (o.help || o.version) {
		if (o.help)
			opts_usage(stdout, "linkem");
		else
			printf("linkem %s\n", LINKEM_VERSION);
		return 0;
	}
	sig_fd = linkem_signals();
	wake_fd = eventfd(0, EFD_CLOEXEC);
	done_fd = eventfd(0, EFD_CLOEXEC);
	if (sig_fd < 0 || wake_fd < 0 || done_fd < 0) {
		snprintf(err, sizeof(err), "signalfd/eventfd: %s",
			 strerror(errno));
		goto out;
	}
	if (linkem_open(&o, fd, links, err, sizeof(err)) < 0)
		goto out;
	linkem_print_config(&o);
	started = linkem_start(w, &o, links, wake_fd, done_fd, &stop, err,
			       sizeof(err));
	if (started == o.threads) {
		printf("linkem: ready\n");
		fflush(stdout);
		linkem_serve(sig_fd, done_fd, links, t0);
	}
	ret = linkem_stop(w, started, &stop, wake_fd) < 0 ||
	      started != o.threads;
	linkem_print_stats(links, "exit", t0);
out:
	if (err[0] != '\0')
		fprintf(stderr, "linkem: %s\n", err);
	for (d = 0; d < 2; d++) {
		link_free(links[d]);
		if (fd[d] >= 0)
			close(fd[d]);
	}
	if (sig_fd >= 0)
		close(sig_fd);
	if (wake_fd >= 0)
		close(wake_fd);
	if (done_fd >= 0)
		close(done_fd);
	return ret;
}
