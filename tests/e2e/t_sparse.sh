#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_sparse: sparse files, over 4 GiB, are copied quickly (holes are skipped)
# and stay sparse; small files of zeros, which travel packed, are copied.
source "$PCOPY_TEST_LIB"

GIB=$((1024 * 1024 * 1024))
MIB=$((1024 * 1024))

# put FILE OFFSET BYTES: write BYTES random bytes at OFFSET, keeping the rest.
put() {
    head -c "$3" /dev/urandom |
        dd of="$1" bs=1M seek="$2" oflag=seek_bytes conv=notrunc status=none
}

# allocated_kib FILE: disk space FILE uses, in KiB.
allocated_kib() {
    du -k -- "$1" | cut -f1
}

# check_sparse_copy SRC DST MAX_KIB: DST has SRC's size and contents and uses
# at most MAX_KIB of disk.
check_sparse_copy() {
    [[ $(stat -c %s "$2") == "$(stat -c %s "$1")" ]] ||
        fail "$2 has $(stat -c %s "$2") bytes, $1 has $(stat -c %s "$1")"
    same_sparse_file "$1" "$2"
    local used
    used=$(allocated_kib "$2")
    ((used <= $3)) || fail "$2 uses $used KiB of disk, more than $3: the holes were filled"
}

case_big_sparse() {
    local src=$T/sparse dst=$T/copy start secs
    truncate -s 5G "$src"
    put "$src" 0 $((3 * MIB))
    put "$src" $((2 * GIB + 1)) $((2 * MIB + 7))
    put "$src" $((4 * GIB + GIB / 2)) $((3 * MIB))
    # And at the end, so the file ends in data at an odd offset.
    head -c $((MIB + 123)) /dev/urandom >>"$src"
    local size
    size=$(stat -c %s "$src")
    ((size > 4 * GIB)) || fail "the source is only $size bytes"
    start=$(now)
    expect_exit 0 "$PCOPY" -s 4 "$src" "$dst"
    secs=$(secs_since "$start")
    log "5 GiB sparse copy took $secs s"
    expect_summary "$size" 1 4
    # About 9 MiB of data: allow some block rounding, but no filled holes.
    check_sparse_copy "$src" "$dst" $((32 * 1024))
    # Holes are skipped, not read: far quicker than moving 5 GiB.
    awk -v s="$secs" -v k="$SLOW" 'BEGIN { exit !(s < 20 * k) }' ||
        fail "the sparse copy took $secs s; holes do not seem to be skipped"
    no_temp_files "$T"
}

case_sparse_small_blocks() {
    # Data that does not start or end on a block boundary, one stream, and
    # a 64k block size, so some blocks are part hole, part data.
    local src=$T/sparse dst=$T/copy
    truncate -s $((300 * MIB + 5)) "$src"
    put "$src" $((10 * MIB + 1000)) 100000
    put "$src" $((200 * MIB - 3)) $((MIB + 9))
    put "$src" $((300 * MIB - 10)) 15
    expect_exit 0 "$PCOPY" -s 1 -B 64k "$src" "$dst"
    check_sparse_copy "$src" "$dst" $((8 * 1024))
    expect_exit 0 "$PCOPY" -s 8 -B 4M "$src" "$dst.8"
    check_sparse_copy "$src" "$dst.8" $((24 * 1024))
}

case_all_hole() {
    # A file that is one big hole, and one whose data is all at the start.
    truncate -s 3G "$T/hole"
    expect_exit 0 "$PCOPY" -s 4 "$T/hole" "$T/hole.copy"
    check_sparse_copy "$T/hole" "$T/hole.copy" 1024
    mkfile "$T/head" 2M
    truncate -s 1G "$T/head"
    expect_exit 0 "$PCOPY" -s 2 "$T/head" "$T/head.copy"
    check_sparse_copy "$T/head" "$T/head.copy" 4096
}

case_sparse_through_daemon() {
    # Push and pull keep the holes too.
    local src=$T/sparse
    mkdir -p "$T/root"
    truncate -s 2G "$src"
    put "$src" $((GIB + 12345)) $((2 * MIB))
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -s 4 "$src" "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    check_sparse_copy "$src" "$T/root/pushed" 8192
    expect_exit 0 "$PCOPY" -s 4 "$DAEMON_URL/pushed" "$T/pulled" --key-file "$DAEMON_KEY"
    check_sparse_copy "$src" "$T/pulled" 8192
}

# Small files of zeros travel packed, and a pack whose every byte is zero
# (statuses and contents) is still a pack: it was once sent as a hole,
# which the sink refused ("malformed block header", exit 2). Alone, in a
# tree, with and without compression, locally and through a daemon.
case_small_zero_files() {
    local f
    mkdir -p "$T/zeros/sub" "$T/root"
    printf '\0' >"$T/zeros/one"
    head -c 100 /dev/zero >"$T/zeros/hundred"
    for f in a b c d; do head -c 3000 /dev/zero >"$T/zeros/sub/$f"; done
    expect_exit 0 "$PCOPY" "$T/zeros/one" "$T/one.copy"
    same_file "$T/zeros/one" "$T/one.copy"
    expect_exit 0 "$PCOPY" -c 0 "$T/zeros/hundred" "$T/hundred.copy"
    same_file "$T/zeros/hundred" "$T/hundred.copy"
    expect_exit 0 "$PCOPY" -r -c 1 "$T/zeros" "$T/tree.copy"
    for f in one hundred sub/a sub/b sub/c sub/d; do same_file "$T/zeros/$f" "$T/tree.copy/$f"; done
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -r -s 2 "$T/zeros" "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    expect_exit 0 "$PCOPY" -r -s 2 "$DAEMON_URL/pushed" "$T/pulled" --key-file "$DAEMON_KEY"
    for f in one hundred sub/a sub/b sub/c sub/d; do
        same_file "$T/zeros/$f" "$T/root/pushed/$f"
        same_file "$T/zeros/$f" "$T/pulled/$f"
    done
}

run_case small-zero-files case_small_zero_files
run_case big-sparse case_big_sparse
run_case sparse-small-blocks case_sparse_small_blocks
run_case all-hole case_all_hole
run_case sparse-through-daemon case_sparse_through_daemon
finish
