#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_disk_full: a destination file system that fills up: exit 11, "No space
# left on device", no final file, no temporary file, space given back.
source "$PCOPY_TEST_LIB"
needs_root "it mounts small tmpfs file systems to fill them"

# full_copy DIR DST ARGS...: `pcopy ARGS...` onto the full DIR fails with
# exit 11 and ENOSPC, leaves DST absent and DIR with no temporary file.
full_copy() {
    local dir=$1 dst=$2
    shift 2
    expect_fail "$PCOPY" "$@"
    [[ ! -e $dst ]] || fail "$dst exists after a failed copy ($*)"
    wait_no_temp_files "$dir"
    expect_rc 11
    expect_stderr_contains "No space left on device"
}

# used_kib DIR: KiB in use on the file system of DIR.
used_kib() {
    df -k --output=used "$1" | tail -n 1 | tr -d ' '
}

case_local() {
    local s round
    mkfile "$T/ten" 10M
    mount_tmpfs "$T/full" size=2m
    # Several times with each stream count, as the error races with the
    # streams still sending: it must still be reported as a full disk.
    for round in 1 2; do
        for s in 1 2 4 8; do
            full_copy "$T/full" "$T/full/ten" -s "$s" "$T/ten" "$T/full"
            expect_stderr_contains "ten"
            full_copy "$T/full" "$T/full/new" -s "$s" "$T/ten" "$T/full/new"
            expect_stderr_contains "new"
        done
    done
    dir_is_empty "$T/full" || fail "$T/full is not empty: $(ls -A "$T/full")"
    (($(used_kib "$T/full") < 100)) || fail "$T/full still uses $(used_kib "$T/full") KiB"
}

case_small_blocks() {
    mkfile "$T/ten" 10M
    mount_tmpfs "$T/full" size=2m
    full_copy "$T/full" "$T/full/ten" -s 4 -B 64k "$T/ten" "$T/full"
    full_copy "$T/full" "$T/full/ten" -s 8 -B 4k "$T/ten" "$T/full"
    # Standard input onto the full disk.
    full_copy "$T/full" "$T/full/in" -s 4 - "$T/full/in" <"$T/ten"
}

case_existing_file_kept() {
    mkfile "$T/ten" 10M
    mount_tmpfs "$T/full" size=2m
    mkfile "$T/full/keep" 500k
    cp "$T/full/keep" "$T/keep.orig"
    # Any failure must keep the old file; check that first, then the code.
    expect_fail "$PCOPY" "$T/ten" "$T/full/keep"
    same_file "$T/keep.orig" "$T/full/keep"
    no_temp_files "$T/full"
    # A small file still fits afterwards: the space was given back.
    mkfile "$T/small" 1M
    expect_exit 0 "$PCOPY" "$T/small" "$T/full/small"
    same_file "$T/small" "$T/full/small"
    expect_rc 11
    expect_stderr_contains "No space left on device"
}

# mentions TEXT NAME: TEXT names NAME itself, not a longer name that starts
# with it ("full/b" is not "full/big").
mentions() {
    local rest=$1
    while [[ $rest == *"$2"* ]]; do
        rest=${rest#*"$2"}
        [[ -z $rest || $rest =~ ^[^[:alnum:]._-] ]] && return 0
    done
    return 1
}

case_several_files() {
    local n line named=()
    mkfile "$T/a" 300k
    mkfile "$T/b" 300k
    mkfile "$T/big" 6M
    mount_tmpfs "$T/full" size=2m
    expect_exit 11 "$PCOPY" -s 2 "$T/a" "$T/b" "$T/big" "$T/full"
    # Which file hits the full disk first depends on how the two streams
    # interleave (big's blocks may fill it while b is written): pcopy
    # promises that the message names the file that failed, whichever it
    # is, and says the disk is full.
    expect_stderr_contains "No space left on device"
    while IFS= read -r line; do
        for n in a b big; do
            if mentions "$line" "$T/full/$n" || mentions "$line" "$T/$n"; then
                named+=("$n")
                continue 2
            fi
        done
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "this line names none of the files being copied: $line"
    done < <(grep -F "No space left on device" "$LAST_STDERR")
    # Nothing incomplete under a final name: a file that is there is whole.
    for n in a b big; do
        [[ ! -e $T/full/$n ]] || same_file "$T/$n" "$T/full/$n"
    done
    for n in "${named[@]}"; do
        [[ ! -e $T/full/$n ]] || fail "$T/full/$n is there, but the message says it failed"
    done
    log "several files onto a full disk: failed ${named[*]}; kept $(ls -A "$T/full" | tr '\n' ' ')"
    no_temp_files "$T/full"
}

case_daemon() {
    mkfile "$T/ten" 10M
    mkfile "$T/small" 100k
    mount_tmpfs "$T/root" size=2m
    mkdir -p "$T/local"
    start_daemon "$T/root"
    local k=(--key-file "$DAEMON_KEY")
    # A push onto the daemon's full disk.
    full_copy "$T/root" "$T/root/ten" -s 4 "$T/ten" "$DAEMON_URL/" "${k[@]}"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    dir_is_empty "$T/root" || fail "files left under the root: $(ls -A "$T/root")"
    # The daemon still serves.
    expect_exit 0 "$PCOPY" "$T/small" "$DAEMON_URL/small" "${k[@]}"
    same_file "$T/small" "$T/root/small"
    # A pull onto a full local disk.
    mount_tmpfs "$T/lfull" size=2m
    cp "$T/ten" "$T/local/ten"
    stop_daemon
    start_daemon "$T/local"
    full_copy "$T/lfull" "$T/lfull/ten" -s 4 "$DAEMON_URL/ten" "$T/lfull" --key-file "$DAEMON_KEY"
    dir_is_empty "$T/lfull" || fail "files left in $T/lfull: $(ls -A "$T/lfull")"
}

run_case local case_local
run_case small-blocks case_small_blocks
run_case existing-file-kept case_existing_file_kept
run_case several-files case_several_files
run_case daemon case_daemon
finish
