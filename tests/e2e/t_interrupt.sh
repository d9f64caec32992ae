#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_interrupt: a client stopped by SIGINT/SIGTERM exits 20 promptly and
# leaves no partial file; a daemon (or its session) killed mid-transfer makes
# the client fail promptly, naming the daemon; an idle transfer times out.
# The steps before the transfer can be interrupted too: waiting for a FIFO's
# writer, connecting to a host that does not answer, waiting for a data
# listener's proof; and a FIFO whose writer comes later is copied whole.
#
# The transfers are kept open by a slow standard input: a producer writes a
# few MiB into a FIFO, then holds it open without writing.
# ctest: cost 30
source "$PCOPY_TEST_LIB"

# How long a client may take to react, in seconds (times $SLOW).
REACT=5

# producer_idle: the producer has written all its bytes (it is now the
# `sleep` that holds the FIFO open).
producer_idle() {
    [[ $(cat "/proc/$PRODUCER_PID/comm" 2>/dev/null) == sleep ]]
}

CLIENT_PID= CLIENT_ERR=
# IDLE=1: start_client also waits until the client has read the input and
# waits for more (the moment a user would press ^C); IDLE=0: it returns as
# soon as the copy has begun, while data still flows.
IDLE=1
# start_client DIR NAME ARGS...: start `pcopy ARGS...` in the background,
# reading a slow standard input (5 MiB, then nothing for a minute), and wait
# until a file for NAME is being written in DIR.
start_client() {
    local dir=$1 name=$2
    shift 2
    slow_producer "$T/fifo" 5M 60
    CLIENT_ERR=$T/client.err
    "${WITH_SIGINT[@]}" "$PCOPY" "$@" <"$T/fifo" 2>"$CLIENT_ERR" &
    CLIENT_PID=$!
    track_pid "$CLIENT_PID"
    wait_until 30 receiving "$dir" || {
        cat "$CLIENT_ERR" >&2
        fail "pcopy did not start writing $name in $dir"
    }
    if [[ $IDLE == 1 ]]; then
        wait_until 30 producer_idle || fail "the client did not read its input"
        # What is left in the pipe buffer (64 KiB at most) is read at once.
        sleep 0.5
    fi
}

# client_exit: wait for the client; sets CLIENT_RC. Fails if it did not exit
# within REACT seconds (then ends its input, to record its status anyway).
CLIENT_RC=
client_exit() {
    local start late=
    start=$(now)
    if ! wait_exit "$REACT" "$CLIENT_PID"; then
        late=1
        kill "$PRODUCER_PID" 2>/dev/null || true
        wait_exit 30 "$CLIENT_PID" || stop_pid "$CLIENT_PID"
    fi
    CLIENT_RC=$WAIT_RC
    log "client exited with status ${CLIENT_RC:-?} after $(secs_since "$start") s: $(head -n 1 "$CLIENT_ERR")"
    LAST_STDERR=$CLIENT_ERR
    [[ -z $late ]] || fail "the client did not exit within $((REACT * SLOW)) s (it exited only once its input ended)"
}

# signal_local SIG: a local copy from slow stdin over an existing file,
# stopped by SIG: exit 20, old file kept, no temporary file.
signal_local() {
    mkdir -p "$T/d"
    mkfile "$T/d/dst" 100000
    cp "$T/d/dst" "$T/dst.orig"
    start_client "$T/d" dst -s 4 - "$T/d/dst"
    kill -"$1" "$CLIENT_PID"
    client_exit
    same_file "$T/dst.orig" "$T/d/dst"
    no_temp_files "$T/d"
    [[ $CLIENT_RC -eq 20 ]] || { cat "$CLIENT_ERR" >&2; fail "exit status $CLIENT_RC after SIG$1, wanted 20"; }
    expect_stderr_contains "interrupted"
}

case_sigint_local() {
    signal_local INT
}

case_sigterm_local() {
    signal_local TERM
}

case_sigint_local_busy() {
    IDLE=0
    signal_local INT
}

case_sigint_push() {
    mkdir -p "$T/root"
    start_daemon "$T/root"
    start_client "$T/root" pushed -s 4 - "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    kill -INT "$CLIENT_PID"
    client_exit
    [[ ! -e $T/root/pushed ]] || fail "the interrupted push left $T/root/pushed"
    # The daemon's session notices and removes its temporary file.
    wait_no_temp_files "$T/root"
    [[ $CLIENT_RC -eq 20 ]] || { cat "$CLIENT_ERR" >&2; fail "exit status $CLIENT_RC after SIGINT, wanted 20"; }
    # The daemon still serves.
    mkfile "$T/small" 1000
    expect_exit 0 "$PCOPY" "$T/small" "$DAEMON_URL/small" --key-file "$DAEMON_KEY"
    same_file "$T/small" "$T/root/small"
}

case_sigint_pull() {
    # A pull of a FIFO in the daemon's root, fed slowly.
    mkdir -p "$T/root" "$T/local"
    start_daemon "$T/root"
    mkfile "$T/local/dst" 1000
    cp "$T/local/dst" "$T/dst.orig"
    slow_producer "$T/root/fifo" 5M 60
    "${WITH_SIGINT[@]}" "$PCOPY" -s 4 "$DAEMON_URL/fifo" "$T/local/dst" --key-file "$DAEMON_KEY" 2>"$T/client.err" &
    CLIENT_PID=$!
    CLIENT_ERR=$T/client.err
    track_pid "$CLIENT_PID"
    wait_until 30 receiving "$T/local" || {
        cat "$CLIENT_ERR" >&2
        fail "pcopy did not start writing in $T/local"
    }
    kill -INT "$CLIENT_PID"
    client_exit
    same_file "$T/dst.orig" "$T/local/dst"
    no_temp_files "$T/local"
    [[ $CLIENT_RC -eq 20 ]] || { cat "$CLIENT_ERR" >&2; fail "exit status $CLIENT_RC after SIGINT, wanted 20"; }
}

case_daemon_sigterm() {
    # The daemon is stopped mid-push: the client fails, naming it; nothing
    # appears under the final name; the sessions remove their temporary files.
    mkdir -p "$T/root"
    start_daemon "$T/root"
    start_client "$T/root" pushed -s 4 - "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    stop_daemon
    log "daemon exited with status $WAIT_RC"
    client_exit
    [[ $CLIENT_RC -ne 0 ]] || fail "the client exited 0 although the daemon was stopped"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    [[ ! -e $T/root/pushed ]] || fail "$T/root/pushed appeared"
    wait_no_temp_files "$T/root"
}

case_session_sigkill() {
    # The session process dies mid-push: the client fails, naming the daemon;
    # the daemon itself lives on.
    local sessions
    mkdir -p "$T/root"
    start_daemon "$T/root"
    start_client "$T/root" pushed -s 4 - "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY"
    sessions=$(session_pids)
    [[ -n $sessions ]] || fail "no session process under daemon $DAEMON_PID"
    pkill -KILL -P "$DAEMON_PID"
    client_exit
    [[ $CLIENT_RC -ne 0 ]] || fail "the client exited 0 although its session was killed"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    [[ ! -e $T/root/pushed ]] || fail "$T/root/pushed appeared"
    kill -0 "$DAEMON_PID" || fail "the daemon died with its session"
    # A killed session cannot remove its temporary file; note whether the
    # daemon does (it is not promised).
    wait_until 2 temp_files_gone "$T/root" || log "note: a temporary file of the killed session stays: $(ls -A "$T/root")"
    mkfile "$T/small" 1000
    expect_exit 0 "$PCOPY" "$T/small" "$DAEMON_URL/small" --key-file "$DAEMON_KEY"
    same_file "$T/small" "$T/root/small"
}

case_idle_timeout() {
    # Input that stalls makes the data streams idle: --timeout 4 gives
    # exit 30, well before the input would end. One stream, and 4 s: the
    # copy must be seen writing before it times out, and `receiving` looks
    # at every pcopy's files, which takes a second or two while other tests
    # run (with -s 2 and 2 s, a stream no block reached timed out first).
    mkdir -p "$T/d"
    IDLE=0
    start_client "$T/d" out --timeout 4 -s 1 - "$T/d/out"
    # Meanwhile nothing has the final name, and any named temporary file
    # is .out.pcopy-XXXXXX (an unnamed O_TMPFILE shows no name at all).
    [[ ! -e $T/d/out ]] || fail "$T/d/out exists while the copy is still running"
    [[ -z $(find "$T/d" -mindepth 1 ! -name '.out.pcopy-??????' -print -quit) ]] ||
        fail "unexpected names in $T/d during the copy: $(ls -A "$T/d")"
    client_exit
    [[ ! -e $T/d/out ]] || fail "$T/d/out appeared"
    no_temp_files "$T/d"
    [[ $CLIENT_RC -eq 30 ]] || { cat "$CLIENT_ERR" >&2; fail "exit status $CLIENT_RC, wanted 30"; }
    # Nothing was lost: the message says the stream went quiet, and why
    # that ends the copy.
    grep -q "nothing came on data connection 0 from client for 4 s (--timeout 4)" "$CLIENT_ERR" ||
        fail "the message does not name the idle stream and --timeout: $(cat "$CLIENT_ERR")"
}

# A sink that stops reading (SIGSTOP of a local copy's sink) stalls the
# sending side: its data, then its window probes, go unanswered, and the
# kernel ends the connection after --timeout (TCP_USER_TIMEOUT). That is a
# timeout, exit 30, as a stalled source gives the sink (it was exit 10, a
# lost connection).
case_stalled_sink() {
    local pid sink
    mkfile "$T/big" 64M
    "$PCOPY" --timeout 3 -x 16M -s 2 "$T/big" "$T/out" 2>"$T/err" &
    pid=$!
    track_pid "$pid"
    wait_until 20 pgrep -P "$pid" -f -- "--server" >/dev/null || fail "no sink child appeared"
    sink=$(pgrep -P "$pid" -f -- "--server")
    sleep 1
    kill -STOP "$sink"
    wait_exit 60 "$pid" || { kill -CONT "$sink"; fail "the copy did not end with its sink stopped"; }
    kill -CONT "$sink" 2>/dev/null || true
    [[ $WAIT_RC -eq 30 ]] || fail "exit status $WAIT_RC, wanted 30: $(cat "$T/err")"
    grep -q "local sink took nothing on data connection [01] for 3 s (--timeout 3)" "$T/err" ||
        fail "the message does not say the sink stopped taking data: $(cat "$T/err")"
    [[ ! -e $T/out ]] || fail "$T/out appeared"
}

# After the last data went (END), --timeout still bounds the wait for the
# sink's last acknowledgements: a sink that stops there (SIGSTOP while -e
# reads a file back, slowed by the sink_slow fault) ends the copy with exit
# 30 about --timeout later, where it used to wait for ever; a sink that is
# slow there but alive (the same read back, not stopped) says so with
# repeated ACKs, and the copy succeeds, however short --timeout is.
case_stalled_at_end() {
    local pid sink start
    mkfile "$T/f" 3M
    expect_exit 0 env PCOPY_TEST_FAULT=sink_slow:1 "$PCOPY" --timeout 1 -e "$T/f" "$T/slow"
    same_file "$T/f" "$T/slow"
    PCOPY_TEST_FAULT=sink_slow:1 "$PCOPY" -vv --timeout 2 -e "$T/f" "$T/out" 2>"$T/err" &
    pid=$!
    track_pid "$pid"
    wait_until 20 grep -q "sent END" "$T/err" || fail "the source sent no END: $(cat "$T/err")"
    sink=$(pgrep -P "$pid" -f -- "--server")
    kill -STOP "$sink"
    start=$(now)
    wait_exit 30 "$pid" || { kill -CONT "$sink"; fail "the copy did not end with its sink stopped"; }
    kill -CONT "$sink" 2>/dev/null || true
    log "stopped at the end: exit $WAIT_RC after $(secs_since "$start") s"
    [[ $WAIT_RC -eq 30 ]] || fail "exit status $WAIT_RC, wanted 30: $(tail -n 3 "$T/err")"
    grep -q "said nothing for 2 s after the last data went (--timeout 2)" "$T/err" ||
        fail "the message does not say what timed out: $(tail -n 3 "$T/err")"
}

# interrupt_early SIG SECS CMD...: run CMD (pcopy) with SIG sent after SECS
# seconds (timeout --preserve-status), stderr in $LAST_STDERR; it must end
# within REACT seconds (times $SLOW) of the signal, with exit 20, saying
# "interrupted".
interrupt_early() {
    local sig=$1 secs=$2 start rc=0
    shift 2
    _LIB_N=$((_LIB_N + 1))
    LAST_STDERR=$T/stderr.$BASHPID.$_LIB_N
    start=$(now)
    timeout --preserve-status -k $((REACT * SLOW)) -s "$sig" "$secs" \
        "${WITH_SIGINT[@]}" "$@" 2>"$LAST_STDERR" || rc=$?
    log "SIG$sig after $secs s: exit $rc after $(secs_since "$start") s: $(head -n 1 "$LAST_STDERR")"
    [[ $rc -ne 137 ]] || fail "pcopy ignored SIG$sig and had to be killed"
    [[ $rc -eq 20 ]] || { cat "$LAST_STDERR" >&2; fail "exit status $rc after SIG$sig, wanted 20"; }
    expect_stderr_contains "interrupted"
}

case_fifo_no_writer() {
    # A FIFO with no writer: the open used to block with the signals
    # blocked, so only SIGKILL ended it. Nothing may appear in DST.
    mkdir -p "$T/d"
    mkfifo "$T/fifo"
    local sig
    for sig in INT TERM HUP; do
        interrupt_early "$sig" 1 "$PCOPY" "$T/fifo" "$T/d/"
        expect_stderr_contains "FIFO '$T/fifo'"
        dir_is_empty "$T/d" || fail "SIG$sig left $(ls -A "$T/d") in $T/d"
    done
    # Into a daemon: the FIFO is opened before anything connects.
    mkdir -p "$T/root"
    start_daemon "$T/root"
    interrupt_early INT 1 "$PCOPY" "$T/fifo" "$DAEMON_URL/" --key-file "$DAEMON_KEY"
    dir_is_empty "$T/root" || fail "the push left $(ls -A "$T/root") in $T/root"
}

case_fifo_writer_later() {
    # The writer appears a second after pcopy starts: the copy is whole.
    mkdir -p "$T/d"
    mkfifo "$T/fifo"
    mkfile "$T/data" 3M
    { sleep 1; cat "$T/data" >"$T/fifo"; } &
    track_pid $!
    expect_exit 0 "$PCOPY" -s 2 "$T/fifo" "$T/d/"
    same_file "$T/data" "$T/d/fifo"
    no_temp_files "$T/d"
    # And pulled from a daemon, whose session waits for the writer.
    mkdir -p "$T/root" "$T/p"
    start_daemon "$T/root"
    mkfifo "$T/root/fifo"
    { sleep 1; cat "$T/data" >"$T/root/fifo"; } &
    track_pid $!
    expect_exit 0 "$PCOPY" "$DAEMON_URL/fifo" "$T/p/" --key-file "$DAEMON_KEY"
    same_file "$T/data" "$T/p/fifo"
    no_temp_files "$T/p"
}

no_sessions() {
    [[ -z $(session_pids) ]]
}

case_fifo_pull_gives_up() {
    # A pull of a FIFO that never gets a writer, interrupted: the client
    # (waiting for the data listener's proof) exits 20, and the daemon's
    # session, waiting for the writer, sees the client go and ends too
    # instead of waiting forever.
    mkdir -p "$T/root" "$T/p"
    start_daemon "$T/root"
    mkfifo "$T/root/fifo"
    interrupt_early INT 1 "$PCOPY" "$DAEMON_URL/fifo" "$T/p/" --key-file "$DAEMON_KEY"
    dir_is_empty "$T/p" || fail "the pull left $(ls -A "$T/p") in $T/p"
    wait_until "$REACT" no_sessions || fail "the daemon's session still waits for the FIFO: $(session_pids)"
    kill -0 "$DAEMON_PID" || fail "the daemon died"
}

# full_listener: a TCP listener on 127.0.0.1 whose accept queue is full, so
# a connect to it hangs (the kernel drops the SYN). Sets FULL_PORT.
FULL_PORT=
full_listener() {
    python3 -c '
import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(0)
held = []
for i in range(3):
    c = socket.socket()
    c.setblocking(False)
    try:
        c.connect(s.getsockname())
    except BlockingIOError:
        pass
    held.append(c)
time.sleep(0.3)
print(s.getsockname()[1], flush=True)
time.sleep(600)
' >"$T/full.port" &
    track_pid $!
    wait_until 10 test -s "$T/full.port" || fail "the full listener did not start"
    FULL_PORT=$(cat "$T/full.port")
}

case_connect_hangs() {
    # Connecting to a daemon that does not answer (a 30 s limit): SIGINT
    # and SIGTERM end the wait at once.
    full_listener
    mkfile "$T/src" 1000
    "$PCOPY" --gen-key "$T/key"
    local sig
    for sig in INT TERM; do
        interrupt_early "$sig" 1 "$PCOPY" "$T/src" "pcopy://127.0.0.1:$FULL_PORT/x" --key-file "$T/key"
        expect_stderr_contains "connecting to 127.0.0.1 port $FULL_PORT"
    done
}

run_case sigint-local case_sigint_local
run_case sigterm-local case_sigterm_local
run_case sigint-local-busy case_sigint_local_busy
run_case sigint-push case_sigint_push
run_case sigint-pull case_sigint_pull
run_case daemon-sigterm case_daemon_sigterm
run_case session-sigkill case_session_sigkill
run_case idle-timeout case_idle_timeout
run_case stalled-sink case_stalled_sink
run_case stalled-at-end case_stalled_at_end
run_case fifo-no-writer case_fifo_no_writer
run_case fifo-writer-later case_fifo_writer_later
run_case fifo-pull-gives-up case_fifo_pull_gives_up
run_case connect-hangs case_connect_hangs
finish
