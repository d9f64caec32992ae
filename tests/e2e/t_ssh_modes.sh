#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_ssh_modes: the ways an ssh copy sets up its data connections: -z (the
# client listens, the remote connects), -Z LO-HI (the data ports the
# listening side uses) with a free range and with a range where every port
# is taken, -4 and -6 (checked on the live connections), and a third-party
# copy h1 -> h2 with 1 and 8 streams (h1 and h2 are two names of one sshd),
# whose data does not pass through the client.
# ctest: cost 60
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

sshd_start

# free_range N: the first of N consecutive TCP ports that nothing listens on.
free_range() {
    local n=$1 lo i try
    for ((try = 0; try < 50; try++)); do
        lo=$(free_port)
        ((lo + n - 1 <= 65535)) || continue
        for ((i = 1; i < n; i++)); do
            port_in_use $((lo + i)) && continue 2
        done
        echo "$lo"
        return 0
    done
    fail "free_range: no $n consecutive free ports found"
}

# hold_ports LO HI: listen on every port from LO to HI, on all IPv4 and
# IPv6 addresses, until the case ends. Fails (returns 1) if a port was
# taken meanwhile: other tests' connections use ephemeral ports too.
hold_ports() {
    rm -f "$T/held" "$T/held.failed"
    python3 - "$1" "$2" "$T/held" <<'EOF' &
import socket, sys, time
lo, hi, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
held = []
try:
    for port in range(lo, hi + 1):
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", port))
        s.listen(16)
        held.append(s)
except OSError:
    open(ready + ".failed", "w").close()
    sys.exit(1)
open(ready, "w").close()
time.sleep(3600)
EOF
    track_pid $!
    wait_until 10 _held_or_failed && [[ -e $T/held ]]
}

_held_or_failed() {
    [[ -e $T/held || -e $T/held.failed ]]
}

# hold_free_range N: finds N consecutive free ports and holds them (see
# hold_ports), trying other ranges when one is taken meanwhile; sets LO.
hold_free_range() {
    local try
    for ((try = 0; try < 10; try++)); do
        LO=$(free_range "$1")
        hold_ports "$LO" $((LO + $1 - 1)) && return 0
    done
    fail "could not hold $1 consecutive ports in 10 tries"
}

# _has_data_conn WHO CLIENT_PID SS_FILTER...: the client (WHO=client) or
# the remote pcopy (WHO=server) has a TCP connection that
# `ss -Htnp SS_FILTER...` lists.
_has_data_conn() {
    local who=$1 cpid=$2 p pids conns
    shift 2
    if [[ $who == client ]]; then
        pids=$cpid
    else
        pids=$(sshd_remote_pids)
    fi
    conns=$(ss -Htnp "$@" 2>/dev/null) || return 1
    for p in $pids; do
        [[ $conns == *"pid=$p,"* ]] && return 0
    done
    return 1
}

# watch_push WHO HOST 'SS_FILTER' OPTS...: push 2 MiB from a slow standard
# input (held open 4 s more) to HOST with OPTS, check that meanwhile WHO
# (client or server) has a data connection that `ss -Htnp SS_FILTER`
# lists, and that the copy is complete.
watch_push() {
    local who=$1 host=$2 filter=$3 cpid
    shift 3
    rm -rf "$T/watch" "$T/watch.in" "$T/fifo"
    mkdir -p "$T/watch"
    slow_producer "$T/fifo" 2097152 4 "$T/watch.in"
    "$PCOPY" "$@" - "$host:$T/watch/out" <"$T/fifo" 2>"$T/watch.err" &
    cpid=$!
    track_pid "$cpid"
    # shellcheck disable=SC2086  # the filter is several words on purpose
    if ! wait_until 30 _has_data_conn "$who" "$cpid" $filter; then
        ss -Htnp state established 2>/dev/null | grep -E 'pcopy' | sed 's/^/  ss: /' >&2 || true
        sed 's/^/  stderr: /' "$T/watch.err" >&2
        fail "pcopy $* - $host:...: the $who had no connection matching: ss $filter"
    fi
    wait_exit 60 "$cpid" || fail "pcopy $* - $host:... did not finish"
    if [[ $WAIT_RC -ne 0 ]]; then
        sed 's/^/  stderr: /' "$T/watch.err" >&2
        fail "pcopy $* - $host:... exited with $WAIT_RC"
    fi
    same_file "$T/watch.in" "$T/watch/out"
}

case_reverse() {
    local s
    mkfile "$T/f" 9M
    mkfile "$T/g" 12345
    mkdir -p "$T/remote" "$T/back"
    for s in 1 4; do
        expect_exit 0 "$PCOPY" -z -s "$s" "$T/f" "$T/g" "pctest:$T/remote/"
        expect_summary $((9 * 1048576 + 12345)) 2 "$s"
        same_file "$T/f" "$T/remote/f"
        same_file "$T/g" "$T/remote/g"
        rm -f "$T/back/f" "$T/back/g"
        expect_exit 0 "$PCOPY" -z -s "$s" "pctest:$T/remote/f" "pctest:$T/remote/g" "$T/back/"
        expect_summary $((9 * 1048576 + 12345)) 2 "$s"
        same_file "$T/f" "$T/back/f"
        same_file "$T/g" "$T/back/g"
        rm -f "$T/remote/f" "$T/remote/g"
    done
    # With -z the client's own port carries the data.
    watch_push client pctest "state established" -z -s 4
}

case_port_range() {
    local lo hi
    lo=$(free_range 3)
    hi=$((lo + 2))
    mkfile "$T/f" 5M
    mkdir -p "$T/remote" "$T/back"
    expect_exit 0 "$PCOPY" -Z "$lo-$hi" -s 8 "$T/f" "pctest:$T/remote/"
    same_file "$T/f" "$T/remote/f"
    expect_exit 0 "$PCOPY" -Z "$lo-$hi" -s 8 "pctest:$T/remote/f" "$T/back/"
    same_file "$T/f" "$T/back/f"
    expect_exit 0 "$PCOPY" -z -Z "$lo-$hi" -s 3 "$T/f" "pctest:$T/remote/f.z"
    same_file "$T/f" "$T/remote/f.z"
    # The listening side's end of the data connections is in the range: the
    # remote's without -z, the client's with it.
    watch_push server pctest "state established ( sport >= :$lo and sport <= :$hi )" -Z "$lo-$hi" -s 4
    watch_push client pctest "state established ( sport >= :$lo and sport <= :$hi )" -z -Z "$lo-$hi" -s 4
}

case_port_range_taken() {
    local lo hi
    mkfile "$T/f" 1M
    mkdir -p "$T/remote" "$T/back"
    hold_free_range 3
    lo=$LO
    hi=$((lo + 2))
    # The remote listens: push and pull.
    PCOPY_TEST_CMD_TIMEOUT=60 expect_exit 10 "$PCOPY" -Z "$lo-$hi" "$T/f" "pctest:$T/remote/"
    expect_stderr_matches '(-z|-Z)'
    [[ ! -e $T/remote/f ]] || fail "$T/remote/f was created"
    PCOPY_TEST_CMD_TIMEOUT=60 expect_exit 10 "$PCOPY" -Z "$lo-$hi" -s 2 "pctest:$T/f" "$T/back/"
    expect_stderr_matches '(-z|-Z)'
    [[ ! -e $T/back/f ]] || fail "$T/back/f was created"
    # The client listens.
    PCOPY_TEST_CMD_TIMEOUT=60 expect_exit 10 "$PCOPY" -z -Z "$lo-$hi" "$T/f" "pctest:$T/remote/"
    expect_stderr_matches '(-z|-Z)'
    [[ ! -e $T/remote/f ]] || fail "$T/remote/f was created"
    no_temp_files "$T/remote"
    no_temp_files "$T/back"
}

case_address_family() {
    mkfile "$T/f" 4M
    mkdir -p "$T/remote" "$T/back"
    expect_exit 0 "$PCOPY" -4 -s 4 "$T/f" "pctest:$T/remote/f4"
    same_file "$T/f" "$T/remote/f4"
    expect_exit 0 "$PCOPY" -4 -s 4 "pctest:$T/remote/f4" "$T/back/"
    same_file "$T/f" "$T/back/f4"
    expect_exit 0 "$PCOPY" -6 -s 4 "$T/f" "[::1]:$T/remote/f6"
    same_file "$T/f" "$T/remote/f6"
    expect_exit 0 "$PCOPY" -6 -s 4 "[::1]:$T/remote/f6" "$T/back/"
    same_file "$T/f" "$T/back/f6"
    expect_exit 0 "$PCOPY" -4 -z -s 2 "$T/f" "pctest:$T/remote/f4z"
    same_file "$T/f" "$T/remote/f4z"
    # The data connections are of the family asked for.
    watch_push server pctest "-4 state established" -4 -s 2
    watch_push server "[::1]" "-6 state established" -6 -s 2
}

case_third_party() {
    local s
    mkdir -p "$T/src"
    mkfile "$T/src/f" 12M
    mkfile "$T/src/g" 5000
    mkfile "$T/src/e" 0
    for s in 1 8; do
        mkdir -p "$T/dst.$s"
        expect_exit 0 "$PCOPY" -s "$s" "h1:$T/src/f" "h2:$T/dst.$s/"
        same_file "$T/src/f" "$T/dst.$s/f"
        # Several sources from h1 into a directory on h2.
        mkdir -p "$T/dst.$s/more"
        expect_exit 0 "$PCOPY" -s "$s" "h1:$T/src/f" "h1:$T/src/g" "h1:$T/src/e" "h2:$T/dst.$s/more/"
        same_file "$T/src/f" "$T/dst.$s/more/f"
        same_file "$T/src/g" "$T/dst.$s/more/g"
        same_file "$T/src/e" "$T/dst.$s/more/e"
        no_temp_files "$T/dst.$s"
    done
    # To a new name, with users.
    expect_exit 0 "$PCOPY" -s 4 "root@h1:$T/src/g" "root@h2:$T/dst.1/renamed"
    same_file "$T/src/g" "$T/dst.1/renamed"
    # Every remote pcopy has exited.
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

# -3: the data of a third-party copy goes through this host (as scp -3):
# both hosts listen and the client pumps the streams; files and a tree,
# with 1 and 4 streams; -3 elsewhere is a usage error.
case_third_party_relayed() {
    local s
    mkdir -p "$T/src/tree/sub"
    mkfile "$T/src/f" 12M
    mkfile "$T/src/tree/a" 70000
    mkfile "$T/src/tree/sub/b" 3
    for s in 1 4; do
        mkdir -p "$T/dst.$s"
        expect_exit 0 "$PCOPY" -3 -s "$s" "h1:$T/src/f" "h2:$T/dst.$s/"
        same_file "$T/src/f" "$T/dst.$s/f"
        expect_stderr_matches 'relayed through this host'
        expect_exit 0 "$PCOPY" -3 -r -s "$s" "h1:$T/src/tree" "h2:$T/dst.$s/"
        diff -r "$T/src/tree" "$T/dst.$s/tree" || fail "the relayed tree differs"
        no_temp_files "$T/dst.$s"
    done
    expect_exit 1 "$PCOPY" -3 "$T/src/f" "h2:$T/dst.1/x"
    expect_stderr_matches '-3 is for a copy between two remote hosts'
    expect_exit 1 "$PCOPY" -3 -z "h1:$T/src/f" "h2:$T/dst.1/x"
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

# _tcp_of PID: the established TCP connections of PID.
_tcp_of() {
    ss -Htnp state established 2>/dev/null | grep "pid=$1," || true
}

# _remotes_connected: two remote pcopy processes run, each with an
# established TCP connection.
_remotes_connected() {
    local p n=0
    for p in $(sshd_remote_pids); do
        [[ -n $(_tcp_of "$p") ]] && n=$((n + 1))
    done
    [[ $n -ge 2 ]]
}

case_third_party_direct() {
    # The data goes from h1 to h2 directly: while h1 reads a slow FIFO, the
    # two remote ends are connected and the client has no TCP connection.
    local cpid relayed='' i
    mkdir -p "$T/dst"
    slow_producer "$T/fifo" 3145728 4 "$T/in"
    "$PCOPY" -s 4 "h1:$T/fifo" "h2:$T/dst/out" 2>"$T/err" &
    cpid=$!
    track_pid "$cpid"
    if ! wait_until 30 _remotes_connected; then
        sed 's/^/  stderr: /' "$T/err" >&2
        fail "the two remote pcopy processes were never connected to each other"
    fi
    while ! proc_gone "$cpid"; do
        [[ -n $relayed ]] || relayed=$(_tcp_of "$cpid")
        sleep 0.05
    done
    wait_exit 60 "$cpid" || fail "the third-party copy did not finish"
    [[ $WAIT_RC -eq 0 ]] || fail "the third-party copy exited with $WAIT_RC: $(cat "$T/err")"
    [[ -z $relayed ]] || fail "the client had a TCP connection of its own: $relayed"
    same_file "$T/in" "$T/dst/out"
}

run_case reverse case_reverse
run_case port-range case_port_range
run_case port-range-taken case_port_range_taken
run_case address-family case_address_family
run_case third-party case_third_party
run_case third-party-direct case_third_party_direct
run_case third-party-relayed case_third_party_relayed
finish
