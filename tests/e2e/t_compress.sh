#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_compress: -c end to end. Every codec round-trips through the command
# line (local, and through a daemon where the remote source compresses);
# per-stream levels really are used, as the statistics show; a corrupted
# compressed payload is caught (exit 12); zeros travel as holes and land
# sparse; random data is not compressed; bad -c values are refused.
source "$PCOPY_TEST_LIB"

# mktext FILE SIZE: text that compresses well (repeated lines with numbers).
mktext() {
    awk -v n="$2" 'BEGIN { s = 0; i = 0
        while (s < n) { l = sprintf("line %d of the pcopy compression test, mostly words %d\n", i, i % 97)
                        printf "%s", l; s += length(l); i++ } }' | head -c "$2" >"$1"
}

# stat_of NAME: a field of the -v stats line in the last command's stderr.
stat_of() {
    sed -n "s/.*stats .*\\b$1=\\([0-9.]*\\).*/\\1/p" "$LAST_STDERR" | tail -n 1
}

case_codecs_local() {
    local c
    mktext "$T/text" 3M
    mkdir -p "$T/d"
    for c in 0 1 6 9 zlib zlib:3 lz4 lz4:9 bz2:1 bz2 none auto 1,lz4,bz2:3,none; do
        expect_exit 0 "$PCOPY" -v -s 4 -B 256k -c "$c" "$T/text" "$T/d/out"
        same_file "$T/text" "$T/d/out"
        rm -f "$T/d/out"
    done
    # Text compresses: the wire carries much less than the file.
    expect_exit 0 "$PCOPY" -v -c 1 "$T/text" "$T/d/out"
    local wire
    wire=$(stat_of wire_bytes)
    [[ -n $wire && $wire -lt $((3 * 1024 * 1024 / 2)) ]] ||
        fail "-c 1 on text sent $wire bytes for 3 MiB"
    expect_stderr_contains "compression "
}

case_per_stream_levels() {
    # Two streams, two codecs: block k goes to stream k % 2, so each stream
    # carries half of the blocks, encoded its own way.
    mktext "$T/text" 8M
    expect_exit 0 "$PCOPY" -v -s 2 -B 256k -c lz4,bz2:9 "$T/text" "$T/out"
    same_file "$T/text" "$T/out"
    expect_stderr_contains "stream 0: lz4,"
    expect_stderr_contains "stream 1: bz2,"
    local w0 w1
    w0=$(sed -n 's/.*stream 0: [^,]*, [0-9]* bytes, \([0-9]*\) on the wire.*/\1/p' "$LAST_STDERR")
    w1=$(sed -n 's/.*stream 1: [^,]*, [0-9]* bytes, \([0-9]*\) on the wire.*/\1/p' "$LAST_STDERR")
    [[ -n $w0 && -n $w1 ]] || fail "no per-stream statistics"
    # bzip2 at level 9 packs the same kind of text tighter than lz4.
    ((w1 < w0)) || fail "stream 1 (bz2:9) sent $w1 bytes, stream 0 (lz4) $w0: levels not used"
}

case_random_stays_raw() {
    mkfile "$T/rand" 4M
    expect_exit 0 "$PCOPY" -v -c 9 "$T/rand" "$T/out"
    same_file "$T/rand" "$T/out"
    local wire
    wire=$(stat_of wire_bytes)
    # Raw blocks plus headers: never more than the file and a little.
    ((wire <= 4 * 1024 * 1024 + 4096)) || fail "random data grew to $wire bytes on the wire"
}

case_zeros_are_holes() {
    head -c 64M /dev/zero >"$T/zero"
    expect_exit 0 "$PCOPY" -v -c 1 "$T/zero" "$T/out"
    same_file "$T/zero" "$T/out"
    local wire blocks
    wire=$(stat_of wire_bytes)
    ((wire < 64 * 1024)) || fail "64 MiB of zeros took $wire bytes on the wire"
    blocks=$(stat -c %b "$T/out")
    ((blocks < 1024)) || fail "the copy of zeros is not sparse ($blocks blocks)"
}

case_daemon_pull_compressed() {
    # The daemon is the source: it parses -c from the request.
    mkdir -p "$T/root" "$T/local"
    mktext "$T/root/text" 2M
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -v -c lz4 "$DAEMON_URL/text" "$T/local/text" --key-file "$DAEMON_KEY"
    same_file "$T/root/text" "$T/local/text"
    expect_stderr_contains "compression "
    # A spec the client accepts but typed wrong on purpose is refused by
    # the client before anything is sent.
    expect_exit 1 "$PCOPY" -c zstd "$DAEMON_URL/text" "$T/local/x" --key-file "$DAEMON_KEY"
    expect_stderr_contains "zstd"
}

case_corrupt_compressed() {
    # base64 compresses, but only to about 3/4: blocks stay large enough
    # (over 64 KiB) for the shim to corrupt them.
    head -c 14M /dev/urandom | base64 -w 76 >"$T/text"
    mkdir -p "$T/d"
    shim_env 300000
    expect_fail env "${SHIM_ENV[@]}" "$PCOPY" -s 4 -c 1 "$T/text" "$T/d/out"
    [[ ! -e $T/d/out ]] || fail "a corrupted compressed transfer left a file"
    wait_no_temp_files "$T/d"
    expect_rc 12
}

case_bad_specs() {
    mkfile "$T/f" 1000
    local spec
    for spec in 10 zstd zlib:0x lz4:13 bz2:0 "1,,2" "" auto,1; do
        expect_exit 1 "$PCOPY" -c "$spec" "$T/f" "$T/out"
        expect_stderr_contains "-c"
    done
    [[ ! -e $T/out ]] || fail "a refused -c still copied"
}

run_case codecs-local case_codecs_local
run_case per-stream-levels case_per_stream_levels
run_case random-stays-raw case_random_stays_raw
run_case zeros-are-holes case_zeros_are_holes
run_case daemon-pull-compressed case_daemon_pull_compressed
run_case corrupt-compressed case_corrupt_compressed
run_case bad-specs case_bad_specs
finish
