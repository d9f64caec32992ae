/* SPDX-License-Identifier: Apache-2.0 */
/* utf8: telling valid UTF-8 from bytes that are not, for text that is
 * printed (log lines, JSON strings). */
#ifndef PCOPY_UTF8_H
#define PCOPY_UTF8_H

#include <stddef.h>

/* The length of the valid UTF-8 sequence at p (n >= 1 bytes left), 1 to 4
 * (1: an ASCII byte), or 0 when it is not one: a stray continuation byte,
 * a truncated sequence, an overlong form, a surrogate, or past U+10FFFF. */
size_t utf8_seq_len(const unsigned char *p, size_t n);

#endif
