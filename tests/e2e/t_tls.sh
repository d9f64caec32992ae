#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tls: encryption end to end (issue 11). Each attack fails with a clear
# message and a documented exit code, writes nothing under a final name,
# leaves no temporary file, and the daemon goes on serving others:
#   - a client whose key file differs from the daemon's (push, pull): 5;
#   - --no-encrypt to a daemon that requires encryption: 5, and how
#     --allow-unencrypted changes that;
#   - a man in the middle (tests/e2e/tls_relay.py, a relay on the network
#     path) that flips one byte of a TLS record: on the daemon's control
#     channel and on a data stream (push and pull; protocol 5: the data
#     connections come to the daemon's own port, and the relay tells them
#     by their route preamble): 12, "altered on the way"; in a Finished of
#     the control channel's handshake: 5 or 12, "altered on the way" too,
#     and no advice to check --key-file; in the daemon's Finished on a data
#     connection: 5, naming the daemon's port, and no retry elsewhere;
#   - a stranger's ERROR text with newlines and escapes, to a daemon that
#     allows clear text: one line of the daemon's log, escaped;
#   - a data connection recorded in one session and replayed behind
#     another running session's route preamble (seen in clear), so that
#     the daemon passes it into that session: dropped by the session in
#     its TLS handshake (the PSK binder), and that session still completes;
#     replayed unchanged once its session ended (a dead route token):
#     dropped by the daemon after 10 s, which meanwhile serves others;
#   - a running session's route preamble (seen in clear) sent with junk
#     to the daemon's port once that session has all its data connections
#     (its push still reading a slow FIFO): the daemon forgot the token,
#     drops the connection after 10 s with a line of its log while the
#     session runs, and the push completes;
#   - a capture (tcpdump on lo) of a copy of a text file, to a daemon and
#     through ssh, holds neither its contents nor its name (and, to a
#     daemon in TLS, all of the copy passed its one port); a --no-encrypt
#     capture of the same copy, the control, holds both.
# And what a user is told: -v (the protocol version, the cipher), --cipher,
# the summary's "encrypted (...)" / "not encrypted (...)" for daemon, local,
# ssh and third-party copies.
# ctest: cost 60
source "$PCOPY_TEST_LIB"
needs_root "it captures loopback traffic with tcpdump and runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

RELAY=${PCOPY_TEST_LIB%/*}/tls_relay.py
command -v python3 >/dev/null || fail "python3 is missing (tools/install-deps installs it)"
command -v tcpdump >/dev/null || fail "tcpdump is missing (tools/install-deps installs it)"
[[ -f $RELAY ]] || fail "the relay $RELAY is missing"

sshd_start

# The summary's security part: TLS 1.3 with either suite.
ENCRYPTED='encrypted \(TLS 1\.3, TLS_(AES_128_GCM|CHACHA20_POLY1305)_SHA256\)'

# ------------------------------------------------------------------ helpers

# _relay_ready READY PID: the relay made its ready file, or exited.
_relay_ready() {
    [[ -e $1 ]] || proc_gone "$2"
}

# start_relay NAME ARGS...: start tls_relay.py with ARGS (its --route,
# --flip, --record, --hold) and wait until it listens. Sets RELAY_PID and
# RELAY_LOG ($T/relay.N.NAME.log, N counting the relays of the case); it
# is stopped at the end of the case.
RELAY_PID='' RELAY_LOG='' _RELAY_N=0
start_relay() {
    _RELAY_N=$((_RELAY_N + 1))
    local name=relay.$_RELAY_N.$1
    shift
    RELAY_LOG=$T/$name.log
    python3 "$RELAY" --log "$RELAY_LOG" --ready "$T/$name.ready" "$@" 2>"$T/$name.err" &
    RELAY_PID=$!
    track_pid "$RELAY_PID"
    wait_until 20 _relay_ready "$T/$name.ready" "$RELAY_PID" || fail "the relay $name did not start"
    [[ -e $T/$name.ready ]] || {
        sed 's/^/  relay: /' "$T/$name.err" >&2
        fail "the relay $name exited: $*"
    }
}

# relay_logged REGEX: a line of the relay's log matches REGEX (ERE).
relay_logged() {
    grep -qE -- "$1" "$RELAY_LOG" 2>/dev/null
}

# expect_flipped: the relay did flip a byte (else the test proves nothing).
expect_flipped() {
    relay_logged '^[a-z]+#[0-9]+ flipped ' || {
        sed 's/^/  relay: /' "$RELAY_LOG" >&2
        fail "the relay flipped no byte: the copy never carried the record it waited for"
    }
}

# daemon_log_since N: the daemon's log after its first N lines.
daemon_log_since() {
    tail -n +$(($1 + 1)) "$DAEMON_LOG"
}

# log_lines: the number of lines in the daemon's log.
log_lines() {
    wc -l <"$DAEMON_LOG"
}

# log_grew N M: the daemon's log has at least M lines after its first N.
log_grew() {
    [[ $(daemon_log_since "$1" | wc -l) -ge $2 ]]
}

# serves_others [PCOPY OPTIONS...]: the daemon is alive, and a good copy to
# it and back right now succeeds and is byte-identical.
_OTHER_N=0
serves_others() {
    _OTHER_N=$((_OTHER_N + 1))
    local n=other.$_OTHER_N
    kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon died"
    mkfile "$T/$n" 3M
    expect_exit 0 "$PCOPY" "$@" -s 2 "$T/$n" "$DAEMON_URL/$n" --key-file "$DAEMON_KEY"
    same_file "$T/$n" "$DAEMON_ROOT/$n"
    expect_exit 0 "$PCOPY" "$@" -s 3 "$DAEMON_URL/$n" "$T/$n.back" --key-file "$DAEMON_KEY"
    same_file "$T/$n" "$T/$n.back"
}

# nothing_written DIR NAME: no DIR/NAME, and (after the session is done)
# no temporary file in DIR.
nothing_written() {
    [[ ! -e $1/$2 ]] || fail "$1/$2 was written"
    wait_no_temp_files "$1"
}

# daemon_at ROOT: start a daemon serving ROOT (DAEMON_ARGS apply); sets
# DAEMON_ROOT too.
DAEMON_ROOT=
daemon_at() {
    DAEMON_ROOT=$1
    mkdir -p "$DAEMON_ROOT"
    start_daemon "$DAEMON_ROOT"
}

# --------------------------------------------------------------------- cases

case_wrong_key() {
    # A client whose key file differs: refused in the TLS handshake, both
    # ways; the message names the daemon and --key-file; the daemon logs
    # the first refusal, and counts the second (one address, within 5 s)
    # in a summary line when its 5 s are up, all printable; nothing is
    # written.
    local before new
    daemon_at "$T/root"
    mkdir -p "$T/local"
    mkfile "$T/src" 2M
    mkfile "$T/root/there" 1M
    "$PCOPY" --gen-key "$T/other.key" || fail "pcopy --gen-key failed"
    before=$(log_lines)
    expect_exit 5 "$PCOPY" "$T/src" "$DAEMON_URL/pushed" --key-file "$T/other.key"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    expect_stderr_contains "--key-file"
    expect_stderr_contains "different key"
    nothing_written "$T/root" pushed
    expect_exit 5 "$PCOPY" "$DAEMON_URL/there" "$T/local/pulled" --key-file "$T/other.key"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    expect_stderr_contains "--key-file"
    nothing_written "$T/local" pulled
    wait_until 15 log_grew "$before" 2 || true # the count is checked below
    new=$(daemon_log_since "$before")
    [[ $(grep -c . <<<"$new") -eq 2 ]] || {
        sed 's/^/  daemon: /' <<<"$new" >&2
        fail "the daemon logged $(grep -c . <<<"$new") lines for two refused clients, not 2"
    }
    [[ $(grep -cE '^pcopy: refused 127\.0\.0\.1:[0-9]+: .*different key' <<<"$new") -eq 1 ]] || {
        sed 's/^/  daemon: /' <<<"$new" >&2
        fail "the daemon's lines do not say it refused 127.0.0.1 for a different key"
    }
    [[ $(grep -cE '^pcopy: 127\.0\.0\.1: 1 more connection refused or dropped in the last 5 s' <<<"$new") -eq 1 ]] || {
        sed 's/^/  daemon: /' <<<"$new" >&2
        fail "the daemon did not summarise the second refusal"
    }
    if LC_ALL=C grep -q '[^[:print:]]' <<<"$new"; then
        sed -n l <<<"$new" >&2
        fail "the daemon's refusal lines hold unprintable bytes"
    fi
    serves_others
}

case_clear_refused() {
    # --no-encrypt to a daemon that requires encryption: exit 5 with the
    # daemon's reason, push and pull, and nothing written.
    daemon_at "$T/root"
    mkdir -p "$T/local"
    mkfile "$T/src" 1M
    mkfile "$T/root/there" 1M
    expect_exit 5 "$PCOPY" --no-encrypt "$T/src" "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT: this daemon requires encryption (TLS 1.3)"
    expect_stderr_contains "--allow-unencrypted"
    nothing_written "$T/root" pushed
    expect_exit 5 "$PCOPY" --no-encrypt "$DAEMON_URL/there" "$T/local/pulled" --key-file "$DAEMON_KEY"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT: this daemon requires encryption (TLS 1.3)"
    nothing_written "$T/local" pulled
    wait_daemon_logged '^pcopy: refused 127\.0\.0\.1:[0-9]+: it asked for a session in clear' \
        "that it refused a session in clear"
    serves_others
    stop_daemon

    # With --allow-unencrypted the same copies succeed in clear, and an
    # encrypting client still gets TLS.
    DAEMON_ARGS=(--allow-unencrypted)
    daemon_at "$T/root2"
    mkfile "$T/root2/there" 1M
    expect_exit 0 "$PCOPY" --no-encrypt "$T/src" "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    expect_summary 1048576 1 4 'not encrypted \(--no-encrypt\)'
    same_file "$T/src" "$T/root2/pushed"
    expect_exit 0 "$PCOPY" --no-encrypt "$DAEMON_URL/there" "$T/local/pulled" --key-file "$DAEMON_KEY"
    expect_summary 1048576 1 4 'not encrypted \(--no-encrypt\)'
    same_file "$T/root2/there" "$T/local/pulled"
    expect_exit 0 "$PCOPY" -v "$T/src" "$DAEMON_URL/tls" --key-file "$DAEMON_KEY"
    expect_summary 1048576 1 4 "$ENCRYPTED"
    expect_stderr_contains "control channel TLS 1.3 too"
    same_file "$T/src" "$T/root2/tls"
    serves_others
    serves_others --no-encrypt
}

case_log_one_line() {
    # A daemon that allows clear text hears a stranger before any proof: a
    # HELLO, then an ERROR whose text holds a newline, a forged log line and a terminal
    # escape must stay one line of the daemon's log, its control
    # characters escaped.
    local before new
    DAEMON_ARGS=(--allow-unencrypted)
    daemon_at "$T/root"
    before=$(log_lines)
    python3 - "$DAEMON_PORT" <<'EOF' || fail "the stranger could not send its ERROR"
import os, socket, struct, sys
msg = b"forged\npcopy: refused 10.6.6.6: FORGED\x1b[31m red\r"
payload = struct.pack(">iH", -1001, len(msg)) + msg
# A HELLO first (PROTOCOL.md 4.1): without one, the daemon drops the
# connection unread, as no pcopy control channel in clear.
hello = struct.pack(">BBHIIHHI", 1, 0, 0, 44, 0x50435059, 14, 14, 0) + os.urandom(32)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(hello + bytes([11, 0, 0, 0]) + struct.pack(">I", len(payload)) + payload)
try:
    while s.recv(4096):
        pass
except OSError:
    pass
EOF
    wait_daemon_logged 'session from 127\.0\.0\.1:[0-9]+ failed: .*forged' "the stranger's failed session"
    new=$(daemon_log_since "$before")
    [[ $(grep -c . <<<"$new") -eq 1 ]] || {
        sed -n l <<<"$new" >&2
        fail "one stranger's ERROR made $(grep -c . <<<"$new") lines of the daemon's log, not 1"
    }
    if LC_ALL=C grep -q '[^[:print:]]' <<<"$new"; then
        sed -n l <<<"$new" >&2
        fail "the daemon's log holds the stranger's control characters"
    fi
    grep -qF 'forged\x0apcopy: refused 10.6.6.6: FORGED\x1b[31m red\x0d' <<<"$new" || {
        sed -n l <<<"$new" >&2
        fail "the stranger's text is not in the log, escaped as \\xNN"
    }
    serves_others
}

case_mitm_control() {
    # A relay between the client and the daemon's control port flips one
    # byte in the client's second TLS record (its first after the
    # handshake's Finished). The daemon's record layer refuses it: the copy
    # fails with exit 12, saying the data was altered on the way.
    local rport
    daemon_at "$T/root"
    mkdir -p "$T/local"
    mkfile "$T/src" 2M
    mkfile "$T/root/there" 2M
    rport=$(free_port)
    start_relay ctl --route "ctl:127.0.0.1:$rport:127.0.0.1:$DAEMON_PORT" --flip ctl:c2s:2:0
    expect_fail "$PCOPY" "$T/src" "pcopy://127.0.0.1:$rport/pushed" --key-file "$DAEMON_KEY"
    expect_flipped
    nothing_written "$T/root" pushed
    expect_rc 12
    expect_stderr_contains "127.0.0.1:$rport"
    expect_stderr_contains "altered on the way"
    wait_daemon_logged 'session from 127\.0\.0\.1:[0-9]+ failed: .*altered on the way' \
        "why the session failed"
    stop_pid "$RELAY_PID"
    # The same for a pull (a relay flips once in its life: a new one).
    rport=$(free_port)
    start_relay ctl2 --route "ctl:127.0.0.1:$rport:127.0.0.1:$DAEMON_PORT" --flip ctl:c2s:2:0
    expect_fail "$PCOPY" "pcopy://127.0.0.1:$rport/there" "$T/local/pulled" --key-file "$DAEMON_KEY"
    expect_flipped
    nothing_written "$T/local" pulled
    expect_rc 12
    expect_stderr_contains "127.0.0.1:$rport"
    expect_stderr_contains "altered on the way"
    serves_others
}

case_mitm_handshake() {
    # The relay flips a byte of a Finished message of the control channel's
    # TLS handshake. The daemon's (s2c, its 2nd encrypted record): the
    # client's handshake fails, exit 5. The client's (c2s, its 1st): the
    # client has finished its part of the handshake, the daemon has not;
    # its alert reaches the client as a record that failed: exit 12. Either
    # way the message says the data was altered on the way, not that the
    # keys differ (the key files are fine: --key-file is no advice here).
    local rport flip
    daemon_at "$T/root"
    mkfile "$T/src" 1M
    for flip in s2c:2:5 c2s:1:12; do
        rport=$(free_port)
        start_relay "hs-${flip%%:*}" --route "ctl:127.0.0.1:$rport:127.0.0.1:$DAEMON_PORT" \
            --flip "ctl:${flip%:*}:0"
        expect_fail "$PCOPY" "$T/src" "pcopy://127.0.0.1:$rport/pushed" --key-file "$DAEMON_KEY"
        expect_flipped
        nothing_written "$T/root" pushed
        expect_rc "${flip##*:}"
        expect_stderr_contains "127.0.0.1:$rport"
        expect_stderr_contains "altered on the way"
        expect_stderr_lacks "different key"
        expect_stderr_lacks "--key-file"
        stop_pid "$RELAY_PID"
    done
    wait_daemon_logged '^pcopy: refused 127\.0\.0\.1:[0-9]+: TLS handshake with 127\.0\.0\.1: .*altered on the way' \
        "that the client's handshake was altered"
    serves_others
}

# mitm_data_relay DIR: start a relay that stands for the daemon on
# 127.0.0.2: its port RPORT leads to the daemon's on 127.0.0.1. The client
# connects its data streams to the address and port its control connection
# reached (protocol 5: a daemon in TLS takes them on its own port), so they
# pass the relay, which tells them from the control connection by their
# route preamble (--split) and flips one byte in the middle of the 5th
# full TLS record of a data stream going DIR (c2s: a push, s2c: a pull).
RPORT=''
mitm_data_relay() {
    RPORT=$(free_port)
    start_relay "data-$1" --route "ctl:127.0.0.2:$RPORT:127.0.0.1:$DAEMON_PORT" \
        --split ctl:data --flip "data:$1:5:1000"
}

case_mitm_data() {
    local s
    daemon_at "$T/root"
    mkdir -p "$T/local"
    mkfile "$T/src" 20M
    mkfile "$T/root/there" 20M
    for s in 1 4; do
        # A push: the relay flips a byte the client sent.
        mitm_data_relay c2s
        expect_fail "$PCOPY" -s "$s" "$T/src" "pcopy://127.0.0.2:$RPORT/pushed" \
            --key-file "$DAEMON_KEY"
        expect_flipped
        relay_logged '^data#[0-9]+ flipped ' || fail "the relay flipped a byte, but not on a data stream"
        nothing_written "$T/root" pushed
        expect_rc 12
        expect_stderr_contains "127.0.0.2:$RPORT"
        expect_stderr_contains "altered on the way"
        wait_daemon_logged 'failed: data connection [0-9]+ from 127\.0\.0\.1:[0-9]+: a TLS record failed its integrity check' \
            "the data connection's integrity failure"
        stop_pid "$RELAY_PID"
        serves_others
        # A pull: the relay flips a byte the daemon sent.
        mitm_data_relay s2c
        expect_fail "$PCOPY" -s "$s" "pcopy://127.0.0.2:$RPORT/there" "$T/local/pulled" \
            --key-file "$DAEMON_KEY"
        expect_flipped
        relay_logged '^data#[0-9]+ flipped ' || fail "the relay flipped a byte, but not on a data stream"
        nothing_written "$T/local" pulled
        expect_rc 12
        expect_stderr_matches "data connection [0-9]+ from 127\.0\.0\.2:$RPORT: a TLS record failed its integrity check: the data was altered on the way"
        stop_pid "$RELAY_PID"
        serves_others
    done
}

case_mitm_data_handshake() {
    # The relay flips a byte of the daemon's Finished on a data connection
    # (s2c, its 2nd encrypted record): that connection's handshake fails
    # at the client, which must say the handshake was altered (exit 5), not
    # go around the relay to the address the daemon's READY names (the
    # fallback for a data host only ssh knows; a connection to a daemon's
    # own port never takes it), nor end in a confusing "lost data
    # connection" when the daemon already holds the streams that did get
    # through. The port the message names is the daemon's (the relay's).
    local s
    daemon_at "$T/root"
    mkfile "$T/src" 3M
    for s in 1 2; do
        RPORT=$(free_port)
        start_relay "data-hs-$s" --route "ctl:127.0.0.2:$RPORT:127.0.0.1:$DAEMON_PORT" \
            --split ctl:data --flip "data:s2c:2:0"
        expect_fail "$PCOPY" -s "$s" "$T/src" "pcopy://127.0.0.2:$RPORT/pushed" \
            --key-file "$DAEMON_KEY"
        expect_flipped
        relay_logged '^data#[0-9]+ flipped ' || fail "the relay flipped a byte, but not on a data connection"
        nothing_written "$T/root" pushed
        expect_rc 5
        expect_stderr_matches "data connection [0-9]+ to 127\.0\.0\.2 port $RPORT: TLS handshake with 127\.0\.0\.2: .*altered on the way"
        stop_pid "$RELAY_PID"
        serves_others
    done
}

# no_sessions: the daemon has no session process.
no_sessions() {
    [[ -z $(session_pids) ]]
}

# has_session: the daemon has a session process.
has_session() {
    [[ -n $(session_pids) ]]
}

# file_has FILE N: FILE holds at least N bytes.
file_has() {
    [[ -f $1 && $(stat -c %s "$1") -ge $2 ]]
}

# route_preamble_of FILE WHAT: FILE (what a client sent on a data
# connection) starts with a route preamble (since protocol 5; "PCRT", version
# 7, zero, a token), followed by a TLS handshake record that offers a data
# stream's PSK identity (PCDT); else fail, saying it is WHAT.
route_preamble_of() {
    [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 50435254$(printf %04x "$PROTO_VERSION")0000 ]] ||
        fail "$2 does not start with a route preamble (PCRT, version $PROTO_VERSION, 0)"
    [[ $(tail -c +25 "$1" | head -c 1 | od -An -tu1 | tr -d ' ') == 22 ]] ||
        fail "$2 does not go on with a TLS handshake record after its 24-byte preamble"
    grep -qa PCDT "$1" || fail "$2 offers no data PSK identity (PCDT)"
}

# replay_to PORT FILE...: connect to 127.0.0.1:PORT, send the FILEs one
# after the other and read until the daemon closes the connection (or 20 s
# pass). Prints "LOCALPORT closed SECS" or "LOCALPORT open SECS".
replay_to() {
    python3 - "$@" <<'EOF_PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
port, start = s.getsockname()[1], time.monotonic()
how = "closed"
try:
    for name in sys.argv[2:]:
        with open(name, "rb") as f:
            s.sendall(f.read())
except OSError:
    pass  # the daemon may close before it read everything
try:
    while s.recv(65536):
        pass
except socket.timeout:
    how = "open"
except OSError:
    pass  # a reset: closed with bytes unread
print(f"{port} {how} {time.monotonic() - start:.1f}")
EOF_PY
}

# record_session_one STREAMS: session 1, a push of $T/one (3 MiB) with
# STREAMS streams through a relay that records its data connections (the
# first in $T/rec.1, which sets the caller's rec); returns once session
# 1's process has ended.
record_session_one() {
    local r1
    r1=$(free_port)
    start_relay rec --route "ctl:127.0.0.2:$r1:127.0.0.1:$DAEMON_PORT" --split ctl:data \
        --record "data:$T/rec"
    expect_exit 0 "$PCOPY" -s "$1" "$T/one" "pcopy://127.0.0.2:$r1/one" --key-file "$DAEMON_KEY"
    expect_summary 3145728 1 "$1" "$ENCRYPTED"
    same_file "$T/one" "$T/root/one"
    wait_until 10 relay_logged '^data#1 closed ' || fail "the relay did not see data connection 1 close"
    stop_pid "$RELAY_PID"
    rec=$T/rec.1
    [[ -s $rec ]] || fail "the relay recorded nothing of session 1's data connection"
    route_preamble_of "$rec" "session 1's data connection"
    wait_until 10 no_sessions || fail "session 1's process did not end: $(session_pids)"
}

case_replay() {
    # An on-path attacker records session 1 (its data connection: the
    # route preamble, the ClientHello with its PSK binder, the records
    # after it). While session 2 runs, it sees session 2's route preamble
    # go by in clear (a relay holds session 2's data connections after
    # their preambles), and sends it followed by session 1's TLS bytes to
    # the daemon's port: the daemon's parent passes that connection INTO
    # session 2, whose acceptor must refuse the PSK binder (another
    # session key), drop it with a line of its log, and session 2 must
    # complete. A stream replayed under another index of the same session
    # fails the same way, and the unit tests cover it: test_auth
    # (test_psks: every stream index has its own PSK), test_tls
    # (test_wrong_key: another PSK fails the binder; test_replayed_flight)
    # and test_acceptor (test_tls_connections: a wrong key is dropped, each
    # good connection lands at the index it proved).
    local r2 cpid rec held out lport how secs
    daemon_at "$T/root"
    mkfile "$T/one" 3M
    mkfile "$T/two" 24M
    record_session_one 2

    r2=$(free_port)
    held=$T/held
    start_relay hold --route "ctl:127.0.0.2:$r2:127.0.0.1:$DAEMON_PORT" --split ctl:data \
        --hold "data:$T/gate" --record "data:$held"
    "$PCOPY" -s 2 "$T/two" "pcopy://127.0.0.2:$r2/two" --key-file "$DAEMON_KEY" \
        2>"$T/two.err" &
    cpid=$!
    track_pid "$cpid"
    wait_until 20 relay_logged '^data#1 accepted' || { touch "$T/gate"; fail "session 2's client did not connect its data streams"; }
    wait_until 10 has_session || { touch "$T/gate"; fail "the daemon has no process for session 2"; }
    wait_until 10 file_has "$held.1" 24 || { touch "$T/gate"; fail "the relay did not record session 2's route preamble"; }
    relay_logged '^data#[0-9]+ connected' && { touch "$T/gate"; fail "the relay let a data connection of session 2 through before the gate opened"; }
    head -c 24 "$held.1" >"$T/preamble.2"
    tail -c +25 "$rec" >"$T/tls.1"
    [[ $(head -c 8 "$T/preamble.2" | od -An -tx1 | tr -d ' \n') == 50435254$(printf %04x "$PROTO_VERSION")0000 ]] ||
        { touch "$T/gate"; fail "session 2's data connection does not start with a route preamble"; }
    cmp -s "$T/preamble.2" <(head -c 24 "$rec") && { touch "$T/gate"; fail "sessions 1 and 2 have the same route token"; }
    # The replay: session 2's preamble, then session 1's TLS bytes, to the
    # daemon's port. The daemon must close the connection (not wait for
    # more) and say its session dropped it in the TLS handshake.
    out=$(replay_to "$DAEMON_PORT" "$T/preamble.2" "$T/tls.1") || { touch "$T/gate"; fail "the replaying script failed"; }
    read -r lport how secs <<<"$out"
    [[ $how == closed ]] || { touch "$T/gate"; fail "the daemon kept the replayed connection: open after $secs s"; }
    wait_daemon_logged "^pcopy: dropped data connection from 127\\.0\\.0\\.1:$lport: TLS handshake with 127\\.0\\.0\\.1: " \
        "that session 2 dropped the replayed data connection"
    touch "$T/gate"
    wait_exit 120 "$cpid" || fail "session 2 did not finish"
    [[ $WAIT_RC -eq 0 ]] || { sed 's/^/  stderr: /' "$T/two.err" >&2; fail "session 2 exited with $WAIT_RC"; }
    # shellcheck disable=SC2034  # read by expect_summary (lib.sh)
    LAST_STDERR=$T/two.err
    expect_summary 25165824 1 2 "$ENCRYPTED"
    same_file "$T/two" "$T/root/two"
    serves_others
}

case_replay_unknown_token() {
    # Session 1's data connection, recorded, and replayed unchanged (its
    # own token) once session 1 ended: no session of the daemon has that
    # token, so the daemon's parent parks it and drops it after 10 s, with
    # a line of its log; meanwhile it goes on serving others.
    local rec out lport how secs rpid
    daemon_at "$T/root"
    mkfile "$T/one" 3M
    record_session_one 1
    replay_to "$DAEMON_PORT" "$rec" >"$T/replay.out" &
    rpid=$!
    track_pid "$rpid"
    # While the replay waits: a good copy both ways.
    serves_others
    wait_exit 30 "$rpid" || fail "the replaying script did not end"
    [[ $WAIT_RC -eq 0 ]] || fail "the replaying script failed ($WAIT_RC)"
    out=$(<"$T/replay.out")
    read -r lport how secs <<<"$out"
    [[ $how == closed ]] || fail "the daemon kept the replayed connection: open after $secs s"
    [[ ${secs%.*} -ge 9 ]] || fail "the daemon closed the replayed connection after $secs s, not after 10 s parked"
    wait_daemon_logged "^pcopy: dropped 127\\.0\\.0\\.1:$lport: no session of this daemon had its token within 10 s\$" \
        "that it dropped the replayed connection with a dead token"
    serves_others
}

# late_writer GATE OUT: what a slow source sends on stdout, also appended
# to OUT: 1 MiB at once, then 16 KiB every 0.1 s until the file GATE exists
# (60 s at most), then 1 MiB more.
late_writer() {
    local i
    head -c 1M /dev/urandom | tee -a "$2"
    for ((i = 0; i < 600; i++)); do
        [[ -e $1 ]] && break
        head -c 16k /dev/urandom | tee -a "$2"
        sleep 0.1
    done
    head -c 1M /dev/urandom | tee -a "$2"
}

case_late_token() {
    # A connection naming a RUNNING session's token, once that session has
    # all its data connections: the session closed its end of the daemon's
    # Unix socket when they were in, so the daemon forgot the token, parks
    # the connection as a stranger's and drops it after 10 s, with a line
    # of its log, while the session goes on. (Before, the daemon passed it
    # into the session, which never read it again: held open, unread and
    # unlogged, until the session ended.) The push reads a FIFO that a
    # writer feeds slowly until the case opens its gate, and goes through a
    # relay that records its data connections, whose route preamble (the
    # session's token, seen in clear) the case then sends with junk
    # straight to the daemon's port.
    local r wpid cpid out lport how secs size
    daemon_at "$T/root"
    head -c 300 /dev/urandom >"$T/junk"
    mkfifo "$T/fifo"
    r=$(free_port)
    start_relay rec --route "ctl:127.0.0.2:$r:127.0.0.1:$DAEMON_PORT" --split ctl:data \
        --record "data:$T/rec"
    late_writer "$T/gate" "$T/late.src" >"$T/fifo" &
    wpid=$!
    track_pid "$wpid"
    "$PCOPY" -s 2 -B 64k - "pcopy://127.0.0.2:$r/late" --key-file "$DAEMON_KEY" \
        <"$T/fifo" 2>"$T/late.err" &
    cpid=$!
    track_pid "$cpid"
    # The transfer has begun: both data connections passed the relay, and
    # the session writes data (its acceptor returned, with both in).
    wait_until 20 relay_logged '^data#2 connected' || { touch "$T/gate"; fail "the client did not connect its 2 data streams"; }
    wait_until 20 receiving "$T/root" || { touch "$T/gate"; fail "the session does not write the file"; }
    route_preamble_of "$T/rec.1" "the session's data connection 1"
    cmp -s <(head -c 24 "$T/rec.1") <(head -c 24 "$T/rec.2") ||
        { touch "$T/gate"; fail "the session's 2 data connections name different route tokens"; }
    head -c 24 "$T/rec.1" >"$T/preamble"
    # Its token again, with junk after it, straight to the daemon's port.
    out=$(replay_to "$DAEMON_PORT" "$T/preamble" "$T/junk") || { touch "$T/gate"; fail "the connecting script failed"; }
    read -r lport how secs <<<"$out"
    log "the connection from port $lport naming the running session's token: $how after $secs s"
    [[ $how == closed ]] || { touch "$T/gate"; fail "the daemon kept the connection naming a running session's token: open after $secs s"; }
    [[ ${secs%.*} -ge 8 && ${secs%.*} -lt 14 ]] ||
        { touch "$T/gate"; fail "the daemon closed the connection naming a running session's token after $secs s, not after its 10 s"; }
    proc_gone "$cpid" && { touch "$T/gate"; fail "the push ended before the check: it proves nothing"; }
    has_session || { touch "$T/gate"; fail "the session's process ended before the check: it proves nothing"; }
    wait_daemon_logged "^pcopy: dropped 127\\.0\\.0\\.1:$lport: no session of this daemon had its token within 10 s\$" \
        "that it dropped the connection naming a token no session listens for any more"
    relay_logged '^data#3 ' && { touch "$T/gate"; fail "the client opened a third data connection"; }
    # The push goes on to the end.
    touch "$T/gate"
    wait_exit 60 "$wpid" || fail "the writer did not end"
    wait_exit 60 "$cpid" || fail "the push did not end"
    [[ $WAIT_RC -eq 0 ]] || { sed 's/^/  stderr: /' "$T/late.err" >&2; fail "the push exited with $WAIT_RC"; }
    size=$(stat -c %s "$T/late.src")
    # shellcheck disable=SC2034  # read by expect_summary (lib.sh)
    LAST_STDERR=$T/late.err
    expect_summary "$size" 1 2 "$ENCRYPTED"
    same_file "$T/late.src" "$T/root/late"
    wait_until 10 no_sessions || fail "the session's process did not end: $(session_pids)"
}

# -------------------------------------------------------------- captures

# count_in FILE TEXT: how many lines of FILE (binary) hold TEXT.
count_in() {
    grep -a -c -F -- "$2" "$1" || true
}

# secret_file DIR: a text file whose name and contents are strings found
# nowhere else; sets SECRET_NAME, SECRET_TEXT, SECRET.
secret_file() {
    local tag i
    tag=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
    SECRET_NAME=name-only-in-t_tls-$tag.txt
    SECRET_TEXT=contents-only-in-t_tls-$tag
    SECRET=$1/$SECRET_NAME
    for ((i = 0; i < 2000; i++)); do
        printf 'line %d of the %s, a text that must not be seen on the wire\n' "$i" "$SECRET_TEXT"
    done >"$SECRET"
}

# seen_in PCAP: fail unless the capture holds both the name and the text.
seen_in() {
    [[ $(count_in "$1" "$SECRET_TEXT") -gt 0 ]] || fail "the clear capture $1 lacks the contents: the check cannot see"
    [[ $(count_in "$1" "$SECRET_NAME") -gt 0 ]] || fail "the clear capture $1 lacks the file name: the check cannot see"
}

# unseen_in PCAP: fail if the capture holds the name or the text.
unseen_in() {
    local c
    c=$(count_in "$1" "$SECRET_TEXT")
    [[ $c -eq 0 ]] || fail "the capture $1 holds the file's contents ($c lines)"
    c=$(count_in "$1" "$SECRET_NAME")
    [[ $c -eq 0 ]] || fail "the capture $1 holds the file's name ($c lines)"
}

case_capture_daemon() {
    # In TLS (protocol 5) the data connections go to the daemon's own port
    # too: no -Z, and the capture of that port holds every byte of the
    # copies (the capture grows at least as large as the file copied twice,
    # so the data did pass the port captured, and what is checked is all
    # there). In clear the session still opens a data listener of its own:
    # -Z puts it on port d, captured too.
    local d size
    mkdir -p "$T/src"
    secret_file "$T/src"
    size=$(stat -c %s "$SECRET")
    DAEMON_ARGS=(--allow-unencrypted)
    daemon_at "$T/root"
    d=$(free_port)
    # Encrypted (the default): neither the name nor the contents.
    start_capture "$T/tls.pcap" "tcp port $DAEMON_PORT or tcp port $d"
    expect_exit 0 "$PCOPY" -s 2 "$SECRET" "$DAEMON_URL/" --key-file "$DAEMON_KEY"
    expect_summary "$size" 1 2 "$ENCRYPTED"
    expect_exit 0 "$PCOPY" -s 2 "$DAEMON_URL/$SECRET_NAME" "$T/pulled" --key-file "$DAEMON_KEY"
    wait_until 10 file_has "$T/tls.pcap" $((2 * size)) ||
        fail "the capture $T/tls.pcap holds $(stat -c %s "$T/tls.pcap") bytes, less than the file copied twice ($((2 * size))): the data went elsewhere"
    stop_capture "$T/tls.pcap"
    same_file "$SECRET" "$T/root/$SECRET_NAME"
    same_file "$SECRET" "$T/pulled"
    unseen_in "$T/tls.pcap"
    # The control: the same push in clear shows both.
    rm -f "$T/root/$SECRET_NAME"
    start_capture "$T/clear.pcap" "tcp port $DAEMON_PORT or tcp port $d"
    expect_exit 0 "$PCOPY" --no-encrypt -s 2 -Z "$d-$d" "$SECRET" "$DAEMON_URL/" --key-file "$DAEMON_KEY"
    expect_summary "$size" 1 2 'not encrypted \(--no-encrypt\)'
    stop_capture "$T/clear.pcap"
    same_file "$SECRET" "$T/root/$SECRET_NAME"
    seen_in "$T/clear.pcap"
}

case_capture_ssh() {
    # Through ssh: the control channel is inside ssh, the data in TLS.
    local d
    mkdir -p "$T/src" "$T/remote"
    secret_file "$T/src"
    d=$(free_port)
    start_capture "$T/tls.pcap" "tcp port $SSHD_PORT or tcp port $d"
    expect_exit 0 "$PCOPY" -s 2 -Z "$d-$d" "$SECRET" "pctest:$T/remote/"
    expect_summary "$(stat -c %s "$SECRET")" 1 2 "$ENCRYPTED"
    stop_capture "$T/tls.pcap"
    same_file "$SECRET" "$T/remote/$SECRET_NAME"
    unseen_in "$T/tls.pcap"
    # The control: with --no-encrypt the contents are seen (the name
    # travels inside ssh either way).
    rm -f "$T/remote/$SECRET_NAME"
    start_capture "$T/clear.pcap" "tcp port $SSHD_PORT or tcp port $d"
    expect_exit 0 "$PCOPY" --no-encrypt -s 2 -Z "$d-$d" "$SECRET" "pctest:$T/remote/"
    expect_summary "$(stat -c %s "$SECRET")" 1 2 'not encrypted \(--no-encrypt\)'
    stop_capture "$T/clear.pcap"
    same_file "$SECRET" "$T/remote/$SECRET_NAME"
    [[ $(count_in "$T/clear.pcap" "$SECRET_TEXT") -gt 0 ]] ||
        fail "the clear capture lacks the contents: the check cannot see"
    [[ $(count_in "$T/clear.pcap" "$SECRET_NAME") -eq 0 ]] ||
        fail "the file name left ssh's encryption"
}

# ------------------------------------------------------ what a user is told

case_verbose_cipher() {
    daemon_at "$T/root"
    mkfile "$T/src" 2M
    expect_exit 0 "$PCOPY" -v "$T/src" "$DAEMON_URL/auto" --key-file "$DAEMON_KEY"
    expect_stderr_matches "^pcopy: protocol version $PROTO_VERSION; data $ENCRYPTED, kernel TLS (on|off \(.*\)); control channel TLS 1\.3 too\$"
    expect_summary 2097152 1 4 "$ENCRYPTED"
    same_file "$T/src" "$T/root/auto"
    local c suite
    for c in chacha20-poly1305:TLS_CHACHA20_POLY1305_SHA256 aes128-gcm:TLS_AES_128_GCM_SHA256; do
        suite=${c#*:}
        c=${c%%:*}
        expect_exit 0 "$PCOPY" -v --cipher "$c" "$T/src" "$DAEMON_URL/$c" --key-file "$DAEMON_KEY"
        expect_stderr_matches "^pcopy: protocol version $PROTO_VERSION; data encrypted \(TLS 1\.3, $suite\)"
        expect_summary 2097152 1 4 "encrypted \(TLS 1\.3, $suite\)"
        same_file "$T/src" "$T/root/$c"
        expect_exit 0 "$PCOPY" --cipher "$c" "$DAEMON_URL/$c" "$T/back.$c" --key-file "$DAEMON_KEY"
        expect_summary 2097152 1 4 "encrypted \(TLS 1\.3, $suite\)"
        same_file "$T/src" "$T/back.$c"
    done
    expect_exit 1 "$PCOPY" --cipher bogus "$T/src" "$DAEMON_URL/bogus" --key-file "$DAEMON_KEY"
    expect_stderr_contains "--cipher"
    expect_stderr_contains "bogus"
    nothing_written "$T/root" bogus
    expect_exit 1 "$PCOPY" --cipher aes128-gcm --no-encrypt "$T/src" "$DAEMON_URL/both" --key-file "$DAEMON_KEY"
    expect_stderr_contains "--cipher"
    expect_stderr_contains "--no-encrypt"
    nothing_written "$T/root" both
}

case_local() {
    # Nothing leaves the machine: in clear unless --encrypt.
    mkfile "$T/src" 5M
    expect_exit 0 "$PCOPY" -v "$T/src" "$T/clear"
    expect_summary 5242880 1 4 'not encrypted \(a local copy\)'
    expect_stderr_contains "protocol version $PROTO_VERSION; data not encrypted (a local copy)"
    same_file "$T/src" "$T/clear"
    expect_exit 0 "$PCOPY" -v --encrypt "$T/src" "$T/tls"
    expect_summary 5242880 1 4 "$ENCRYPTED"
    expect_stderr_matches "^pcopy: protocol version $PROTO_VERSION; data $ENCRYPTED"
    same_file "$T/src" "$T/tls"
    expect_exit 0 "$PCOPY" --encrypt --cipher chacha20-poly1305 "$T/src" "$T/chacha"
    expect_summary 5242880 1 4 'encrypted \(TLS 1\.3, TLS_CHACHA20_POLY1305_SHA256\)'
    same_file "$T/src" "$T/chacha"
}

case_ssh_summaries() {
    # Through ssh, both ways and third party, the data is encrypted.
    mkdir -p "$T/src" "$T/remote" "$T/back" "$T/dst"
    mkfile "$T/src/f" 6M
    expect_exit 0 "$PCOPY" -v -s 2 "$T/src/f" "pctest:$T/remote/"
    expect_summary 6291456 1 2 "$ENCRYPTED"
    expect_stderr_contains "control channel inside ssh"
    same_file "$T/src/f" "$T/remote/f"
    expect_exit 0 "$PCOPY" -s 2 "pctest:$T/remote/f" "$T/back/"
    expect_summary 6291456 1 2 "$ENCRYPTED"
    same_file "$T/src/f" "$T/back/f"
    expect_exit 0 "$PCOPY" -s 2 "h1:$T/src/f" "h2:$T/dst/"
    expect_summary 6291456 1 2 'encrypted \(TLS 1\.3 or ssh between the hosts\)'
    same_file "$T/src/f" "$T/dst/f"
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

run_case wrong-key case_wrong_key
run_case clear-refused case_clear_refused
run_case log-one-line case_log_one_line
run_case mitm-control case_mitm_control
run_case mitm-handshake case_mitm_handshake
run_case mitm-data case_mitm_data
run_case mitm-data-handshake case_mitm_data_handshake
run_case replay case_replay
run_case replay-unknown-token case_replay_unknown_token
run_case late-token case_late_token
run_case capture-daemon case_capture_daemon
run_case capture-ssh case_capture_ssh
run_case verbose-cipher case_verbose_cipher
run_case local case_local
run_case ssh-summaries case_ssh_summaries
finish
