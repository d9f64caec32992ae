#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_daemon: push and pull through `pcopy --serve`: sizes around the block
# size with 1 to 8 streams, destination names, PCOPY_KEY_FILE, concurrent
# sessions, strangers on the port, its limits (--max-sessions and the busy
# answer, --max-startups, --max-per-source), its summarised log under a
# flood, and the daemon's exit on a signal.
# ctest: cost 75
source "$PCOPY_TEST_LIB"

B=1048576
SIZES="0 1 $((B - 1)) $((B + 1)) $((3 * B + 17))"

case_push_pull_matrix() {
    local s n
    mkdir -p "$T/root" "$T/src" "$T/back"
    start_daemon "$T/root"
    for n in $SIZES; do
        mkfile "$T/src/f$n" "$n"
    done
    for s in 1 2 4 8; do
        for n in $SIZES; do
            expect_exit 0 "$PCOPY" -s "$s" "$T/src/f$n" "$DAEMON_URL/f$n.s$s" --key-file "$DAEMON_KEY"
            expect_summary "$n" 1 "$s"
            same_file "$T/src/f$n" "$T/root/f$n.s$s"
            expect_exit 0 "$PCOPY" -s "$s" "$DAEMON_URL/f$n.s$s" "$T/back/f$n.s$s" --key-file "$DAEMON_KEY"
            expect_summary "$n" 1 "$s"
            same_file "$T/src/f$n" "$T/back/f$n.s$s"
        done
    done
    # A smaller block size, both ways.
    expect_exit 0 "$PCOPY" -s 4 -B 64k "$T/src/f$((3 * B + 17))" "$DAEMON_URL/b64k" --key-file "$DAEMON_KEY"
    same_file "$T/src/f$((3 * B + 17))" "$T/root/b64k"
    expect_exit 0 "$PCOPY" -s 3 -B 64k "$DAEMON_URL/b64k" "$T/back/b64k" --key-file "$DAEMON_KEY"
    same_file "$T/src/f$((3 * B + 17))" "$T/back/b64k"
    wait_no_temp_files "$T/root"
    no_temp_files "$T/back"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

case_destination_names() {
    mkdir -p "$T/root/sub" "$T/local"
    mkfile "$T/a" 100000
    mkfile "$T/b" 2000
    start_daemon "$T/root"
    local k=(--key-file "$DAEMON_KEY")
    # The root itself, as "/" and as an empty path.
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/" "${k[@]}"
    same_file "$T/a" "$T/root/a"
    expect_exit 0 "$PCOPY" "$T/b" "$DAEMON_URL" "${k[@]}"
    same_file "$T/b" "$T/root/b"
    # An existing directory below the root, with several sources.
    expect_exit 0 "$PCOPY" "$T/a" "$T/b" "$DAEMON_URL/sub" "${k[@]}"
    expect_summary 102000 2 4
    same_file "$T/a" "$T/root/sub/a"
    same_file "$T/b" "$T/root/sub/b"
    # A new name, in a subdirectory.
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/sub/renamed" "${k[@]}"
    same_file "$T/a" "$T/root/sub/renamed"
    # An existing file on the daemon is replaced.
    expect_exit 0 "$PCOPY" "$T/b" "$DAEMON_URL/sub/renamed" "${k[@]}"
    same_file "$T/b" "$T/root/sub/renamed"
    # Several sources into a name that is not a directory.
    expect_exit 1,11 "$PCOPY" "$T/a" "$T/b" "$DAEMON_URL/notadir" "${k[@]}"
    expect_stderr_contains notadir
    [[ ! -e $T/root/notadir ]] || fail "root/notadir was created"
    # A missing directory under the root.
    expect_exit 11 "$PCOPY" "$T/a" "$DAEMON_URL/nodir/x" "${k[@]}"
    expect_stderr_contains nodir
    [[ ! -e $T/root/nodir ]] || fail "root/nodir was created"
    # A pull into an existing local directory keeps the base name.
    expect_exit 0 "$PCOPY" "$DAEMON_URL/sub/a" "$T/local" "${k[@]}"
    same_file "$T/a" "$T/local/a"
    wait_no_temp_files "$T/root"
    no_temp_files "$T/local"
}

case_pull_missing() {
    # A pull whose only source is missing, or a directory: like a local
    # copy of a missing source, exit 3, naming it, and no file is made.
    mkdir -p "$T/root/sub" "$T/local"
    start_daemon "$T/root"
    expect_exit 3 "$PCOPY" "$DAEMON_URL/sub/missing" "$T/local/m" --key-file "$DAEMON_KEY"
    expect_stderr_contains "sub/missing"
    [[ ! -e $T/local/m ]] || fail "a pull of a missing file created $T/local/m"
    expect_exit 3 "$PCOPY" "$DAEMON_URL/sub" "$T/local/subcopy" --key-file "$DAEMON_KEY"
    expect_stderr_contains "sub"
    [[ ! -e $T/local/subcopy ]] || fail "a pull of a directory created $T/local/subcopy"
    no_temp_files "$T/local"
}

case_pull_some_missing() {
    # Several sources, of which one is missing and one a directory: the
    # others are copied, each bad one is named once with the daemon's
    # address and the reason, exit 3, as in a push.
    local host f got
    mkdir -p "$T/root/sub/dir" "$T/local"
    mkfile "$T/root/sub/a" 3M
    mkfile "$T/root/sub/c" 5000
    start_daemon "$T/root"
    host=127.0.0.1:$DAEMON_PORT
    expect_exit 3 "$PCOPY" -s 4 "$DAEMON_URL/sub/missing" "$DAEMON_URL/sub/a" \
        "$DAEMON_URL/sub/dir" "$DAEMON_URL/sub/c" "$T/local" --key-file "$DAEMON_KEY"
    for f in "cannot open source 'sub/missing': No such file or directory" \
        "omitting directory 'sub/dir'"; do
        [[ $(grep -cF "$host: $f" "$LAST_STDERR") -eq 1 ]] || {
            sed 's/^/  stderr: /' "$LAST_STDERR" >&2
            fail "stderr does not name '$host: $f' exactly once"
        }
    done
    expect_stderr_contains "2 of 4 files were not copied"
    same_file "$T/root/sub/a" "$T/local/a"
    same_file "$T/root/sub/c" "$T/local/c"
    got=$(cd "$T/local" && find . -mindepth 1 -printf '%P\n' | sort | tr '\n' ' ')
    [[ $got == "a c " ]] || fail "$T/local holds '$got', wanted 'a c '"
    no_temp_files "$T/local"
    # Nothing at all can be sent: still exit 3, and nothing is written.
    rm -f "$T/local/"*
    expect_exit 3 "$PCOPY" "$DAEMON_URL/sub/x" "$DAEMON_URL/sub/y" "$T/local" --key-file "$DAEMON_KEY"
    expect_stderr_contains "'sub/x'"
    expect_stderr_contains "'sub/y'"
    dir_is_empty "$T/local" || fail "files appeared in $T/local"
}

# A client with the most streams, against a daemon's defaults: its data
# connections wait at the daemon for their session, and --max-per-source
# (32 once) closed the 33rd, so -s 32 and more always failed.
case_many_streams() {
    mkdir -p "$T/root"
    mkfile "$T/f" 8M
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -q -s 64 "$T/f" "$DAEMON_URL/f" --key-file "$DAEMON_KEY"
    same_file "$T/f" "$T/root/f"
    expect_exit 0 "$PCOPY" -q -s 64 "$DAEMON_URL/f" "$T/back" --key-file "$DAEMON_KEY"
    same_file "$T/f" "$T/back"
    # A session that fails (a path that leads outside) leaves its client's
    # data connections behind: they go quietly, neither logged as refused
    # or dropped like a stranger's nor held for 10 s.
    mkdir -p "$T/outside"
    ln -s "$T/outside" "$T/root/lnk"
    for i in 1 2 3; do
        expect_fail "$PCOPY" -q -s 8 "$T/f" "$DAEMON_URL/lnk/new" --key-file "$DAEMON_KEY"
        expect_stderr_contains "leads outside"
    done
    sleep 1
    if grep -E "refused|dropped|more connection" "$DAEMON_LOG" >&2; then
        fail "a legitimate client's failed sessions were logged as refusals (above)"
    fi
}

case_key_file_env() {
    mkdir -p "$T/root"
    mkfile "$T/a" 1500000
    start_daemon "$T/root"
    PCOPY_KEY_FILE=$DAEMON_KEY expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/a"
    same_file "$T/a" "$T/root/a"
    PCOPY_KEY_FILE=$DAEMON_KEY expect_exit 0 "$PCOPY" "$DAEMON_URL/a" "$T/back"
    same_file "$T/a" "$T/back"
    # --key-file overrides the environment.
    "$PCOPY" --gen-key "$T/other.key"
    PCOPY_KEY_FILE=$T/other.key expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/a2" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/a2"
    PCOPY_KEY_FILE=$DAEMON_KEY expect_exit 5 "$PCOPY" "$T/a" "$DAEMON_URL/a3" --key-file "$T/other.key"
    [[ ! -e $T/root/a3 ]] || fail "a3 was written with the wrong key"
}

# gated_input GATE: 3 MiB of random data, then, once GATE exists, 3 more.
gated_input() {
    head -c 3M /dev/urandom
    while [[ ! -e $1 ]]; do sleep 0.05; done
    head -c 3M /dev/urandom
}

case_two_sessions() {
    # Two pushes at once against one daemon. Their input stops half-way
    # until the daemon is writing both files, so both sessions are surely
    # open at the same time.
    local p1 p2
    mkdir -p "$T/root"
    start_daemon "$T/root"
    gated_input "$T/gate" | tee "$T/in1" |
        "$PCOPY" -s 4 - "$DAEMON_URL/one" --key-file "$DAEMON_KEY" 2>"$T/one.err" &
    p1=$!
    track_pid "$p1"
    gated_input "$T/gate" | tee "$T/in2" |
        "$PCOPY" -s 2 -B 256k - "$DAEMON_URL/two" --key-file "$DAEMON_KEY" 2>"$T/two.err" &
    p2=$!
    track_pid "$p2"
    wait_until 20 receiving "$T/root" 2 || { touch "$T/gate"; fail "the daemon is not writing both files at once"; }
    [[ $(session_pids | wc -l) -ge 2 ]] || log "note: fewer than two session processes seen"
    touch "$T/gate"
    wait_exit 60 "$p1" || fail "push one did not finish"
    [[ $WAIT_RC -eq 0 ]] || { cat "$T/one.err" >&2; fail "push one exited $WAIT_RC"; }
    wait_exit 60 "$p2" || fail "push two did not finish"
    [[ $WAIT_RC -eq 0 ]] || { cat "$T/two.err" >&2; fail "push two exited $WAIT_RC"; }
    same_file "$T/in1" "$T/root/one"
    same_file "$T/in2" "$T/root/two"
    # And a push and a pull at once.
    mkfile "$T/big" 30M
    "$PCOPY" -q -s 4 "$T/big" "$DAEMON_URL/big" --key-file "$DAEMON_KEY" &
    p1=$!
    "$PCOPY" -q -s 4 "$DAEMON_URL/one" "$T/one.back" --key-file "$DAEMON_KEY" &
    p2=$!
    wait "$p1" || fail "the concurrent push failed"
    wait "$p2" || fail "the concurrent pull failed"
    same_file "$T/big" "$T/root/big"
    same_file "$T/in1" "$T/one.back"
    wait_no_temp_files "$T/root"
}

case_strangers() {
    mkdir -p "$T/root"
    mkfile "$T/a" 2M
    start_daemon "$T/root"
    # Garbage on the control port.
    head -c 1000 /dev/urandom | nc -q1 -w5 127.0.0.1 "$DAEMON_PORT" >/dev/null 2>&1 || true
    # Something that looks like HTTP.
    printf 'GET / HTTP/1.0\r\n\r\n' | nc -q1 -w5 127.0.0.1 "$DAEMON_PORT" >/dev/null 2>&1 || true
    # A connection that is opened and closed at once.
    nc -z -w2 127.0.0.1 "$DAEMON_PORT" || true
    kill -0 "$DAEMON_PID" || fail "the daemon died after receiving garbage"
    # A stranger that connects and says nothing, and stays connected while
    # a real client copies.
    exec {silent}<>"/dev/tcp/127.0.0.1/$DAEMON_PORT" || fail "cannot connect to the daemon"
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/during" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/during"
    exec {silent}>&-
    # And after all of them have gone.
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/after"
    expect_exit 0 "$PCOPY" "$DAEMON_URL/after" "$T/pulled" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/pulled"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
    # The daemon logged the garbage (naming the peer), and wrote nothing.
    grep -q '127\.0\.0\.1' "$DAEMON_LOG" || fail "the daemon log does not name the strangers"
    [[ $(find "$T/root" -mindepth 1 | wc -l) -eq 2 ]] ||
        fail "unexpected files under the root: $(ls -A "$T/root")"
}

# A stranger that connects and never finishes the handshake is cut off
# when the handshake's 10 s are up, however it trickles its bytes: its
# session holds a data listener meanwhile.
case_silent_stranger_cut_off() {
    local fd t0 waited
    mkdir -p "$T/root"
    start_daemon "$T/root"
    exec {fd}<>"/dev/tcp/127.0.0.1/$DAEMON_PORT" || fail "cannot connect to the daemon"
    t0=$SECONDS
    # The first byte of a TLS record, then nothing: the daemon waits
    # inside the TLS handshake, until its deadline from accept. It closes
    # the connection; read then sees EOF.
    printf '\x16' >&"$fd"
    read -r -t 20 -u "$fd" _ && fail "the daemon sent something to a silent stranger"
    waited=$((SECONDS - t0))
    exec {fd}>&-
    ((waited >= 8 && waited <= 14)) || fail "the daemon cut off a silent stranger after $waited s, not about 10"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# Data connections come to the daemon's own port with a route preamble
# (docs/PROTOCOL.md 6.2): a malformed one is dropped at once, one that
# names no session when its 10 s are up, and neither holds up a copy.
case_route_strangers() {
    local bad unknown t0 waited
    mkdir -p "$T/root"
    mkfile "$T/a" 3M
    start_daemon "$T/root"
    # "PCRT" with version 4: not ours.
    exec {bad}<>"/dev/tcp/127.0.0.1/$DAEMON_PORT" || fail "cannot connect to the daemon"
    printf 'PCRT\x00\x04\x00\x00%s' "0123456789abcdef" >&"$bad"
    read -r -t 5 -u "$bad" _ && fail "the daemon answered a malformed route preamble"
    exec {bad}>&-
    wait_daemon_logged "^pcopy: dropped 127\\.0\\.0\\.1:[0-9]+: not a pcopy data connection of version $PROTO_VERSION\$" \
        "that it dropped the malformed preamble"
    # A well-formed preamble with a token no session has.
    exec {unknown}<>"/dev/tcp/127.0.0.1/$DAEMON_PORT" || fail "cannot connect to the daemon"
    t0=$SECONDS
    printf "PCRT\\x00\\x$(printf %02x "$PROTO_VERSION")\\x00\\x00%s" "fedcba9876543210" >&"$unknown"
    # Meanwhile a real copy goes through, both ways.
    expect_exit 0 "$PCOPY" -s 4 "$T/a" "$DAEMON_URL/during" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/during"
    expect_exit 0 "$PCOPY" -s 4 "$DAEMON_URL/during" "$T/pulled" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/pulled"
    read -r -t 20 -u "$unknown" _ && fail "the daemon answered a preamble with an unknown token"
    waited=$((SECONDS - t0))
    exec {unknown}>&-
    ((waited >= 8 && waited <= 14)) || fail "the daemon dropped the unknown token after $waited s, not about 10"
    wait_daemon_logged '^pcopy: dropped 127\.0\.0\.1:[0-9]+: no session of this daemon had its token within 10 s$' \
        "that it dropped the unknown token"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# open_idle N: N connections to the daemon that say nothing, held by a
# python process (IDLE_PID) until it is killed.
IDLE_PID=
open_idle() {
    python3 -c '
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("open", flush=True)
time.sleep(120)
' "$DAEMON_PORT" "$1" >"$T/idle.out" &
    IDLE_PID=$!
    track_pid "$IDLE_PID"
    wait_until 20 grep -q open "$T/idle.out" || fail "could not open $1 idle connections"
}

# Connections that say nothing cost the daemon no session: with 100 of
# them held (more than the 64 sessions it runs), copies go through; with
# more than it holds (256), the oldest go first, and copies still do.
case_idle_connections() {
    mkdir -p "$T/root"
    mkfile "$T/a" 1M
    # All of them come from 127.0.0.1: --max-per-source is case_per_source's.
    DAEMON_ARGS=(--max-per-source 4096)
    start_daemon "$T/root"
    DAEMON_ARGS=()
    open_idle 100
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/with-100" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/with-100"
    [[ -z $(session_pids) ]] || fail "idle connections have session processes: $(session_pids)"
    stop_pid "$IDLE_PID"
    open_idle 300
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/with-300" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/with-300"
    wait_daemon_logged '^pcopy: dropped 127\.0\.0\.1:[0-9]+: 256 connections wait already, this was the oldest$' \
        "that it dropped the oldest idle connections"
    stop_pid "$IDLE_PID"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# has_sessions / no_sessions: the daemon has session processes, or none.
has_sessions() { [[ -n $(session_pids) ]]; }
no_sessions() { [[ -z $(session_pids) ]]; }

# A client that comes while --max-sessions sessions run is told so, in
# TLS, and exits 14; once a session ends, the next one is served.
# hold_one_session: a daemon with --max-sessions 1 serving $T/root, and
# its one session: a pull of the FIFO $T/root/fifo, which has no writer
# yet (HOLDER is the pulling client's pid; echo into the FIFO ends it).
# Also makes $T/a to push.
HOLDER=
hold_one_session() {
    mkdir -p "$T/root" "$T/p"
    mkfile "$T/a" 100000
    mkfifo "$T/root/fifo"
    DAEMON_ARGS=(--max-sessions 1)
    start_daemon "$T/root"
    DAEMON_ARGS=()
    "$PCOPY" "$DAEMON_URL/fifo" "$T/p/fifo" --key-file "$DAEMON_KEY" 2>"$T/holder.err" &
    HOLDER=$!
    track_pid "$HOLDER"
    wait_until 20 has_sessions || fail "the holding session did not start"
}

case_busy() {
    local holder
    hold_one_session
    holder=$HOLDER
    expect_exit 14 "$PCOPY" "$T/a" "$DAEMON_URL/busy" --key-file "$DAEMON_KEY"
    expect_stderr_contains "pcopy: 127.0.0.1:$DAEMON_PORT: daemon busy: 1 session running, try again later"
    [[ ! -e $T/root/busy ]] || fail "a refused push wrote root/busy"
    wait_daemon_logged '^pcopy: refused 127\.0\.0\.1:[0-9]+: 1 sessions already running$' \
        "that it refused the second session"
    # The FIFO gets its writer: the first session ends, and the next push
    # is served.
    echo hello >"$T/root/fifo"
    wait_exit 30 "$holder" || fail "the holding pull did not finish"
    [[ $WAIT_RC -eq 0 ]] || { cat "$T/holder.err" >&2; fail "the holding pull exited $WAIT_RC"; }
    wait_until 20 no_sessions || fail "the daemon's processes did not end: $(session_pids)"
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/after"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# hold_from ADDR N: N connections from source address ADDR (127.0.0.x)
# that say nothing, held by a python process until the case ends; it
# writes "closed" to $T/hold.ADDR.out when the daemon closes one of them.
hold_from() {
    python3 -c '
import select, socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1])), source_address=(sys.argv[2], 0))
        for _ in range(int(sys.argv[3]))]
print("open", flush=True)
end = time.time() + 120
while held and time.time() < end:
    for s in select.select(held, [], [], 0.1)[0]:
        try:
            gone = s.recv(1, socket.MSG_PEEK) == b""
        except ConnectionResetError:
            gone = True
        if gone:
            print("closed", flush=True)
            held.remove(s)
' "$DAEMON_PORT" "$1" "$2" >"$T/hold.$1.out" &
    track_pid $!
    wait_until 20 grep -q open "$T/hold.$1.out" || fail "could not open $2 connections from $1"
}

# some_closed ADDR / held_all ADDR: the daemon closed some / none of
# hold_from ADDR's connections.
some_closed() {
    grep -q closed "$T/hold.$1.out"
}
held_all() {
    ! some_closed "$1"
}

# closed_at_once ADDR [FIRST]: a new connection from ADDR (that sends the
# byte FIRST, in hex, if given) is closed by the daemon within 3 s, without
# a word.
closed_at_once() {
    python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), source_address=(sys.argv[2], 0))
if len(sys.argv) > 3:
    s.sendall(bytes.fromhex(sys.argv[3]))
s.settimeout(3)
try:
    sys.exit(0 if s.recv(1) == b"" else 1)
except ConnectionResetError:
    sys.exit(0)
except socket.timeout:
    sys.exit(1)
' "$DAEMON_PORT" "$@"
}

# --max-per-source: one address that holds its share gets no more, keeps
# what it holds, and others still get in; --max-startups: past it, the
# oldest go, the newer stay.
case_per_source() {
    mkdir -p "$T/root"
    mkfile "$T/a" 1M
    DAEMON_ARGS=(--max-per-source 5 --max-startups 12)
    start_daemon "$T/root"
    DAEMON_ARGS=()
    hold_from 127.0.0.4 5
    closed_at_once 127.0.0.4 || fail "a 6th connection from 127.0.0.4 was not closed at once"
    wait_daemon_logged '^pcopy: refused 127\.0\.0\.4:[0-9]+: 5 connections from 127\.0\.0\.4 wait already \(--max-per-source\)$' \
        "that it refused the 6th connection from 127.0.0.4"
    # Another address is not affected, and a copy goes through.
    closed_at_once 127.0.0.3 && fail "a connection from 127.0.0.3 was closed at once"
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/during" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/during"
    held_all 127.0.0.4 || fail "the daemon closed connections of 127.0.0.4 that it held"
    # 5 + 5 + 5 > 12: the three oldest (127.0.0.4's) go, the newer stay;
    # 127.0.0.4 had a refusal logged within 5 s, so they are only counted.
    hold_from 127.0.0.2 5
    hold_from 127.0.0.5 5
    wait_until 10 some_closed 127.0.0.4 || fail "the oldest connections (127.0.0.4's) were not dropped"
    held_all 127.0.0.2 || fail "the daemon closed newer connections (127.0.0.2's)"
    held_all 127.0.0.5 || fail "the daemon closed newer connections (127.0.0.5's)"
    wait_daemon_logged '^pcopy: 127\.0\.0\.4: [0-9]+ more connections? refused or dropped in the last 5 s' \
        "a summary of what it refused and dropped of 127.0.0.4"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# A flood of garbage from one address (control channels in clear, TLS
# that is no handshake, bad route preambles) leaves a handful of log
# lines, not one per connection: the first, and a count per 5 s. A flood
# from many addresses leaves 32 lines and one for the rest.
case_flood_log() {
    local n
    mkdir -p "$T/root"
    mkfile "$T/a" 100000
    start_daemon "$T/root"
    python3 -c '
import socket, sys
junk = [b"GET / HTTP/1.0\r\n\r\n", b"\x16\x03\x01\x00\x05hello", b"PCRT\x00\x04\x00\x000123456789abcdef"]
for i in range(200):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), source_address=("127.0.0.6", 0))
    s.sendall(junk[i % 3])
    s.close()
' "$DAEMON_PORT" || fail "the flood could not connect"
    wait_daemon_logged '^pcopy: 127\.0\.0\.6: [0-9]+ more connections refused or dropped in the last 5 s' \
        "a summary of the flood"
    wait_until 30 no_sessions || fail "the flood's session processes did not end: $(session_pids)"
    # Stragglers are summarised when their window ends.
    sleep 6
    n=$(grep -c '127\.0\.0\.6' "$DAEMON_LOG" || true)
    ((n <= 6)) || {
        sed 's/^/  daemon: /' "$DAEMON_LOG" | head -20 >&2
        fail "200 garbage connections left $n log lines, not a handful"
    }
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/after"
    # From 200 addresses, one each: 32 are logged one by one, the other
    # 168 in one line.
    python3 -c '
import socket, sys
for i in range(200):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), source_address=("127.0.%d.%d" % (10 + i // 100, 1 + i % 100), 0))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    s.close()
' "$DAEMON_PORT" || fail "the flood from 200 addresses could not connect"
    wait_daemon_logged '^pcopy: 168 more connections refused or dropped in the last 5 s, from addresses not logged' \
        "one line for the addresses past its budget"
    n=$(grep -c '127\.0\.1[01]\.' "$DAEMON_LOG" || true)
    ((n == 32)) || {
        grep '127\.0\.1[01]\.' "$DAEMON_LOG" | head -5 | sed 's/^/  daemon: /' >&2
        fail "a flood from 200 addresses left $n lines naming them, wanted 32"
    }
}


# The daemon's parent runs the TLS handshakes itself: clients that start
# one and stall in it cost no process, even while the daemon is busy (they
# used to hold one of the 8 processes that tell clients so), and a client
# that proves the key still hears that the daemon is busy, at once.
case_busy_stalled() {
    local holder stall
    hold_one_session
    holder=$HOLDER
    # 20 clients that start a TLS handshake and stall in it.
    python3 -c '
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1])), source_address=("127.0.0.7", 0))
        for _ in range(20)]
for s in held:
    s.sendall(b"\x16\x03\x01")
print("open", flush=True)
time.sleep(60)
' "$DAEMON_PORT" >"$T/stall.out" &
    stall=$!
    track_pid "$stall"
    wait_until 20 grep -q open "$T/stall.out" || fail "the stalling clients did not connect"
    sleep 1
    [[ $(session_pids | wc -l) -eq 1 ]] ||
        fail "stalled TLS handshakes got processes: $(session_pids | wc -l) children, wanted the 1 session"
    expect_exit 14 "$PCOPY" "$T/a" "$DAEMON_URL/busy" --key-file "$DAEMON_KEY"
    expect_stderr_contains "daemon busy: 1 session running, try again later"
    echo hello >"$T/root/fifo"
    wait_exit 30 "$holder" || fail "the holding pull did not finish"
    [[ $WAIT_RC -eq 0 ]] || { cat "$T/holder.err" >&2; fail "the holding pull exited $WAIT_RC"; }
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/after"
    stop_pid "$stall"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

case_daemon_signals() {
    mkdir -p "$T/root"
    mkfile "$T/a" 10000
    local port
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/a" --key-file "$DAEMON_KEY"
    port=$DAEMON_PORT
    stop_daemon
    [[ $WAIT_RC -eq 0 ]] || fail "the daemon exited $WAIT_RC after SIGTERM, not 0"
    ! port_in_use "$port" || fail "port $port still listens after the daemon exited"
    # SIGINT too.
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" "$DAEMON_URL/a" "$T/b" --key-file "$DAEMON_KEY"
    kill -INT "$DAEMON_PID"
    wait_exit 15 "$DAEMON_PID" || fail "the daemon ignored SIGINT"
    [[ $WAIT_RC -eq 0 ]] || fail "the daemon exited $WAIT_RC after SIGINT, not 0"
}

case_daemon_bad_setup() {
    # The daemon's own usage errors name what is wrong.
    mkdir -p "$T/root"
    "$PCOPY" --gen-key "$T/key"
    expect_exit 1,11 "$PCOPY" --serve 127.0.0.1:"$(free_port)" --root "$T/noroot" --key-file "$T/key"
    expect_stderr_contains noroot
    expect_exit 1 "$PCOPY" --serve 127.0.0.1:"$(free_port)" --key-file "$T/key"
    expect_stderr_contains "--root"
    expect_exit 1 "$PCOPY" --serve 127.0.0.1:"$(free_port)" --root "$T/root"
    expect_stderr_contains key
    expect_exit 1 "$PCOPY" --serve 127.0.0.1:99999 --root "$T/root" --key-file "$T/key"
    expect_stderr_contains 99999
    # A port that is already taken.
    start_daemon "$T/root"
    expect_exit 10 "$PCOPY" --serve "127.0.0.1:$DAEMON_PORT" --root "$T/root" --key-file "$T/key"
    expect_stderr_contains "--serve: port $DAEMON_PORT is in use on 127.0.0.1"
}

case_modes() {
    # The copy gets the source's permission bits less the receiver's umask
    # (the daemon's is 022 here), without set-user-ID, set-group-ID, sticky.
    local m want
    mkdir -p "$T/root" "$T/back"
    start_daemon "$T/root"
    for m in 600:600 640:640 755:755 777:755 4755:755 2750:750 1777:755; do
        want=${m#*:}
        m=${m%:*}
        mkfile "$T/m$m" 1000
        chmod "$m" "$T/m$m"
        expect_exit 0 "$PCOPY" -q "$T/m$m" "$DAEMON_URL/m$m" --key-file "$DAEMON_KEY"
        [[ $(mode_of "$T/root/m$m") == "$want" ]] ||
            fail "pushed mode $m became $(mode_of "$T/root/m$m"), wanted $want"
        chmod "$m" "$T/root/m$m"
        expect_exit 0 "$PCOPY" -q "$DAEMON_URL/m$m" "$T/back/m$m" --key-file "$DAEMON_KEY"
        [[ $(mode_of "$T/back/m$m") == "$want" ]] ||
            fail "pulled mode $m became $(mode_of "$T/back/m$m"), wanted $want"
    done
}

# What is not pcopy at all is closed by the daemon's own process at once,
# logged with the byte it began with, and costs no process: neither does
# a client in clear to a daemon that requires TLS, which gets an ERROR
# that says why and is closed 2 s later if it does not close itself.
case_refused_in_parent() {
    local out
    mkdir -p "$T/root"
    mkfile "$T/a" 100000
    start_daemon "$T/root"
    out=$(python3 - "$DAEMON_PORT" "$DAEMON_PID" <<'PY'
import os, socket, struct, subprocess, sys, time
port = int(sys.argv[1])
daemon = sys.argv[2]
def children():
    r = subprocess.run(["ps", "-o", "pid=", "--ppid", daemon], capture_output=True, text=True)
    return len(r.stdout.split())
# Not pcopy: closed at once, not after the 10 s for a handshake.
s = socket.create_connection(("127.0.0.1", port))
t0 = time.monotonic()
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
s.settimeout(12)
try:
    gone = s.recv(100) == b""
except ConnectionResetError:
    gone = True  # closed with our request unread: a reset
print("http-closed %.2f %d" % (time.monotonic() - t0, gone))
s.close()
# A HELLO in clear: an ERROR comes back, and while we hold the connection
# open, the daemon has no process for it. (From another address: the
# daemon logs one refusal per address every 5 s.)
s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.7", 0))
t0 = time.monotonic()
s.sendall(struct.pack(">BBHIIHHI", 1, 0, 0, 44, 0x50435059, 14, 14, 0) + os.urandom(32))
s.settimeout(12)
hdr = b""
while len(hdr) < 8:
    b = s.recv(8 - len(hdr))
    if not b:
        break
    hdr += b
typ, _, _, n = struct.unpack(">BBHI", hdr)
body = b""
while len(body) < n:
    b = s.recv(n - len(body))
    if not b:
        break
    body += b
code, mlen = struct.unpack(">iH", body[:6])
print("error-frame %d %d %s" % (typ, code, body[6:6 + mlen].decode()))
print("children-while-held %d" % children())
# We never close: the daemon does, within its 2 s.
gone = s.recv(100) == b""
print("clear-closed %.2f %d" % (time.monotonic() - t0, gone))
PY
    ) || fail "the stranger script failed"
    log "$out"
    awk '/^http-closed/ { exit !($2 < 2 && $3 == 1) }' <<<"$out" ||
        fail "the daemon did not close an HTTP request at once: $(grep http-closed <<<"$out")"
    grep -q '^error-frame 11 -1005 this daemon requires encryption' <<<"$out" ||
        fail "a client in clear did not get the ERROR that says why: $(grep error-frame <<<"$out")"
    grep -q '^children-while-held 0$' <<<"$out" ||
        fail "a refused client in clear got a process: $(grep children <<<"$out")"
    awk '/^clear-closed/ { exit !($2 < 5 && $3 == 1) }' <<<"$out" ||
        fail "the daemon did not close a refused client in clear in about 2 s: $(grep clear-closed <<<"$out")"
    wait_daemon_logged '^pcopy: dropped 127\.0\.0\.1:[0-9]+: not a pcopy connection \(it began with the byte 0x47\)$' \
        "that it dropped the HTTP request"
    wait_daemon_logged '^pcopy: refused 127\.0\.0\.7:[0-9]+: it asked for a session in clear' \
        "that it refused the client in clear"
    expect_exit 0 "$PCOPY" "$T/a" "$DAEMON_URL/after" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/root/after"
}

run_case push-pull-matrix case_push_pull_matrix
run_case destination-names case_destination_names
run_case modes case_modes
run_case pull-missing case_pull_missing
run_case pull-some-missing case_pull_some_missing
run_case many-streams case_many_streams
run_case key-file-env case_key_file_env
run_case two-sessions case_two_sessions
run_case strangers case_strangers
run_case silent-stranger-cut-off case_silent_stranger_cut_off
run_case route-strangers case_route_strangers
run_case idle-connections case_idle_connections
run_case per-source case_per_source
run_case flood-log case_flood_log
run_case refused-in-parent case_refused_in_parent
run_case busy case_busy
run_case busy-stalled case_busy_stalled
run_case daemon-signals case_daemon_signals
run_case daemon-bad-setup case_daemon_bad_setup
finish
