#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_bwlimit: --bwlimit (-x) caps the data of every stream together, in
# every mode: a local copy, a push and a pull through ssh, a push and a pull
# with a daemon, a third-party copy (the cap travels to the source h1) and
# one relayed through the client (-3). Each copy must take at least as long
# as its bytes need at the cap (no scheduling can make a cap copy faster),
# arrive whole, and name the cap as its bottleneck. And the cap is smooth:
# captured on the wire, no 100 ms of a capped copy carries much more than
# 100 ms of the rate, where an uncapped writer hands the socket whole
# blocks of 1 MiB. Bad rates are refused with the option named.
# ctest: cost 30
source "$PCOPY_TEST_LIB"
needs_root "it captures loopback traffic with tcpdump and runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

command -v tcpdump >/dev/null || fail "tcpdump is missing (tools/install-deps installs it)"

MIB=1048576

# capped_copy MIB_AT_CAP ARGS...: runs pcopy -x 1M ARGS, which moves
# MIB_AT_CAP MiB, and checks that it took at least as long as that needs at
# 1 MiB/s (less the first piece, which goes at once), and not absurdly
# longer.
capped_copy() {
    local mib=$1 t0 secs
    shift
    t0=$(now)
    expect_exit 0 "$PCOPY" -x 1M "$@"
    secs=$(secs_since "$t0")
    awk -v s="$secs" -v m="$mib" 'BEGIN { exit !(s >= m * 0.98) }' ||
        fail "pcopy -x 1M $* moved $mib MiB in $secs s: faster than the cap"
    awk -v s="$secs" -v m="$mib" -v k="$SLOW" 'BEGIN { exit !(s <= m * 2 + 10 * k) }' ||
        fail "pcopy -x 1M $* moved $mib MiB in $secs s: far slower than the cap"
}

case_local() {
    mkfile "$T/f" 4M
    capped_copy 4 -s 4 "$T/f" "$T/out"
    same_file "$T/f" "$T/out"
    # 4 s of data behind a few ms of set-up: the cap is the bottleneck.
    expect_stderr_contains "bottleneck: --bwlimit 1.0 MiB/s"
    # With many more streams than blocks too: the idle ones do not hide it.
    capped_copy 4 -s 64 "$T/f" "$T/out64"
    expect_stderr_contains "bottleneck: --bwlimit 1.0 MiB/s"
    # In bits per second, as networks count: 16 Mbit/s is 2 MB/s.
    local t0 secs
    t0=$(now)
    expect_exit 0 "$PCOPY" --bwlimit 16mbit "$T/f" "$T/out2"
    secs=$(secs_since "$t0")
    awk -v s="$secs" 'BEGIN { exit !(s >= 4 * 1048576 / 2e6 * 0.98) }' ||
        fail "4 MiB at 16 Mbit/s took $secs s"
    same_file "$T/f" "$T/out2"
}

case_ssh() {
    mkfile "$T/f" 2M
    capped_copy 2 -s 4 "$T/f" "pctest:$T/pushed"
    same_file "$T/f" "$T/pushed"
    capped_copy 2 -s 4 "pctest:$T/f" "$T/pulled"
    same_file "$T/f" "$T/pulled"
}

case_third_party() {
    mkfile "$T/f" 2M
    mkdir "$T/d1" "$T/d3"
    capped_copy 2 -s 4 "h1:$T/f" "h2:$T/d1/"
    same_file "$T/f" "$T/d1/f"
    capped_copy 2 -s 4 -3 "h1:$T/f" "h2:$T/d3/"
    same_file "$T/f" "$T/d3/f"
}

case_daemon() {
    mkdir "$T/root"
    mkfile "$T/f" 2M
    start_daemon "$T/root"
    capped_copy 2 -s 4 "$T/f" "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    same_file "$T/f" "$T/root/pushed"
    capped_copy 2 -s 4 "$DAEMON_URL/pushed" "$T/pulled" --key-file "$DAEMON_KEY"
    same_file "$T/f" "$T/pulled"
}

# peak_100ms PCAP: the most payload bytes the capture saw in any 100 ms.
peak_100ms() {
    tcpdump -r "$1" -n -tt -q 2>/dev/null | awk '
        { if (s == "") s = $1; t = int(($1 - s) * 10); n = $NF + 0; if (n > 0) b[t] += n }
        END { m = 0; for (k in b) if (b[k] > m) m = b[k]; print m }'
}

case_smooth() {
    local port peak
    mkfile "$T/f" 3M
    port=$(free_port)
    # At 1 MiB/s a 100 ms window holds 105 kB; a whole block of 1 MiB
    # handed to the socket at once would put most of it in one window.
    start_capture "$T/capped.pcap" "tcp port $port"
    expect_exit 0 "$PCOPY" -x 1M -s 2 -Z "$port-$port" "$T/f" "$T/out"
    stop_capture "$T/capped.pcap"
    same_file "$T/f" "$T/out"
    peak=$(peak_100ms "$T/capped.pcap")
    log "peak 100 ms at -x 1M: $peak bytes"
    ((peak > 50000 && peak <= 2 * 104858)) ||
        fail "at -x 1M the busiest 100 ms carried $peak bytes (want 50000 to 209716)"
    # The same copy capped at 4 MiB/s: the peak follows the cap.
    port=$(free_port)
    start_capture "$T/fast.pcap" "tcp port $port"
    expect_exit 0 "$PCOPY" -x 4M -s 2 -Z "$port-$port" "$T/f" "$T/out.fast"
    stop_capture "$T/fast.pcap"
    peak=$(peak_100ms "$T/fast.pcap")
    log "peak 100 ms at -x 4M: $peak bytes"
    ((peak > 200000 && peak <= 2 * 419430)) ||
        fail "at -x 4M the busiest 100 ms carried $peak bytes (want 200000 to 838860)"
}

case_bad_rates() {
    local r
    mkfile "$T/f" 1k
    for r in 0 1023 10x 1.5M -1 2T 10Mbit/s ''; do
        expect_exit 1 "$PCOPY" --bwlimit "$r" "$T/f" "$T/out"
        expect_stderr_contains "--bwlimit: '$r' is not a rate"
    done
    [[ ! -e $T/out ]] || fail "a refused --bwlimit copied anyway"
}

sshd_start
run_case local case_local
run_case ssh case_ssh
run_case third-party case_third_party
run_case daemon case_daemon
run_case smooth case_smooth
run_case bad-rates case_bad_rates
finish
