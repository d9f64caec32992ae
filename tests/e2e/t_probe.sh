#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_probe: `pcopy --probe` through every transport: ssh to a host in
# another network namespace whose veth link is capped at 200 Mbit/s by a
# tbf qdisc (the measured network must lie near the cap), data through ssh
# streams, and a daemon; its table and advice (which a copy then takes as
# options); temporary files gone on both sides, also after Ctrl-C; a
# daemon's root it cannot leave; and the errors of a bad host, key or
# directory with their exit codes.
# ctest: cost 40
source "$PCOPY_TEST_LIB"
needs_root "it makes a network namespace, a veth pair with a tbf qdisc, and runs sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

netns_peer p
CAP_MBIT=200
command -v tc >/dev/null || fail "tc (iproute2) is missing"
# The probe's data goes from here to there: cap that direction.
tc qdisc add dev "$VETH_HERE" root tbf rate "${CAP_MBIT}mbit" burst 256kb latency 50ms ||
    fail "cannot add a tbf qdisc to $VETH_HERE"
log "namespace $NS at $THERE, this side $HERE, capped at $CAP_MBIT Mbit/s"

sshd_start "$NS" "$THERE"

# probe_ok OUT: the last probe printed a table and advice into OUT: the
# stages, and a "recommended:" line of valid options; sets REC (those
# options) and NET_MBIT (the best network cell).
probe_ok() {
    local out=$1 s
    for s in 'source read' 'network rtt' 'network ' 'sink write' 'codecs' 'cpus, kernel'; do
        grep -q "^$s" "$out" || { cat "$out" >&2; fail "no '$s' row in the table"; }
    done
    REC=$(sed -n 's/^recommended: //p' "$out")
    [[ $REC =~ ^-s\ [0-9]+(\ -w\ [0-9]+[kMG]?)?\ -c\ (none|lz4|zlib:1|zlib)$ ]] ||
        { cat "$out" >&2; fail "the advice '$REC' is not '-s N [-w SIZE] -c SPEC'"; }
    grep -Eq '^why: network [0-9.]+ [MG]bit/s at [0-9]+ ms RTT' "$out" ||
        { cat "$out" >&2; fail "no reason for the advice"; }
    NET_MBIT=$(awk '/^network  / || /^               [0-9.]+ [MG]bit\/s +-s / {
        v = ($1 == "network") ? $2 : $1; u = ($1 == "network") ? $3 : $2
        if (u ~ /^G/) v *= 1000; if (v > m) m = v } END { printf "%d", m }' "$out")
    [[ $NET_MBIT -gt 0 ]] || { cat "$out" >&2; fail "no network figure in the table"; }
}

# no_probe_files DIR...: nothing was left in DIR (the test files are
# unnamed or unlinked at once).
no_probe_files() {
    local d
    for d in "$@"; do
        dir_is_empty "$d" || fail "$d is not empty: $(ls -A "$d")"
    done
}

case_ssh_capped() {
    mkdir -p "$T/remote" "$T/here"
    mkfile "$T/src" 8M
    # From a directory of our own: without SRC, the source test writes there.
    (cd "$T/here" && expect_exit 0 "$PCOPY" --probe "pctest:$T/remote" >"$T/out")
    probe_ok "$T/out"
    grep -q 'a temporary file in the current directory' "$T/out" || fail "no source test"
    grep -q 'encrypted (TLS 1.3' "$T/out" || fail "the probe's data was not in TLS"
    log "ssh, capped at $CAP_MBIT Mbit/s: best cell $NET_MBIT Mbit/s; advice $REC"
    # The tbf rate counts whole packets, which TLS and TCP headers fill a
    # little: well below the cap is a broken sweep, above it a wrong sum.
    ((NET_MBIT >= CAP_MBIT * 50 / 100 && NET_MBIT <= CAP_MBIT * 105 / 100)) ||
        { cat "$T/out" >&2; fail "network $NET_MBIT Mbit/s, not near the cap of $CAP_MBIT"; }
    no_probe_files "$T/remote" "$T/here"
    # The advice is options a copy takes, on the same path.
    # shellcheck disable=SC2086 # REC is a list of options
    expect_exit 0 "$PCOPY" $REC "$T/src" "pctest:$T/remote/copy"
    same_file "$T/src" "$T/remote/copy"
    # With SRC: its disk is read (a file, and a tree).
    expect_exit 0 "$PCOPY" --probe "$T/src" "pctest:$T/remote" >"$T/out2"
    grep -q "^source read .*'$T/src'" "$T/out2" || { cat "$T/out2" >&2; fail "SRC not read"; }
    grep -q "the first 2048 KiB of '$T/src'" "$T/out2" || { cat "$T/out2" >&2; fail "SRC not sampled"; }
    mkdir -p "$T/tree/sub"
    mkfile "$T/tree/sub/f" 3M
    expect_exit 0 "$PCOPY" --probe "$T/tree" "pctest:$T/remote" >"$T/out3"
    grep -q "^source read  *[0-9.]* [MG]B/s .*'$T/tree'" "$T/out3" ||
        { cat "$T/out3" >&2; fail "the tree was not read"; }
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left"
}

case_ssh_streams() {
    mkdir -p "$T/remote" "$T/here"
    (cd "$T/here" && expect_exit 0 "$PCOPY" --probe --data-via ssh "pctest:$T/remote" >"$T/out")
    probe_ok "$T/out"
    grep -q 'encrypted (ssh)' "$T/out" || { cat "$T/out" >&2; fail "the data did not go through ssh"; }
    # ssh's sockets are not ours: only the streams were swept.
    if grep -Eq -- '-w [0-9]' "$T/out"; then
        cat "$T/out" >&2
        fail "a window was swept through ssh streams"
    fi
    no_probe_files "$T/remote" "$T/here"
}

case_daemon() {
    mkdir -p "$T/root/dir" "$T/outside" "$T/here"
    ln -s "$T/outside" "$T/root/escape"
    start_daemon "$T/root"
    (cd "$T/here" && expect_exit 0 "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/dir" >"$T/out")
    probe_ok "$T/out"
    grep -q 'to 127.0.0.1:' "$T/out" || fail "the daemon was not named"
    no_probe_files "$T/root/dir" "$T/here"
    # The root itself.
    expect_exit 0 "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL" >"$T/out"
    probe_ok "$T/out"
    # Out of the root: by a symlink, and by "..", refused; nothing written.
    expect_fail "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/escape"
    expect_rc 1
    expect_stderr_contains "path 'escape' is not allowed: it must stay inside the served directory"
    expect_fail "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/escape/x"
    expect_rc 1
    expect_fail "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/../outside"
    expect_rc 1
    no_probe_files "$T/outside"
    # A wrong key; no key; a directory that is not there; one we may not write.
    "$PCOPY" --gen-key "$T/wrong.key"
    expect_fail "$PCOPY" --probe --key-file "$T/wrong.key" "$DAEMON_URL/dir"
    expect_rc 5
    expect_fail env -u PCOPY_KEY_FILE "$PCOPY" --probe "$DAEMON_URL/dir"
    expect_rc 1
    expect_stderr_contains "a daemon needs --key-file KEY"
    expect_fail "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/missing"
    expect_rc 11
    expect_stderr_contains "cannot probe 'missing': No such file or directory"
    mount_tmpfs "$T/root/ro" size=1m,ro
    expect_fail "$PCOPY" --probe --key-file "$DAEMON_KEY" "$DAEMON_URL/ro"
    expect_rc 11
    expect_stderr_contains "cannot probe 'ro': no right to write there"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

case_errors() {
    # Nothing listens on port 1; no such host; a local path; no operand.
    "$PCOPY" --gen-key "$T/k"
    expect_fail "$PCOPY" --probe --key-file "$T/k" pcopy://127.0.0.1:1/
    expect_rc 10
    expect_fail "$PCOPY" --probe "nosuchhost.invalid:/tmp"
    expect_rc 5
    expect_fail "$PCOPY" --probe /tmp
    expect_rc 1
    expect_stderr_contains "is not a remote host"
    expect_fail "$PCOPY" --probe
    expect_rc 1
    expect_fail "$PCOPY" --probe "$T/nonexistent" "pctest:/tmp"
    expect_rc 11
    expect_stderr_contains "cannot read '$T/nonexistent'"
}

# Ctrl-C in the middle: exit 20, and no file left on either side.
case_interrupt() {
    local pid rc=0
    mkdir -p "$T/remote" "$T/here"
    (cd "$T/here" && exec "${WITH_SIGINT[@]}" "$PCOPY" --probe "pctest:$T/remote" >"$T/out" 2>"$T/err") &
    pid=$!
    track_pid "$pid"
    # Catch it while its files are open (unnamed: the directories stay
    # empty), for 2 s of its 10 whatever the machine's load: a count of
    # checks took longer than the probe on a busy machine.
    local until=$((${EPOCHREALTIME/./} + 2000000))
    while ((${EPOCHREALTIME/./} < until)); do
        no_probe_files "$T/remote" "$T/here"
        sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null || { cat "$T/err" >&2; fail "the probe ended within 2 s"; }
    kill -INT "$pid"
    wait "$pid" || rc=$?
    [[ $rc -eq 20 ]] || { cat "$T/err" >&2; fail "exit $rc after SIGINT, wanted 20"; }
    grep -q '^pcopy: interrupted' "$T/err" || { cat "$T/err" >&2; fail "no word of the interruption"; }
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left"
    no_probe_files "$T/remote" "$T/here"
}

run_case ssh_capped case_ssh_capped
run_case ssh_streams case_ssh_streams
run_case daemon case_daemon
run_case errors case_errors
run_case interrupt case_interrupt
finish
