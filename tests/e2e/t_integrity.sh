#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_integrity: a byte flipped on the wire (by the LD_PRELOAD shim in the
# sending process) is caught: exit 12, a message about the checksum, no
# final file, no temporary file, and an existing file is kept. The daemon
# cases run in clear (--no-encrypt), where the block checksums are what
# catches it; in TLS the record layer catches it first (case tls-tampered).
source "$PCOPY_TEST_LIB"

# corrupt_fails DIR DST ARGS...: `pcopy ARGS...` ends with exit 12, a
# message about a checksum, no DST and no temporary file in DIR.
corrupt_fails() {
    local dir=$1 dst=$2
    shift 2
    expect_fail "$@"
    [[ ! -e $dst ]] || fail "$dst exists after a corrupted transfer"
    wait_no_temp_files "$dir"
    expect_rc 12
    expect_stderr_contains "checksum"
}

case_local() {
    local s
    mkfile "$T/src" 20M
    mkdir -p "$T/d"
    # In a local copy the client sends; its sink child inherits the preload
    # but sends no block payloads.
    shim_env 3000000
    # Each stream count twice: the sender may see the receiver hang up
    # before it hears why, and must still report the checksum failure.
    for s in 1 4 8 1 4 8; do
        corrupt_fails "$T/d" "$T/d/out.$s" env "${SHIM_ENV[@]}" "$PCOPY" -s "$s" "$T/src" "$T/d/out.$s"
        expect_stderr_contains "out.$s"
    done
    # Into a directory, and with a small block size.
    corrupt_fails "$T/d" "$T/d/src" env "${SHIM_ENV[@]}" "$PCOPY" -B 64k "$T/src" "$T/d"
    # The shim really is transparent when it does not corrupt.
    expect_exit 0 env "${SHIM_ENV[@]}" PCOPY_CORRUPT_AFTER=999999999999 "$PCOPY" "$T/src" "$T/d/clean"
    same_file "$T/src" "$T/d/clean"
}

case_existing_kept() {
    mkfile "$T/src" 20M
    mkfile "$T/dst" 123456
    cp "$T/dst" "$T/dst.orig"
    shim_env 3000000
    expect_fail env "${SHIM_ENV[@]}" "$PCOPY" "$T/src" "$T/dst"
    same_file "$T/dst.orig" "$T/dst"
    no_temp_files "$T"
    expect_rc 12
    expect_stderr_contains "checksum"
}

case_stdin_and_stdout() {
    mkfile "$T/src" 20M
    shim_env 3000000
    # From standard input.
    corrupt_fails "$T" "$T/from_stdin" env "${SHIM_ENV[@]}" "$PCOPY" -s 4 - "$T/from_stdin" <"$T/src"
    # To standard output: the bad block must not be written out.
    expect_fail env "${SHIM_ENV[@]}" "$PCOPY" -s 4 "$T/src" - >"$T/stdout"
    local size
    size=$(stat -c %s "$T/stdout")
    cmp -s -n "$size" "$T/src" "$T/stdout" || fail "standard output got corrupted bytes"
    ((size < 20971520)) || fail "standard output got the whole file despite the corruption"
    expect_rc 12
    expect_stderr_contains "checksum"
}

case_daemon_pull() {
    # In a pull the daemon's session sends: preload the daemon.
    mkdir -p "$T/root" "$T/local"
    mkfile "$T/root/src" 20M
    shim_env 3000000
    DAEMON_ARGS=(--allow-unencrypted)
    start_daemon "$T/root" "${SHIM_ENV[@]}"
    local s
    for s in 1 4; do
        corrupt_fails "$T/local" "$T/local/out.$s" "$PCOPY" --no-encrypt -s "$s" "$DAEMON_URL/src" "$T/local/out.$s" --key-file "$DAEMON_KEY"
        expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    done
    corrupt_fails "$T/local" "$T/local/src" "$PCOPY" --no-encrypt "$DAEMON_URL/src" "$T/local" --key-file "$DAEMON_KEY"
    # The daemon logged it and still serves (each session process starts
    # with a fresh shim count, so a small file is not corrupted).
    grep -q checksum "$DAEMON_LOG" || fail "the daemon did not log the checksum failure"
    mkfile "$T/root/small" 100k
    expect_exit 0 "$PCOPY" --no-encrypt "$DAEMON_URL/small" "$T/local/small" --key-file "$DAEMON_KEY"
    same_file "$T/root/small" "$T/local/small"
}

case_daemon_push() {
    # In a push the client sends: preload the client; the daemon must drop
    # the file and its temporary file.
    mkdir -p "$T/root"
    mkfile "$T/src" 20M
    DAEMON_ARGS=(--allow-unencrypted)
    start_daemon "$T/root"
    cp "$T/src" "$T/root/existing"
    truncate -s 5M "$T/root/existing"
    cp "$T/root/existing" "$T/existing.orig"
    shim_env 3000000
    corrupt_fails "$T/root" "$T/root/src" env "${SHIM_ENV[@]}" "$PCOPY" --no-encrypt -s 4 "$T/src" "$DAEMON_URL/" --key-file "$DAEMON_KEY"
    expect_fail env "${SHIM_ENV[@]}" "$PCOPY" --no-encrypt -s 2 "$T/src" "$DAEMON_URL/existing" --key-file "$DAEMON_KEY"
    same_file "$T/existing.orig" "$T/root/existing"
    wait_no_temp_files "$T/root"
    expect_rc 12
}

case_tls_tampered() {
    # The shim flips a byte of a TLS record the sender wrote (ciphertext):
    # the receiver's record layer refuses it, the copy fails with exit 12
    # and says the data was altered, and nothing is left behind.
    mkdir -p "$T/d"
    mkfile "$T/src" 20M
    shim_env 3000000
    local s
    for s in 1 4; do
        expect_fail env "${SHIM_ENV[@]}" "$PCOPY" --encrypt -s "$s" "$T/src" "$T/d/out.$s"
        [[ ! -e $T/d/out.$s ]] || fail "$T/d/out.$s exists after a tampered transfer"
        wait_no_temp_files "$T/d"
        expect_rc 12
        expect_stderr_contains "altered"
    done
}

run_case local case_local
run_case existing-kept case_existing_kept
run_case stdin-and-stdout case_stdin_and_stdout
run_case daemon-pull case_daemon_pull
run_case daemon-push case_daemon_push
run_case tls-tampered case_tls_tampered
finish
