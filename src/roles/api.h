/* SPDX-License-Identifier: Apache-2.0 */
/* api: process-wide facts set once by pcopy_init before any thread exists,
 * and the helper that turns an internal error record into a
 * struct pcopy_result. Internal to libpcopy. */
#ifndef PCOPY_API_H
#define PCOPY_API_H

#include <pcopy/pcopy.h>

#include "sys/err.h"

/* The signalfd for SIGINT/SIGTERM/SIGHUP/SIGQUIT, or -1 before pcopy_init. */
int api_sigfd(void);

/* The verbosity given to pcopy_init (passed on to a local child). */
int api_verbosity(void);

/* Fills r->code and r->msg from ret and e, destroys e, returns ret. */
int api_result(struct pcopy_result *r, struct pc_err *e, int ret);

#endif
