/* SPDX-License-Identifier: Apache-2.0 */
/* api: the small entry points of libpcopy: set-up, defaults, keys, exit
 * codes. The copy, serve and server entry points live in client.c,
 * daemon.c and server.c. */
#include <pcopy/pcopy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sys/err.h"
#include "sys/fault.h"
#include "wire/keyfile.h"
#include "sys/log.h"
#include "sys/platform.h"
#include "roles/api.h"

#ifndef PCOPY_VERSION
#define PCOPY_VERSION "0.0.0"
#endif

/* Written once by pcopy_init before any thread exists; read-only after. */
static int g_sigfd = -1;
static int g_verbosity = 1;

int api_sigfd(void)
{
	return g_sigfd;
}

int api_verbosity(void)
{
	return g_verbosity;
}

int pcopy_init(int verbosity, const char *prefix)
{
	static const int levels[] = { LOG_QUIET, LOG_ERROR, LOG_WARN, LOG_WARN, LOG_INFO,
				      LOG_DEBUG };
	int i = verbosity < -2 ? -2 : verbosity > 3 ? 3 : verbosity;

	log_setup(levels[i + 2], prefix);
	g_verbosity = verbosity;
	/* Test-only fault injection (sys/fault.h); never set by users. */
	const char *fault = getenv("PCOPY_TEST_FAULT");
	if (fault_arm_spec(fault) < 0) {
		log_error("PCOPY_TEST_FAULT: '%s' is not SITE:N[,SITE:N...] (see src/sys/fault.h)",
			  fault);
		return -PC_E_USAGE;
	}
	g_sigfd = platform_signals_setup();
	return g_sigfd < 0 ? g_sigfd : 0;
}

void pcopy_log_hooks(void (*before)(void *arg), void (*after)(void *arg), void *arg)
{
	log_set_hooks(before, after, arg);
}

void pcopy_finish(void)
{
	/* Nothing to report if it fails: the process is about to end anyway. */
	(void)platform_signals_ignore();
}

void pcopy_opts_defaults(struct pcopy_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->streams = PCOPY_DEFAULT_STREAMS;
	o->timeout_s = PCOPY_DEFAULT_TIMEOUT;
	o->verbosity = 1;
	o->self_exe = "/proc/self/exe";
	o->control_fd = -1;
}

int api_result(struct pcopy_result *r, struct pc_err *e, int ret)
{
	char msg[sizeof(r->msg)];

	r->code = ret;
	pc_err_get(e, msg, sizeof(msg));
	/* The caller prints it, and it may quote a peer: one line, no
	 * terminal controls, as in the log. */
	log_escape(r->msg, sizeof(r->msg), msg);
	if (ret < 0 && r->msg[0] == '\0')
		snprintf(r->msg, sizeof(r->msg), "%s", pc_strerror(ret));
	pc_err_destroy(e);
	return ret;
}

int pcopy_gen_key(const char *path, struct pcopy_result *r)
{
	struct pc_err e;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	return api_result(r, &e, keyfile_generate(path, &e));
}

int pcopy_exit_code(int code)
{
	return pc_exit_code(code);
}

const char *pcopy_version(void)
{
	return PCOPY_VERSION;
}

void pcopy_print_error(const struct pcopy_result *r)
{
	log_escaped(LOG_ERROR, r->msg);
}
