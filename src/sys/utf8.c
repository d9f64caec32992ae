// SPDX-License-Identifier: Apache-2.0
/* utf8: valid UTF-8 sequences (utf8.h). */
#include "sys/utf8.h"

size_t utf8_seq_len(const unsigned char *p, size_t n)
{
	size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;

	if (len <= 1)
		return len;
	if (p[0] > 0xf4 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	/* Overlong three- and four-byte forms, surrogates, past U+10FFFF. */
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return len;
}
