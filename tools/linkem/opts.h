/* SPDX-License-Identifier: Apache-2.0 */
/* opts: linkem's command line, parsed with a table into a struct. */
#ifndef LINKEM_OPTS_H
#define LINKEM_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "link.h"

enum { OPTS_AB = 0, OPTS_BA = 1 };   /* direction index: A->B, B->A */

struct opts {
	const char *ns[2];             /* namespace of TUN A and B (or NULL) */
	const char *dev[2];            /* TUN device names */
	struct link_params p[2];       /* per direction */
	bool offload;                  /* TSO/GSO super-packets */
	int threads;                   /* 1: one loop; 2: a thread each way */
	bool help, version;            /* print and exit */
};

/* Fills o from argv. Returns 0, or -EINVAL with a message that names the
 * option in err. Pointers in o point into argv. */
int opts_parse(struct opts *o, int argc, char **argv, char *err,
	       size_t errlen);

/* Prints the usage text to f. */
void opts_usage(FILE *f, const char *prog);

#endif
