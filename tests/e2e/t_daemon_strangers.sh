#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_daemon_strangers (issue 17): a daemon keeps serving its clients while
# strangers (tests/e2e/stranger.py, from 127.0.0.2) hold idle connections,
# trickle TLS handshakes and route preambles a byte at a time, or send
# hostile text. Real clients (from 127.0.0.1) push and pull 1 MiB files
# meanwhile: at least 95% must succeed, each within 2 s (times $SLOW); the
# daemon's memory stays bounded, it cuts every stranger at about 10 s from
# accept, and what strangers send reaches its log only escaped.
# ctest: cost 55
source "$PCOPY_TEST_LIB"

STRANGER=$(cd "$(dirname "$PCOPY_TEST_LIB")" && pwd)/stranger.py
COPIES=20          # pushes, and as many pulls, while the strangers are there
LAT_MAX=2          # seconds one 1 MiB copy may take on loopback (times $SLOW)
RATE_MIN=95        # per cent of the copies that must succeed
COPY_GAP=0.3       # s from one copy's start to the next: the 40 span 12 s,
                   # past the daemon's 10 s deadline for a stranger
HWM_MAX_MIB=64     # the daemon's peak RSS under 500 idle connections
HWM_GROWTH_MIB=8   # and how much of it the strangers may add

command -v python3 >/dev/null || skip_test "python3 is missing (tools/install-deps installs it)"
# The strangers connect from 127.0.0.2: all of 127.0.0.0/8 is loopback on
# Linux, without root; a system where it is not cannot run this test.
python3 -c 'import socket; socket.socket().bind(("127.0.0.2", 0))' 2>/dev/null ||
    skip_test "cannot bind to 127.0.0.2 (not a loopback address here)"

# start_stranger NAME WANT ARGS...: stranger.py ARGS against the daemon,
# its output in $T/NAME.out, until it has tried each of its connections
# once (or has sent its garbage); fails unless at least WANT of them are up.
# Sets STRANGER_PID.
STRANGER_PID=''
start_stranger() {
    local name=$1 want=$2 up
    shift 2
    python3 "$STRANGER" "$@" >"$T/$name.out" 2>"$T/$name.err" &
    STRANGER_PID=$!
    track_pid "$STRANGER_PID"
    wait_until 30 grep -q '^up ' "$T/$name.out" || {
        cat "$T/$name.err" >&2
        fail "stranger $name ($*) did not get its connections up"
    }
    up=$(sed -n 's/^up \([0-9]*\)$/\1/p' "$T/$name.out" | head -n 1)
    log "stranger $name ($*): up $up"
    ((up >= want)) || fail "stranger $name got only $up connections up, wanted at least $want"
}

# stop_stranger NAME PID: stop it; it prints its still-open connections and
# its totals on the way out.
stop_stranger() {
    stop_pid "$2"
    grep -q '^done ' "$T/$1.out" || {
        cat "$T/$1.err" >&2
        fail "stranger $1 did not end cleanly"
    }
    log "stranger $1: $(grep '^done ' "$T/$1.out")"
}

# legit_copies TAG: COPIES pushes of $T/src and as many pulls of the root's
# seed, alternating, one every COPY_GAP s (or as soon as the one before
# ends), each timed; a copy that succeeds must be exact. Writes
# "push|pull K RC SECONDS" lines to $T/TAG.times (copies_figures and
# check_copies read them).
legit_copies() {
    local tag=$1 k dir rc t0 secs start=$EPOCHREALTIME i=0
    mkdir -p "$T/back"
    : >"$T/$tag.times"
    for ((k = 1; k <= COPIES; k++)); do
        for dir in push pull; do
            sleep "$(awk -v a="$start" -v b="$EPOCHREALTIME" -v i="$i" -v g="$COPY_GAP" \
                'BEGIN { w = a + i * g - b; printf "%.3f\n", (w > 0 ? w : 0) }')"
            i=$((i + 1))
            rc=0
            t0=$EPOCHREALTIME
            if [[ $dir == push ]]; then
                timeout -k 5 $((20 * SLOW)) "$PCOPY" -q -s 2 "$T/src" "$DAEMON_URL/$tag.$k" \
                    --key-file "$DAEMON_KEY" 2>"$T/$tag.$dir.$k.err" || rc=$?
            else
                timeout -k 5 $((20 * SLOW)) "$PCOPY" -q -s 2 "$DAEMON_URL/seed" "$T/back/$tag.$k" \
                    --key-file "$DAEMON_KEY" 2>"$T/$tag.$dir.$k.err" || rc=$?
            fi
            secs=$(secs3_since "$t0")
            if ((rc == 0)); then
                if [[ $dir == push ]]; then
                    same_file "$T/src" "$T/root/$tag.$k"
                else
                    same_file "$T/root/seed" "$T/back/$tag.$k"
                fi
            fi
            echo "$dir $k $rc $secs" >>"$T/$tag.times"
        done
    done
}

# secs3_since START: seconds since START (a `now` value), 3 decimals.
secs3_since() {
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", b - a }'
}

# copies_figures TAG: from $T/TAG.times, log every wall time, the success
# rate, median and maximum, and the first failures' messages; sets
# COPIES_N, COPIES_OK and COPIES_MAX.
COPIES_N='' COPIES_OK='' COPIES_MAX=''
copies_figures() {
    local tag=$1 f=$T/$1.times n ok med max dir
    for dir in push pull; do
        log "$tag: $dir wall s: $(awk -v d="$dir" '$1 == d { printf "%s%s", $4, ($3 == 0 ? " " : "(exit " $3 ") ") }' "$f")"
    done
    n=$(wc -l <"$f")
    ok=$(awk '$3 == 0' "$f" | wc -l)
    med=$(awk '{ print $4 }' "$f" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    max=$(awk '{ print $4 }' "$f" | sort -g | tail -n 1)
    log "$tag: $ok of $n copies succeeded; wall s median $med, max $max (limit $((LAT_MAX * SLOW)))"
    # The first failures, with what the client said.
    awk '$3 != 0 { print $1 "." $2 }' "$f" | head -n 3 | while read -r k; do
        sed "s/^/  $tag $k: /" "$T/$tag.$k.err" | head -n 3 >&2
    done
    COPIES_N=$n COPIES_OK=$ok COPIES_MAX=$max
}

# check_copies TAG: after copies_figures TAG, fail when fewer than
# RATE_MIN per cent of TAG's copies succeeded, or when one (failed or not)
# took longer than LAT_MAX x SLOW seconds.
check_copies() {
    local tag=$1 n=$COPIES_N ok=$COPIES_OK max=$COPIES_MAX limit=$((LAT_MAX * SLOW))
    ((n == 2 * COPIES)) || fail "$tag: $n copies recorded, wanted $((2 * COPIES))"
    ((ok * 100 >= RATE_MIN * n)) || fail "$tag: only $ok of $n copies succeeded (need $RATE_MIN%)"
    awk -v m="$max" -v l="$limit" 'BEGIN { exit !(m <= l) }' ||
        fail "$tag: the slowest copy took $max s, more than $limit s"
}

# daemon_mem: the daemon's (its parent process's) memory, in KiB: sets
# MEM_HWM (VmHWM, peak RSS), MEM_RSS (VmRSS) and MEM_PSS (Pss of
# smaps_rollup: its share of the pages it shares with its sessions).
MEM_HWM='' MEM_RSS='' MEM_PSS=''
daemon_mem() {
    MEM_HWM=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$DAEMON_PID/status")
    MEM_RSS=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$DAEMON_PID/status")
    MEM_PSS=$(awk '$1 == "Pss:" { print $2 }' "/proc/$DAEMON_PID/smaps_rollup")
    [[ $MEM_HWM =~ ^[0-9]+$ && $MEM_RSS =~ ^[0-9]+$ && $MEM_PSS =~ ^[0-9]+$ ]] ||
        fail "cannot read the daemon's memory from /proc/$DAEMON_PID"
}

# strangers_setup: a daemon serving $T/root, with a seed file to pull and
# a source file to push, both 1 MiB.
strangers_setup() {
    mkdir -p "$T/root"
    mkfile "$T/src" 1M
    mkfile "$T/root/seed" 1M
    # Every stranger comes from 127.0.0.2: --max-per-source would close
    # most of them at once (t_daemon per-source tests that), and this test
    # is about what the daemon does with those it holds.
    # shellcheck disable=SC2034 # lib.sh's, read by start_daemon
    DAEMON_ARGS=(--max-per-source 4096)
    start_daemon "$T/root"
    # shellcheck disable=SC2034
    DAEMON_ARGS=()
}

# start_clear_daemon: a daemon serving $T/root that allows sessions in
# clear (--allow-unencrypted): it reads what a stranger sends in clear.
start_clear_daemon() {
    # shellcheck disable=SC2034 # lib.sh's, read by start_daemon
    DAEMON_ARGS=(--allow-unencrypted)
    start_daemon "$T/root"
    # shellcheck disable=SC2034
    DAEMON_ARGS=()
}

# idle_case N: copies while N idle connections are held (and re-opened as
# the daemon closes them), and the daemon's memory before and after.
idle_case() {
    local n=$1 hwm0 hwm1 pid
    strangers_setup
    # One copy first: the daemon's parent runs TLS handshakes itself, and
    # OpenSSL's set-up there is no stranger's doing.
    mkfile "$T/warm" 65536
    expect_exit 0 "$PCOPY" "$T/warm" "$DAEMON_URL/warm" --key-file "$DAEMON_KEY"
    daemon_mem
    hwm0=$MEM_HWM
    log "idle-$n: daemon memory at start: VmHWM $MEM_HWM KiB, VmRSS $MEM_RSS KiB, Pss $MEM_PSS KiB"
    start_stranger idle $((n * 9 / 10)) --max-time $((40 * SLOW)) "$DAEMON_PORT" idle "$n"
    pid=$STRANGER_PID
    sleep 2
    daemon_mem
    hwm1=$MEM_HWM
    log "idle-$n: daemon memory with $n idle strangers: VmHWM $MEM_HWM KiB (+$((MEM_HWM - hwm0))), VmRSS $MEM_RSS KiB, Pss $MEM_PSS KiB"
    legit_copies "idle-$n"
    copies_figures "idle-$n"
    daemon_mem
    log "idle-$n: daemon memory after the copies too: VmHWM $MEM_HWM KiB, VmRSS $MEM_RSS KiB, Pss $MEM_PSS KiB;" \
        "its log has $(wc -l <"$DAEMON_LOG") lines"
    stop_stranger idle "$pid"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
    check_copies "idle-$n"
    ((MEM_HWM <= HWM_MAX_MIB * 1024)) ||
        fail "idle-$n: the daemon's peak RSS is $MEM_HWM KiB, more than $HWM_MAX_MIB MiB"
    ((hwm1 - hwm0 <= HWM_GROWTH_MIB * 1024)) ||
        fail "idle-$n: the strangers grew the daemon's peak RSS by $((hwm1 - hwm0)) KiB, more than $HWM_GROWTH_MIB MiB"
    # They cost no session process: nothing is forked for a connection
    # that has not said it is TLS.
    if ((n > 256)); then
        daemon_logged '^pcopy: dropped 127\.0\.0\.2:[0-9]+: 256 connections wait already, this was the oldest$' ||
            fail "idle-$n: the daemon did not log dropping the oldest of more than 256 waiting connections"
    fi
    ! daemon_logged '^pcopy: (refused|dropped) 127\.0\.0\.1:' ||
        fail "idle-$n: the daemon refused or dropped a real client: $(grep -E 'pcopy: (refused|dropped) 127\.0\.0\.1:' "$DAEMON_LOG" | head -n 3)"
}

case_idle_64() {
    idle_case 64
}

case_idle_500() {
    idle_case 500
}

# cut_figures NAME: log when the daemon closed stranger NAME's
# connections; sets CUT (closed after 8 to 14 s), EARLY (before 8 s:
# refused at once) and LONG (held or open longer than 14 s).
CUT='' EARLY='' LONG=''
cut_figures() {
    local name=$1 f=$T/$1.out cut long
    cut=$(awk '$1 == "closed" && $3 >= 8 && $3 <= 14' "$f" | wc -l)
    EARLY=$(awk '$1 == "closed" && $3 < 8' "$f" | wc -l)
    long=$(awk '($1 == "closed" || $1 == "open") && $3 > 14' "$f" | wc -l)
    log "$name: $cut connections cut after 8-14 s (lifetimes $(awk '$1 == "closed" && $3 >= 8 { print $3 }' "$f" |
        sort -g | sed -n '1p;$p' | tr '\n' ' ')), $EARLY closed before 8 s, $long open longer than 14 s"
    CUT=$cut LONG=$long
}

# check_cut NAME HELD: after cut_figures NAME, at least HELD of stranger
# NAME's connections were cut 8 to 14 s after connect, and none was held
# longer.
check_cut() {
    local name=$1 held=$2 cut=$CUT long=$LONG
    ((long == 0)) || fail "$name: $long connections were held longer than 14 s"
    ((cut >= held)) || fail "$name: only $cut connections were cut after 8-14 s, wanted at least $held"
}

# 80 connections trickling a TLS handshake and 80 trickling a route
# preamble, a byte every 3 s: the daemon cuts each at 10 s from accept (the
# first wave is watched for 16 s), and copies go through meanwhile.
case_trickle_80() {
    local ctl data t0 refused
    strangers_setup
    t0=$SECONDS
    start_stranger trickle-tls 72 --max-time $((40 * SLOW)) "$DAEMON_PORT" trickle 80 3
    ctl=$STRANGER_PID
    start_stranger trickle-route 72 --max-time $((40 * SLOW)) "$DAEMON_PORT" trickle 80 3 --preamble
    data=$STRANGER_PID
    legit_copies trickle-80
    # Copies done (or failed: checked below), the first wave's 10 s are up.
    while ((SECONDS - t0 < 16)); do sleep 0.5; done
    stop_stranger trickle-tls "$ctl"
    stop_stranger trickle-route "$data"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
    refused=$(grep -cE '^pcopy: refused 127\.0\.0\.2:[0-9]+: [0-9]+ sessions already running$' "$DAEMON_LOG" || true)
    log "trickle-80: the daemon refused $refused stranger connections for want of a session slot;" \
        "its log has $(wc -l <"$DAEMON_LOG") lines"
    # All the figures first, then the checks. Each of the 160 tricklers
    # waits in the daemon's parent (room for 256) until its 10 s are up:
    # the parent runs the TLS handshakes itself, so a stranger in one
    # costs no session process and takes no session slot.
    cut_figures trickle-route
    check_cut trickle-route 80
    ((EARLY == 0)) || fail "trickle-route: $EARLY connections were closed before 8 s"
    cut_figures trickle-tls
    copies_figures trickle-80
    check_cut trickle-tls 80
    ((EARLY == 0)) || fail "trickle-tls: $EARLY connections were closed before 8 s"
    ((refused == 0)) || fail "trickle-80: strangers in a TLS handshake took session slots ($refused refused)"
    check_copies trickle-80
}

# no_raw_text LOG N: the log of a daemon that N garbage connections talked
# to has no raw control character, no forged line, and at most 3 lines and
# 600 bytes per connection (and a few of its own).
no_raw_text() {
    local f=$1 n=$2 lines bytes
    if LC_ALL=C grep -qP '[\x00-\x09\x0b-\x1f\x7f]' "$f"; then
        LC_ALL=C grep -nP '[\x00-\x09\x0b-\x1f\x7f]' "$f" | head -n 5 | cat -A | sed 's/^/  log: /' >&2
        fail "the daemon's log holds raw control characters (above, as cat -A shows them)"
    fi
    if grep -q '^pcopy: session from 10\.9\.9\.9' "$f"; then
        fail "the daemon's log has a line forged by a stranger: $(grep -m1 '10\.9\.9\.9' "$f")"
    fi
    lines=$(wc -l <"$f")
    bytes=$(wc -c <"$f")
    log "$n garbage connections: the daemon logged $lines lines, $bytes bytes"
    ((lines <= 3 * n + 5)) || fail "the daemon logged $lines lines for $n garbage connections"
    ((bytes <= 600 * n + 1000)) || fail "the daemon logged $bytes bytes for $n garbage connections"
    grep -q '127\.0\.0\.2' "$f" || fail "the daemon's log does not name the strangers' address"
}

# Garbage with control characters and a forged log line, sent to a daemon
# that requires TLS and to one that allows clear text (its sessions parse
# what a client in clear sends): neither log holds it raw.
case_hostile_text() {
    local pid n=25 escaped=0 f
    strangers_setup
    start_stranger garbage-tls "$n" --max-time $((30 * SLOW)) "$DAEMON_PORT" garbage "$n"
    pid=$STRANGER_PID
    wait_exit $((30 * SLOW)) "$pid" || fail "the garbage stranger did not finish"
    # The sessions of the last ones may still be writing their line.
    sleep 1
    no_raw_text "$DAEMON_LOG" "$n"
    expect_exit 0 "$PCOPY" -s 2 "$T/src" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/src" "$T/root/after"
    f=$DAEMON_LOG
    start_clear_daemon
    start_stranger garbage-clear "$n" --max-time $((30 * SLOW)) "$DAEMON_PORT" garbage "$n"
    pid=$STRANGER_PID
    wait_exit $((30 * SLOW)) "$pid" || fail "the garbage stranger did not finish"
    sleep 1
    no_raw_text "$DAEMON_LOG" "$n"
    expect_exit 0 "$PCOPY" -s 2 "$DAEMON_URL/seed" "$T/pulled" --key-file "$DAEMON_KEY"
    same_file "$T/root/seed" "$T/pulled"
    # The daemon in clear reports what the ERROR frames said (the sixth
    # connection of every six: 4 of 25), escaped, each on one line of its
    # own that names the stranger. The daemon that requires TLS reads no
    # text.
    # shellcheck disable=SC2016 # a literal \x1b, as the log escapes ESC
    # (cat -v: the bytes the log leaves raw must not reach this test's output either.)
    escaped=$(grep -acF '\x0d\x0apcopy: session from 10.9.9.9:22 done\x1b[2J\x1b]0;owned\x07\x7f\x08' "$DAEMON_LOG" || true)
    log "hostile-text: $escaped log lines quote a stranger's text, escaped: $(grep -a -m1 -F '10.9.9.9' "$DAEMON_LOG" | cat -v || true)"
    ((escaped == (n + 1) / 6)) ||
        fail "the daemon in clear quoted the strangers' ERROR text escaped $escaped times, wanted $(((n + 1) / 6))"
    ! grep -qF '10.9.9.9' "$f" || fail "the daemon that requires TLS logged a stranger's text"
}

# C1 control characters (0x80-0x9f) are control characters too: a raw
# 0x9b is CSI to an 8-bit terminal, U+009B (0xc2 0x9b) to some UTF-8 ones.
# What a stranger sends must reach the log without them.
case_hostile_c1() {
    local pid n=6
    mkdir -p "$T/root"
    start_clear_daemon
    start_stranger garbage-c1 "$n" --max-time $((30 * SLOW)) "$DAEMON_PORT" garbage "$n" --c1
    pid=$STRANGER_PID
    wait_exit $((30 * SLOW)) "$pid" || fail "the garbage stranger did not finish"
    sleep 1
    no_raw_text "$DAEMON_LOG" "$n"
    grep -qF '10.9.9.9' "$DAEMON_LOG" || fail "the stranger's ERROR text did not reach the log"
    if LC_ALL=C grep -qP '\x9b|\xc2[\x80-\x9f]' "$DAEMON_LOG"; then
        LC_ALL=C grep -P '\x9b|\xc2[\x80-\x9f]' "$DAEMON_LOG" | head -n 2 | cat -A | sed 's/^/  log: /' >&2
        fail "the daemon's log holds raw C1 control characters from a stranger (above, as cat -A shows them)"
    fi
}

run_case idle-64 case_idle_64
run_case idle-500 case_idle_500
run_case trickle-80 case_trickle_80
run_case hostile-text case_hostile_text
run_case hostile-c1 case_hostile_c1
finish
