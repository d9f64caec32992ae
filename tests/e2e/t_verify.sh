#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_verify: -e (--verify) reads every file the sink wrote back from the disk
# and puts it in place only if it is what the source sent. In every mode
# (local, ssh push and pull, daemon push and pull, third party) good copies
# pass, sparse and compressed ones too. A bad read back (the test-only
# fault site sink_verify inverts a byte of what is read, as a bad disk
# would) fails that file only: exit 12, nothing under its name, the message
# names it, and in a tree the other files arrive. The sink is the one that
# verifies, so the fault is armed where the sink runs: here for a local
# copy (its sink is our child) and a pull, in the daemon for a push to it.
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

make_files() {
    mkdir -p "$1/t/a"
    mkfile "$1/t/big" 3M
    mkfile "$1/t/a/small" 3000
    truncate -s 4M "$1/t/sparse"
    printf 'middle' | dd of="$1/t/sparse" bs=1 seek=1500000 conv=notrunc 2>/dev/null
}

case_good() {
    make_files "$T/src"
    mkdir "$T/ssh" "$T/pull" "$T/d3" "$T/root"
    expect_exit 0 "$PCOPY" -e -r "$T/src/t" "$T/local"
    diff -r "$T/src/t" "$T/local" || fail "the local copy differs"
    expect_exit 0 "$PCOPY" -e -r -c 1 "$T/src/t" "pctest:$T/ssh/"
    diff -r "$T/src/t" "$T/ssh/t" || fail "the ssh push differs"
    expect_exit 0 "$PCOPY" -e -r "pctest:$T/src/t" "$T/pull/"
    diff -r "$T/src/t" "$T/pull/t" || fail "the ssh pull differs"
    expect_exit 0 "$PCOPY" -e -r "h1:$T/src/t" "h2:$T/d3/"
    diff -r "$T/src/t" "$T/d3/t" || fail "the third-party copy differs"
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -e -r "$T/src/t" "$DAEMON_URL/" --key-file "$DAEMON_KEY"
    diff -r "$T/src/t" "$T/root/t" || fail "the daemon push differs"
    expect_exit 0 "$PCOPY" -e -r "$DAEMON_URL/t" "$T/back" --key-file "$DAEMON_KEY"
    diff -r "$T/src/t" "$T/back" || fail "the daemon pull differs"
    # The sparse file stays sparse (its hole is not written to verify it).
    (($(stat -c %b "$T/local/sparse") * 512 < 1048576)) ||
        fail "the verified sparse copy is not sparse: $(stat -c %b "$T/local/sparse") blocks"
}

# expect_unverified NAME: the last command failed -e on NAME only.
expect_unverified() {
    expect_stderr_matches "'[^']*$1' read back from the disk is not what was sent: not put in place \(--verify\)"
    expect_stderr_contains "1 file read back from the disk other than sent, and was not put in place (--verify)"
}

case_bad_file() {
    mkfile "$T/f" 3M
    mkfile "$T/small" 1000
    expect_exit 12 env PCOPY_TEST_FAULT=sink_verify:1 "$PCOPY" -e "$T/f" "$T/out"
    expect_unverified out
    [[ ! -e $T/out ]] || fail "a file that read back wrong was put in place"
    expect_exit 12 env PCOPY_TEST_FAULT=sink_verify:1 "$PCOPY" -e "$T/small" "$T/out.small"
    expect_unverified out.small
    [[ ! -e $T/out.small ]] || fail "a small file that read back wrong was put in place"
    no_temp_files "$T"
    # Without -e the fault site is never reached.
    expect_exit 0 env PCOPY_TEST_FAULT=sink_verify:1 "$PCOPY" "$T/f" "$T/plain"
    same_file "$T/f" "$T/plain"
    # Written in place (--checksum --inplace, a file of the same size): the
    # file's message says that it stays so, and the summary does not say
    # otherwise.
    mkfile "$T/g" 3M
    expect_exit 12 env PCOPY_TEST_FAULT=sink_verify:1 "$PCOPY" -e --checksum --inplace "$T/g" \
        "$T/plain"
    expect_stderr_contains "it was written in place (--inplace): copy it again"
    expect_stderr_contains "1 file read back from the disk other than sent (--verify); the message of each says whether it was written in place (--inplace)"
    expect_stderr_lacks "not put in place"
}

case_bad_in_tree() {
    make_files "$T/src"
    # Through ssh, pulled: the sink is here, and so is the fault.
    expect_exit 12 env PCOPY_TEST_FAULT=sink_verify:2 "$PCOPY" -e -r -s 1 "pctest:$T/src/t" "$T/copy"
    expect_stderr_contains "read back from the disk is not what was sent"
    [[ $(find "$T/copy" -type f | wc -l) -eq 2 ]] || fail "not exactly the other two files arrived"
    for f in big a/small sparse; do
        [[ ! -e $T/copy/$f ]] || cmp -s "$T/src/t/$f" "$T/copy/$f" ||
            fail "$f arrived with other bytes"
    done
    no_temp_files "$T/copy"
}

case_daemon_push() {
    mkdir "$T/root"
    mkfile "$T/f" 2M
    # (Each session is a fork of the daemon, armed as the daemon is.)
    start_daemon "$T/root" env PCOPY_TEST_FAULT=sink_verify:1
    expect_exit 12 "$PCOPY" -e "$T/f" "$DAEMON_URL/f" --key-file "$DAEMON_KEY"
    expect_unverified f
    [[ ! -e $T/root/f ]] || fail "the daemon put a file that read back wrong in place"
    no_temp_files "$T/root"
}

sshd_start
run_case good case_good
run_case bad-file case_bad_file
run_case bad-in-tree case_bad_in_tree
run_case daemon-push case_daemon_push
finish
