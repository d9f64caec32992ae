/* SPDX-License-Identifier: Apache-2.0 */
/* keyfile: the daemon's shared secret on disk.
 *
 * A key file holds 64 lowercase or uppercase hex digits (32 bytes) and an
 * optional trailing newline. It must be a regular file that neither group
 * nor others can read or write; pcopy refuses anything else and names the
 * file in the message. */
#ifndef PCOPY_KEYFILE_H
#define PCOPY_KEYFILE_H

#include <stdint.h>
#include "sys/err.h"
#include "wire/proto.h"

/* Creates path (it must not exist: O_EXCL) with mode 0600 and a new random
 * key. Returns 0, or a negative code with the detail (naming path) in e. */
int keyfile_generate(const char *path, struct pc_err *e);

/* Reads the key in path into key. Returns 0, or -PC_E_USAGE for a key file
 * that is not there or not ours to read, has loose permissions, is not
 * regular, or is malformed, or -errno for one that cannot be opened or
 * read for another reason; the detail names path. */
int keyfile_load(const char *path, uint8_t key[PROTO_KEY_LEN], struct pc_err *e);

/* The value of hexadecimal digit c (either case), or -1. */
int keyfile_hex_digit(char c);

#endif
