#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_ssh_errors: how an ssh copy fails. ssh cannot connect or log in (exit 5
# with ssh's own message), no pcopy on the remote (exit 5), a missing or
# read-only remote destination (exit 11 naming it), a missing remote source
# (exit 3), -4/-6 toward a host ssh reaches over the other family (exit 10
# at once, never data over the other family), and the remote pcopy (as
# receiver or sender, or the source of a third-party copy, named as the
# one that went away) or the ssh connection dying, or the client
# interrupted, in the middle of a copy: no file under the final name, and
# no remote pcopy left behind. A FIFO without a writer, local (push) or
# remote (pull), does not keep an interrupted client, nor the remote pcopy.
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root, and mounts a tmpfs"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

sshd_start

# config_with OUT: a copy of SSH_CONFIG in OUT whose first lines are read
# from standard input (ssh takes the first value it finds for a setting).
config_with() {
    { cat; cat "$SSH_CONFIG"; } >"$1"
}

case_connection_refused() {
    local dead
    mkfile "$T/f" 1000
    mkdir -p "$T/remote"
    dead=$(free_port)
    expect_exit 5 env PCOPY_RSH="ssh -F $SSH_CONFIG -p $dead" "$PCOPY" "$T/f" "pctest:$T/remote/"
    expect_stderr_contains "port $dead: Connection refused"
    expect_exit 5 "$PCOPY" --rsh "ssh -F $SSH_CONFIG -p $dead" "pctest:$T/f" "$T/remote/pulled"
    expect_stderr_contains "port $dead: Connection refused"
    [[ ! -e $T/remote/f && ! -e $T/remote/pulled ]] || fail "a file was created"
    # A third-party copy whose destination cannot be reached.
    printf 'Host h2\n    Port %s\n' "$dead" | config_with "$T/h2dead.config"
    expect_exit 5 "$PCOPY" --rsh "ssh -F $T/h2dead.config" "h1:$T/f" "h2:$T/remote/third"
    expect_stderr_contains "port $dead: Connection refused"
    [[ ! -e $T/remote/third ]] || fail "$T/remote/third was created"
    wait_until 10 sshd_no_remote_pcopy || fail "a remote pcopy is left: $(sshd_remote_pids)"
    # A command that does not exist at all.
    expect_exit 5 "$PCOPY" --rsh "/nonexistent/ssh-$$" "$T/f" "pctest:$T/remote/"
    expect_stderr_contains "/nonexistent/ssh-$$"
}

case_wrong_key() {
    mkfile "$T/f" 1000
    mkdir -p "$T/remote"
    ssh-keygen -q -t ed25519 -N '' -C stranger -f "$T/stranger" || fail "ssh-keygen failed"
    printf 'Host *\n    IdentityFile %s\n' "$T/stranger" | config_with "$T/stranger.config"
    # The config's own IdentityFile must not be offered as well.
    sed -i "\|IdentityFile $SSH_KEY\$|d" "$T/stranger.config"
    grep -q "$SSH_KEY" "$T/stranger.config" && fail "the good key is still in $T/stranger.config"
    expect_exit 5 "$PCOPY" --rsh "ssh -F $T/stranger.config" "$T/f" "pctest:$T/remote/"
    expect_stderr_contains "Permission denied"
    expect_exit 5 "$PCOPY" --rsh "ssh -F $T/stranger.config" "pctest:$T/f" "$T/remote/pulled"
    expect_stderr_contains "Permission denied"
    [[ ! -e $T/remote/f && ! -e $T/remote/pulled ]] || fail "a file was created"
}

case_no_remote_pcopy() {
    mkfile "$T/f" 1000
    mkdir -p "$T/remote"
    # The message names the path given, and the host.
    expect_exit 5 "$PCOPY" --remote-pcopy /nonexistent/pcopy "$T/f" "pctest:$T/remote/"
    expect_stderr_contains "'/nonexistent/pcopy' (--remote-pcopy) not found on pctest"
    expect_exit 5 "$PCOPY" --remote-pcopy /nonexistent/pcopy "pctest:$T/f" "$T/remote/pulled"
    expect_stderr_contains "'/nonexistent/pcopy' (--remote-pcopy) not found on pctest"
    # A name that is not on the remote PATH.
    expect_exit 5 "$PCOPY" --remote-pcopy "pcopy-not-installed-$$" "$T/f" "pctest:$T/remote/"
    expect_stderr_contains "'pcopy-not-installed-$$' (--remote-pcopy) not found on pctest"
    # Third party: the message names the host without pcopy.
    expect_exit 5 "$PCOPY" --remote-pcopy /nonexistent/pcopy "h1:$T/f" "h2:$T/remote/third"
    expect_stderr_matches "\(--remote-pcopy\) not found on h[12]"
    [[ ! -e $T/remote/f && ! -e $T/remote/pulled && ! -e $T/remote/third ]] || fail "a file was created"
}

case_remote_dest_missing() {
    mkfile "$T/f" 100000
    expect_exit 11 "$PCOPY" "$T/f" "pctest:$T/missing/out"
    expect_stderr_contains "$T/missing"
    expect_exit 11 "$PCOPY" -s 4 "$T/f" "pctest:$T/missing2/"
    expect_stderr_contains "$T/missing2"
    expect_exit 1,11 "$PCOPY" "$T/f" "$T/f" "pctest:$T/missing3/"
    expect_stderr_contains "$T/missing3"
    expect_exit 11 "$PCOPY" "h1:$T/f" "h2:$T/missing4/out"
    expect_stderr_contains "$T/missing4"
    local m
    for m in missing missing2 missing3 missing4; do
        [[ ! -e $T/$m ]] || fail "$T/$m was created"
    done
}

case_remote_source_missing() {
    mkdir -p "$T/back"
    expect_exit 3 "$PCOPY" "pctest:$T/nosuch" "$T/back/x"
    expect_stderr_contains "$T/nosuch"
    [[ ! -e $T/back/x ]] || fail "$T/back/x was created"
    # Third party: h1 reports the source it cannot open, and sends nothing.
    PCOPY_TEST_CMD_TIMEOUT=15 expect_exit 3 "$PCOPY" "h1:$T/nosuch2" "h2:$T/back/y"
    expect_stderr_contains "$T/nosuch2"
    [[ ! -e $T/back/y ]] || fail "$T/back/y was created"
}

case_remote_read_only() {
    mkfile "$T/f" 100000
    mount_tmpfs "$T/ro" ro,size=1m
    expect_exit 11 "$PCOPY" "$T/f" "pctest:$T/ro"
    expect_stderr_contains "$T/ro"
    expect_exit 11 "$PCOPY" -s 4 "$T/f" "pctest:$T/ro/newname"
    expect_stderr_contains "$T/ro"
    expect_exit 11 "$PCOPY" "h1:$T/f" "h2:$T/ro/"
    expect_stderr_contains "$T/ro"
    dir_is_empty "$T/ro" || fail "files appeared in the read-only $T/ro"
}

# _data_conn_of_family FAMILY: a remote pcopy has an established TCP
# connection of FAMILY (-4 or -6).
_data_conn_of_family() {
    local p conns
    conns=$(ss -Htnp "$1" state established 2>/dev/null) || return 1
    for p in $(sshd_remote_pids); do
        [[ $conns == *"pid=$p,"* ]] && return 0
    done
    return 1
}

# forced_family FLAG OTHER HOST [OPTS...]: `pcopy FLAG OPTS` to HOST, which
# ssh reaches over the other family only, either copies over FLAG's family
# or fails with exit 10, within 15 s; no data connection of family OTHER
# is ever seen; and a copy without FLAG then is not sent through ssh.
forced_family() {
    local flag=$1 other=$2 host=$3 cpid seen='' start
    shift 3
    mkfile "$T/f$flag" 3M
    mkdir -p "$T/remote"
    "$PCOPY" "$flag" "$@" -s 2 "$T/f$flag" "$host:$T/remote/" 2>"$T/err$flag" &
    cpid=$!
    track_pid "$cpid"
    # There is nothing to wait for: the host has no address of that family.
    start=$(now)
    while ! proc_gone "$cpid"; do
        if [[ -z $seen ]] && _data_conn_of_family "$other"; then
            seen=$(ss -Htnp "$other" state established | grep pcopy || true)
        fi
        awk -v t="$(secs_since "$start")" -v l=$((15 * SLOW)) 'BEGIN { exit !(t < l) }' || break
        sleep 0.05
    done
    if ! wait_exit 1 "$cpid"; then
        fail "pcopy $flag${*:+ $*} to $host did not finish in $((15 * SLOW)) s: $(cat "$T/err$flag")"
    fi
    log "pcopy $flag${*:+ $*} to $host: exit $WAIT_RC: $(tr '\n' ' ' <"$T/err$flag")"
    [[ -z $seen ]] || fail "pcopy $flag${*:+ $*} to $host used a data connection of family $other: $seen"
    case $WAIT_RC in
    0) same_file "$T/f$flag" "$T/remote/f$flag" ;;
    10) [[ ! -e $T/remote/f$flag ]] || fail "$T/remote/f$flag was created" ;;
    *) fail "pcopy $flag${*:+ $*} to $host exited with $WAIT_RC: $(cat "$T/err$flag")" ;;
    esac
    # A family the host lacks is no firewall: the next copy without FLAG
    # is not sent through ssh for it (pcopy remembers hosts behind one).
    expect_exit 0 "$PCOPY" "$@" -s 2 "$T/f$flag" "$host:$T/remote/again$flag"
    expect_stderr_lacks "min ago"
    same_file "$T/f$flag" "$T/remote/again$flag"
}

case_v6_to_v4_host() {
    forced_family -6 -4 pctest4
}

case_v4_to_v6_host() {
    forced_family -4 -6 pctest6
}

case_v6_to_v4_host_reverse() {
    forced_family -6 -4 pctest4 -z
}

# _receiving DIR [PID]: a remote pcopy runs, and it (or PID) has a file in
# DIR open that holds data: a named temporary file or an unnamed (O_TMPFILE)
# one, which only /proc shows.
_receiving() {
    local dir=$1 pids p fd
    pids=$(sshd_remote_pids)
    [[ -n $pids ]] || return 1
    [[ $# -lt 2 ]] || pids=$2
    for p in $pids; do
        for fd in "/proc/$p/fd/"*; do
            [[ $(readlink "$fd" 2>/dev/null) == "$dir"/* && -f $fd && -s $fd ]] && return 0
        done
    done
    return 1
}

# start_slow_push: push 4 MiB and then nothing for 20 s from standard input
# to pctest:$T/dir/out in the background; wait until the remote pcopy has
# written some of it. Sets CLIENT_PID; the client's stderr is $T/client.err.
CLIENT_PID=
start_slow_push() {
    mkdir -p "$T/dir"
    slow_producer "$T/fifo" 4194304 20
    "$PCOPY" -s 4 -B 256k - "pctest:$T/dir/out" <"$T/fifo" 2>"$T/client.err" &
    CLIENT_PID=$!
    track_pid "$CLIENT_PID"
    if ! wait_until 30 _receiving "$T/dir"; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        ls -la "$T/dir" >&2
        fail "the remote pcopy did not start writing $T/dir/out"
    fi
}

# check_broken WHAT: the client exited non-zero within 30 s of WHAT,
# naming the host; no $T/dir/out, and no remote pcopy left.
check_broken() {
    if ! wait_exit 30 "$CLIENT_PID"; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        fail "the client did not exit within 30 s after $1"
    fi
    if [[ $WAIT_RC -eq 0 ]]; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        fail "the client exited 0 after $1"
    fi
    if ! grep -q pctest "$T/client.err"; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        fail "after $1 the client (exit $WAIT_RC) did not name the host pctest"
    fi
    log "after $1: exit $WAIT_RC, $(grep -v '^ *$' "$T/client.err" | tail -n 1)"
    [[ ! -e $T/dir/out ]] || fail "$T/dir/out exists after $1"
    wait_until 20 sshd_no_remote_pcopy ||
        fail "the remote pcopy is still running 20 s after $1: $(sshd_remote_pids)"
}

case_remote_dies() {
    start_slow_push
    # shellcheck disable=SC2046
    kill -KILL $(sshd_remote_pids)
    check_broken "the remote pcopy was killed"
}

case_remote_sender_dies() {
    # A pull from a FIFO on the remote that gives 4 MiB, then nothing.
    mkdir -p "$T/dir"
    slow_producer "$T/fifo" 4194304 20
    "$PCOPY" -s 4 -B 256k "pctest:$T/fifo" "$T/dir/out" 2>"$T/client.err" &
    CLIENT_PID=$!
    track_pid "$CLIENT_PID"
    if ! wait_until 30 _receiving "$T/dir" "$CLIENT_PID"; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        ls -la "$T/dir" >&2
        fail "the client did not start writing $T/dir/out"
    fi
    # shellcheck disable=SC2046
    kill -KILL $(sshd_remote_pids)
    check_broken "the remote pcopy (the sender) was killed"
    wait_until 10 dir_is_empty "$T/dir" || fail "the client left files: $(ls -a "$T/dir")"
}

# In a third-party copy, h1 (the source) dies: h2 loses its data
# connections and says so, but the one to name is h1, whose control
# connection closed too.
case_third_source_dies() {
    local p victim=
    mkdir -p "$T/dir"
    slow_producer "$T/fifo" 4194304 20
    "$PCOPY" -s 4 -B 256k "h1:$T/fifo" "h2:$T/dir/out" 2>"$T/client.err" &
    CLIENT_PID=$!
    track_pid "$CLIENT_PID"
    if ! wait_until 30 _receiving "$T/dir"; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        fail "h2 did not start writing $T/dir/out"
    fi
    for p in $(sshd_remote_pids); do
        [[ $(readlink "/proc/$p/fd/"* 2>/dev/null) == *"$T/fifo"* ]] && victim=$p
    done
    [[ -n $victim ]] || fail "no remote pcopy has $T/fifo open"
    kill -KILL "$victim"
    wait_exit 30 "$CLIENT_PID" || fail "the client did not exit within 30 s after h1 died"
    [[ $WAIT_RC -eq 10 ]] || { cat "$T/client.err" >&2; fail "exit $WAIT_RC after h1 died, wanted 10"; }
    grep -q "lost control connection to h1[:;]" "$T/client.err" ||
        { cat "$T/client.err" >&2; fail "the client did not name h1 as the host that went away"; }
    log "after h1 died: $(grep -v '^ *$' "$T/client.err" | tail -n 1)"
    [[ ! -e $T/dir/out ]] || fail "$T/dir/out exists after h1 died"
    wait_until 20 sshd_no_remote_pcopy ||
        fail "a remote pcopy is still running 20 s after h1 died: $(sshd_remote_pids)"
}

case_ssh_dies() {
    local ssh_pid p
    start_slow_push
    ssh_pid=$(for p in $(proc_descendants "$CLIENT_PID"); do
        if [[ $(cat "/proc/$p/comm" 2>/dev/null) == ssh ]]; then
            echo "$p"
            break
        fi
    done)
    [[ -n $ssh_pid ]] || fail "the client $CLIENT_PID has no ssh child"
    kill -KILL "$ssh_pid"
    check_broken "the client's ssh was killed"
    # The remote pcopy saw its control connection close, and cleaned up.
    wait_until 10 dir_is_empty "$T/dir" || fail "the remote left files: $(ls -a "$T/dir")"
}

case_client_interrupted() {
    start_slow_push
    kill -TERM "$CLIENT_PID"
    if ! wait_exit 30 "$CLIENT_PID"; then
        fail "the client did not exit within 30 s of SIGTERM"
    fi
    if [[ $WAIT_RC -ne 20 ]]; then
        sed 's/^/  stderr: /' "$T/client.err" >&2
        fail "the client exited with $WAIT_RC after SIGTERM, not 20"
    fi
    [[ ! -e $T/dir/out ]] || fail "$T/dir/out exists after the client was interrupted"
    wait_until 20 sshd_no_remote_pcopy ||
        fail "the remote pcopy is still running 20 s after the client was interrupted"
    # The remote side removes its temporary file.
    wait_until 10 dir_is_empty "$T/dir" || fail "the remote left files: $(ls -a "$T/dir")"
}

# sigint_after SECS CMD...: run CMD with SIGINT after SECS seconds; it must
# exit 20 within 10 s (times $SLOW) of the signal. Stderr in LAST_STDERR.
sigint_after() {
    local secs=$1 rc=0
    shift
    _LIB_N=$((_LIB_N + 1))
    LAST_STDERR=$T/stderr.$BASHPID.$_LIB_N
    timeout --preserve-status -k $((10 * SLOW)) -s INT "$secs" "${WITH_SIGINT[@]}" "$@" \
        2>"$LAST_STDERR" || rc=$?
    [[ $rc -ne 137 ]] || { cat "$LAST_STDERR" >&2; fail "SIGINT did not stop the client: killed"; }
    [[ $rc -eq 20 ]] || { cat "$LAST_STDERR" >&2; fail "exit status $rc after SIGINT, wanted 20"; }
    expect_stderr_contains "interrupted"
}

# no_pcopy_from_our_sshd: no pcopy runs with an SSH_CONNECTION to our sshd,
# wherever it is in the process tree (one that lost its session is
# reparented away from the sshd, where sshd_remote_pids does not look).
no_pcopy_from_our_sshd() {
    local pid
    for pid in $(pgrep -x pcopy); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
            grep -qE "^SSH_CONNECTION=.* $SSHD_PORT\$"; then
            return 1
        fi
    done
    return 0
}

case_fifo_interrupted() {
    mkdir -p "$T/dir" "$T/local"
    mkfifo "$T/fifo"
    # Push: the local FIFO is waited for before ssh starts.
    sigint_after 1 "$PCOPY" "$T/fifo" "pctest:$T/dir/"
    expect_stderr_contains "FIFO '$T/fifo'"
    dir_is_empty "$T/dir" || fail "the push left $(ls -A "$T/dir") in $T/dir"
    # Pull: the remote pcopy waits for the writer; the client, waiting for
    # it, is interrupted, and the remote pcopy sees it go and ends too (it
    # used to stay in open(), and the client waited for ssh forever).
    sigint_after 1 "$PCOPY" "pctest:$T/fifo" "$T/local/"
    dir_is_empty "$T/local" || fail "the pull left $(ls -A "$T/local") in $T/local"
    wait_until 10 no_pcopy_from_our_sshd ||
        fail "a remote pcopy still waits for the FIFO: $(pgrep -a -x pcopy)"
}

case_rsh_stuck_interrupted() {
    # The --rsh command hangs before it reads anything (ssh resolving or
    # connecting to a dead host): SIGTERM to pcopy alone (not to its
    # process group) still ends it with exit 20, and the command is stopped.
    local rsh_pid
    mkdir -p "$T/dir"
    mkfile "$T/f" 1000
    printf '#!/bin/sh\nexec sleep 300\n' >"$T/stuck-rsh"
    chmod +x "$T/stuck-rsh"
    "${WITH_SIGINT[@]}" "$PCOPY" --rsh "$T/stuck-rsh" "$T/f" "pctest:$T/dir/" 2>"$T/client.err" &
    CLIENT_PID=$!
    track_pid "$CLIENT_PID"
    wait_until 10 pgrep -P "$CLIENT_PID" -x sleep >/dev/null || fail "pcopy did not start its --rsh"
    rsh_pid=$(pgrep -P "$CLIENT_PID" -x sleep)
    track_pid "$rsh_pid"
    kill -TERM "$CLIENT_PID"
    wait_exit 10 "$CLIENT_PID" || fail "pcopy did not exit within $((10 * SLOW)) s of SIGTERM"
    [[ $WAIT_RC -eq 20 ]] || { cat "$T/client.err" >&2; fail "exit status $WAIT_RC, wanted 20"; }
    grep -q "interrupted" "$T/client.err" || { cat "$T/client.err" >&2; fail "no 'interrupted' message"; }
    proc_gone "$rsh_pid" || fail "the --rsh command $rsh_pid still runs"
    dir_is_empty "$T/dir" || fail "files appeared in $T/dir"
}

run_case connection-refused case_connection_refused
run_case wrong-key case_wrong_key
run_case no-remote-pcopy case_no_remote_pcopy
run_case remote-dest-missing case_remote_dest_missing
run_case remote-source-missing case_remote_source_missing
run_case remote-read-only case_remote_read_only
run_case v6-to-v4-host case_v6_to_v4_host
run_case v4-to-v6-host case_v4_to_v6_host
run_case v6-to-v4-host-reverse case_v6_to_v4_host_reverse
run_case remote-dies case_remote_dies
run_case remote-sender-dies case_remote_sender_dies
run_case third-source-dies case_third_source_dies
run_case ssh-dies case_ssh_dies
run_case client-interrupted case_client_interrupted
run_case fifo-interrupted case_fifo_interrupted
run_case rsh-stuck-interrupted case_rsh_stuck_interrupted
finish
