/* SPDX-License-Identifier: Apache-2.0 */
/* loglimit: summarises repeated log lines per key (a daemon's source
 * addresses), so that a flood cannot fill the disk. The first event of a
 * key opens a window of window_ns: it is to be logged; the others in that
 * window are only counted, and when the window ends the report callback
 * gets their number, once. The table holds at most cap keys; when it is
 * full, the key whose window opened first is reported early and goes.
 *
 * Keys that change all the time (a flood from many addresses) would still
 * give a line per event, so there is a budget too: at most budget keys
 * open a window (get a logged line) in any one global window of window_ns.
 * Past that, events of keys not in the table are counted together and
 * reported once, with a NULL key, when the global window ends. So no more
 * than about 3 x budget + 1 lines come out per window, however many keys.
 *
 * The clock is the caller's (now_ns, monotonic), so tests can drive it.
 * Not thread-safe: one owner (the daemon's parent loop). */
#ifndef PCOPY_LOGLIMIT_H
#define PCOPY_LOGLIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define LOGLIMIT_MAX_KEY 64u       /* longer keys are cut to 63 bytes */

struct loglimit;

/* Called with the key and how many events of it were counted and not
 * logged (more >= 1) when their window ends or the key is pushed out; key
 * is NULL for the events of keys past the budget (all keys together). */
typedef void (*loglimit_report_fn)(void *arg, const char *key, unsigned long more);

/* A table of cap (>= 1) keys with windows of window_ns (> 0), and at
 * most budget (>= 1) new windows in any global window. Returns NULL when
 * out of memory (or on a bad argument). */
struct loglimit *loglimit_new(unsigned cap, unsigned budget, uint64_t window_ns,
			      loglimit_report_fn report, void *arg);

/* Forgets everything without reporting. NULL is a no-op. */
void loglimit_free(struct loglimit *l);

/* An event of key at now_ns: returns true if the caller should log it
 * (the first in its key's window, within the budget), false if it was
 * only counted. Ends the windows that are over first (reporting them). */
bool loglimit_admit(struct loglimit *l, const char *key, uint64_t now_ns);

/* Ends, and reports, the windows that are over at now_ns (UINT64_MAX:
 * all of them, as at exit). Returns the ns from now_ns to the end of the
 * next window still open, or UINT64_MAX if none is. */
uint64_t loglimit_flush(struct loglimit *l, uint64_t now_ns);

#endif
