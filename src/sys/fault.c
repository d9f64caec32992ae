/* SPDX-License-Identifier: Apache-2.0 */
/* fault: test-only fault injection (see fault.h). */
#include "sys/fault.h"

#include <stdlib.h>
#include <string.h>

#include "sys/err.h"

atomic_uint fault_armed;

/* Calls left before the site fires: 0 = unarmed, 1 = the next call. */
static atomic_uint fault_countdown[FAULT_SITES];

static const char *const fault_names[FAULT_SITES] = {
	[FAULT_ENCODER_NEW] = "encoder_new",
	[FAULT_COMPRESS] = "compress",
	[FAULT_WALK_OPENDIR] = "walk_opendir",
	[FAULT_WALK_READDIR] = "walk_readdir",
	[FAULT_SOURCE_OPEN] = "source_open",
	[FAULT_SINK_WRITE] = "sink_write",
	[FAULT_SINK_VERIFY] = "sink_verify",
	[FAULT_SINK_SAME] = "sink_same",
	[FAULT_SINK_SLOW] = "sink_slow",
	[FAULT_SUMS_SLOW] = "sums_slow",
	[FAULT_SINK_KEPT] = "sink_kept",
	[FAULT_DATA_PROBE] = "data_probe",
	[FAULT_DATA_PROBE_SLOW] = "data_probe_slow",
	[FAULT_DATA_LATE] = "data_late",
};

void fault_arm(enum fault_site site, unsigned nth)
{
	unsigned old = atomic_exchange(&fault_countdown[site], nth);

	if (old == 0 && nth != 0)
		atomic_fetch_add(&fault_armed, 1);
	else if (old != 0 && nth == 0)
		atomic_fetch_sub(&fault_armed, 1);
}

bool fault_fire_slow(enum fault_site site)
{
	unsigned left = atomic_load(&fault_countdown[site]);

	/* Count down without going below zero; the call that takes it from
	 * 1 to 0 is the one that fails. */
	while (left != 0 && !atomic_compare_exchange_weak(&fault_countdown[site], &left, left - 1))
		;
	if (left != 1)
		return false;
	atomic_fetch_sub(&fault_armed, 1);
	return true;
}

/* One "SITE:N" item of len bytes. */
static int fault_parse_item(const char *s, size_t len, enum fault_site *site, unsigned *nth)
{
	const char *colon = memchr(s, ':', len);
	char num[12];
	char *end;

	if (colon == NULL || (size_t)(s + len - colon - 1) >= sizeof(num) || colon + 1 == s + len)
		return -PC_E_USAGE;
	memcpy(num, colon + 1, (size_t)(s + len - colon - 1));
	num[s + len - colon - 1] = '\0';
	if (num[0] < '0' || num[0] > '9')
		return -PC_E_USAGE;
	unsigned long v = strtoul(num, &end, 10);
	if (*end != '\0' || v == 0 || v > 1000000000ul)
		return -PC_E_USAGE;
	for (unsigned i = 0; i < FAULT_SITES; i++) {
		if (strlen(fault_names[i]) == (size_t)(colon - s) &&
		    memcmp(fault_names[i], s, (size_t)(colon - s)) == 0) {
			*site = (enum fault_site)i;
			*nth = (unsigned)v;
			return 0;
		}
	}
	return -PC_E_USAGE;
}

int fault_arm_spec(const char *spec)
{
	enum fault_site sites[FAULT_SITES * 4];
	unsigned nths[FAULT_SITES * 4], n = 0;

	if (spec == NULL || spec[0] == '\0')
		return 0;
	/* Parse everything first: a malformed spec arms nothing. */
	for (const char *p = spec;;) {
		size_t len = strcspn(p, ",");
		if (n == sizeof(sites) / sizeof(sites[0]) ||
		    fault_parse_item(p, len, &sites[n], &nths[n]) < 0)
			return -PC_E_USAGE;
		n++;
		if (p[len] == '\0')
			break;
		p += len + 1;
	}
	for (unsigned i = 0; i < n; i++)
		fault_arm(sites[i], nths[i]);
	return 0;
}
