/* SPDX-License-Identifier: Apache-2.0 */
/* temporary integration shim */
#ifndef PCOPY_ENTRY_H
#define PCOPY_ENTRY_H
#include "wire/proto.h"
#define PROTO_ENTF_SIZE_UNKNOWN PROTO_ENT_SIZE_UNKNOWN
#define PROTO_ENTF_LINKED PROTO_ENT_LINKED
#endif
