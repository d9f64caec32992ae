#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_progress: the progress bar, in a real terminal (tmux: a pane of 80x24,
# commands typed with send-keys, the screen read with capture-pane):
#   local      a copy slowed by a reader of its standard output: the bar
#              shows percent, bytes, rate and ETA while it runs; after a
#              resize to 50 columns it fits them; at the end the screen
#              holds the summary line and no piece of the bar
#   tree       -r, slowed by bz2 compression: entries done / announced
#   partial    a tree whose 12th file cannot be opened (fault injection:
#              EACCES, as for an unreadable file, well into the copy): its
#              message, from a reader thread while the bar runs, stands on
#              a line of its own, and the copy goes on to exit status 3
#   interrupt  Ctrl-C: the bar is gone, "interrupted" stands on a clean line
#   full       stdin into a full file system: no percent for a stream, and
#              the error stands on a clean line
#   plain      --no-progress, -q, -P and a stderr that is not a terminal:
#              no bar (-P: the plain progress lines; -q: nothing at all)
#   remote     the same bar through ssh (a pull into a slow reader, and
#              one into a file: percent and ETA), from a third party (a tree: entries) and to a
#              daemon (a slow stdin: bytes and rates), each ending clean
# ctest: cost 130
source "$PCOPY_TEST_LIB"
needs_root "it mounts a small tmpfs and runs an sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"
command -v tmux >/dev/null || fail "tmux is needed (tools/install-deps installs it)"
sshd_start

# Each terminal gets its own tmux server, with its socket in the scratch
# directory (a new session on a server that is still going away fails).
SOCK=
tm() { tmux -S "$SOCK" "$@"; }
cleanup_tmux() {
    local s
    [[ -f $_LIB_STATE/tmux ]] || return 0
    while read -r s; do
        tmux -S "$s" kill-server 2>/dev/null || true
        rm -f "$s"
    done <"$_LIB_STATE/tmux"
}
# The EXIT trap is chained, as sshd.sh does: the one before (sshd.sh's,
# then lib.sh's) runs after the tmux servers are gone, with the test's
# exit status.
eval "_prev_exit=($(trap -p EXIT))"
PREV_EXIT=${_prev_exit[2]:-}
unset _prev_exit
end_all() {
    local rc=$?
    set +e # else the (exit "$rc") below would end the handler when rc != 0
    cleanup_tmux
    (exit "$rc")
    eval "$PREV_EXIT"
}
trap end_all EXIT

# slowread.py: reads stdin at about 20 MB/s, like a slow disk or pipe. It
# leaves Ctrl-C to pcopy (and ends when pcopy does).
SLOWREAD=$T/slowread.py
cat >"$SLOWREAD" <<'PY'
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
while sys.stdin.buffer.read(1048576):
    time.sleep(0.05)
PY

# start_term [COLUMNS]: a fresh terminal of COLUMNS (default 200) x 24
# running a plain bash.
start_term() {
    [[ -z $SOCK ]] || tm kill-server 2>/dev/null || true
    SOCK=$_LIB_STATE/tmux.$BASHPID.$RANDOM
    echo "$SOCK" >>"$_LIB_STATE/tmux"
    tm new-session -d -s pc -x "${1:-200}" -y 24 "env -i PATH=$PATH HOME=/root TERM=xterm PS1='$ ' bash --norc --noprofile"
    wait_until 10 screen_has '^\$' || fail "the shell in tmux did not start"
}

screen() { tm capture-pane -p -t pc; }
screen_has() { screen | grep -qE -- "$1"; }

# type_cmd SCRIPT: runs SCRIPT (a file) in the terminal, after clearing
# it: the command's output starts at the top. SCRIPT ends by printing
# DONE RC=<status>.
type_cmd() {
    tm send-keys -t pc "clear; bash $1" Enter
}

# wait_screen REGEX SECS: the screen shows REGEX within SECS (times SLOW,
# as every wait_until).
wait_screen() {
    wait_until "$2" screen_has "$1" || {
        screen | sed 's/^/  screen: /' >&2
        fail "the screen did not show /$1/"
    }
}

# bar_line: the screen's line holding the bar (a rate), or nothing.
bar_line() { screen | grep -E 'MB/s' | grep -vE '^pcopy: ' | head -n 1; }

# clean_end WANT: after the command, the screen holds exactly one line
# matching WANT and no piece of a bar anywhere.
clean_end() {
    local s n
    s=$(screen)
    n=$(grep -cE -- "$1" <<<"$s" || true)
    if [[ $n -ne 1 ]] || grep -qE 'ETA|avg [0-9]|entries|\[#|^ *[0-9]+%' <<<"$s"; then
        sed 's/^/  screen: /' <<<"$s" >&2
        fail "the screen at the end does not hold one clean /$1/ line and nothing of the bar"
    fi
    # The first line is the summary or the error.
    head -n 1 <<<"$s" | grep -qE -- "$1" || {
        sed 's/^/  screen: /' <<<"$s" >&2
        fail "/$1/ is not the first line after the command"
    }
}

case_local() {
    mkfile "$T/big" 200M
    printf '%q %q - | /usr/bin/python3 %q >/dev/null\necho "DONE RC=${PIPESTATUS[0]}"\n' \
        "$PCOPY" "$T/big" "$SLOWREAD" >"$T/run.sh"
    start_term 80
    type_cmd "$T/run.sh"
    wait_screen 'ETA [0-9]+:[0-9]{2}' 15
    # The reader is slow, and what the buffers hold is read ahead: wait
    # for the bar of a copy that is under way.
    wait_screen ' [1-9][0-9]?% ' 30
    local line
    line=$(bar_line)
    log "bar at 80 columns: '$line'"
    [[ $line =~ [0-9]+%\  ]] || fail "no percent in the bar: '$line'"
    [[ $line =~ [0-9.]+\ MiB/200\ MiB ]] || fail "no bytes done / total in the bar: '$line'"
    [[ $line =~ avg\ [0-9.]+\ MB/s ]] || fail "no average rate in the bar: '$line'"
    ((${#line} <= 79)) || fail "the bar is ${#line} columns wide in 80"
    tm resize-window -t pc -x 50
    # The next redraw (5 a second) fits the new width.
    sleep 0.6
    line=$(bar_line)
    log "bar at 50 columns: '$line'"
    [[ -n $line ]] || { screen >&2; fail "no bar after the resize"; }
    ((${#line} <= 49)) || fail "after the resize to 50 columns the bar is ${#line} wide: '$line'"
    [[ $line =~ [0-9]+%\  && $line =~ ETA ]] || fail "the narrow bar lost percent or ETA: '$line'"
    # Back to a wide window, so that the summary fits one line.
    tm resize-window -t pc -x 200
    wait_screen '^DONE RC=0' 60
    clean_end '^pcopy: 209715200 bytes in 1 file, '
}

# text_tree DIR: 24 files of 2 MB of text in DIR/d, which bz2 compresses,
# slowly: about 5 s here (more with sanitizers).
text_tree() {
    local i
    mkdir -p "$1/d"
    for ((i = 0; i < 24; i++)); do
        head -c 1500000 /dev/urandom | base64 -w 100 >"$1/d/f$i"
    done
}

case_tree() {
    text_tree "$T/src"
    printf '%q -r -c bz2:9 %q %q\necho "DONE RC=$?"\n' "$PCOPY" "$T/src" "$T/dst" >"$T/run.sh"
    start_term
    type_cmd "$T/run.sh"
    # 26 entries: 24 files and 2 directories (each counted once, though
    # the wire also numbers where a directory ends).
    wait_screen '[0-9]+/26 entries' 20
    log "bar: '$(bar_line)'"
    wait_screen '^DONE RC=0' 120
    clean_end '^pcopy: [0-9]+ bytes in 24 files, 2 directories'
    diff -r "$T/src" "$T/dst" || fail "the tree was not copied whole"
}

# bar_shown_after_error: a bar stands on a line after the error's.
bar_shown_after_error() {
    screen | grep -A1 'Permission denied' | tail -n 1 | grep -qE 'avg [0-9.]+ MB/s'
}

case_partial() {
    text_tree "$T/src"
    printf 'PCOPY_TEST_FAULT=source_open:12 %q -r -c bz2:9 %q %q\necho "DONE RC=$?"\n' \
        "$PCOPY" "$T/src" "$T/dst" >"$T/run.sh"
    start_term
    type_cmd "$T/run.sh"
    wait_screen 'Permission denied' 60
    # The bar comes back under the message at its next redraw (the copy
    # has half of its files to go).
    wait_until 5 bar_shown_after_error || {
        screen | sed 's/^/  screen: /' >&2
        fail "the bar did not come back under the message"
    }
    log "after the failure: $(screen | grep -v '^$' | tr '\n' '|')"
    wait_screen '^DONE RC=' 120
    local s
    s=$(screen)
    grep -qE '^pcopy: .*/d/f[0-9]+.*Permission denied' <<<"$s" || {
        sed 's/^/  screen: /' <<<"$s" >&2
        fail "the unreadable file's message does not stand on a line of its own"
    }
    grep -qE '^DONE RC=3$' <<<"$s" || { sed 's/^/  screen: /' <<<"$s" >&2; fail "exit status is not 3"; }
    if grep -qE 'ETA|avg [0-9]|entries|\[#' <<<"$s"; then
        sed 's/^/  screen: /' <<<"$s" >&2
        fail "a piece of the bar is left on the screen"
    fi
    [[ $(grep -c '^pcopy: [0-9]* bytes in 23 files' <<<"$s") -eq 1 ]] || {
        sed 's/^/  screen: /' <<<"$s" >&2
        fail "no single summary line"
    }
}

case_interrupt() {
    mkfile "$T/big" 200M
    printf '%q %q - | /usr/bin/python3 %q >/dev/null\necho "DONE RC=${PIPESTATUS[0]}"\n' \
        "$PCOPY" "$T/big" "$SLOWREAD" >"$T/run.sh"
    start_term
    type_cmd "$T/run.sh"
    wait_screen 'ETA [0-9]+:[0-9]{2}' 15
    tm send-keys -t pc C-c
    wait_screen '^DONE RC=' 20
    clean_end '^pcopy: interrupted by signal'
    screen_has '^DONE RC=20$' || { screen >&2; fail "Ctrl-C did not give exit status 20"; }
}

case_full() {
    mount_tmpfs "$T/small" size=4m
    slow_producer "$T/fifo" 12000000 0
    printf '%q - %q <%q\necho "DONE RC=$?"\n' "$PCOPY" "$T/small/out" "$T/fifo" >"$T/run.sh"
    start_term
    type_cmd "$T/run.sh"
    wait_screen '^DONE RC=' 60
    clean_end '^pcopy: .*No space left on device'
    screen_has '^DONE RC=11$' || { screen >&2; fail "a full disk did not give exit status 11"; }
}

# A stream shows bytes and rates, never a percent or an ETA.
case_stream() {
    slow_producer "$T/fifo" 3000000 4
    printf '%q - %q <%q\necho "DONE RC=$?"\n' "$PCOPY" "$T/out" "$T/fifo" >"$T/run.sh"
    start_term
    type_cmd "$T/run.sh"
    wait_screen 'avg [0-9.]+ MB/s' 15
    local line
    line=$(bar_line)
    log "stream bar: '$line'"
    [[ ! $line =~ %|ETA ]] || fail "a stream of unknown length shows a percent or an ETA: '$line'"
    wait_screen '^DONE RC=0' 30
    clean_end '^pcopy: 3000000 bytes in 1 file, '
}

case_plain() {
    mkfile "$T/big" 200M
    local opt
    for opt in --no-progress -q "-P 1"; do
        printf '%q %s %q - | /usr/bin/python3 %q >/dev/null\necho "DONE RC=${PIPESTATUS[0]}"\n' \
            "$PCOPY" "$opt" "$T/big" "$SLOWREAD" >"$T/run.sh"
        start_term
        type_cmd "$T/run.sh"
        sleep 3
        if screen_has 'avg [0-9.]+ MB/s'; then
            screen | sed 's/^/  screen: /' >&2
            fail "pcopy $opt shows a bar"
        fi
        tm send-keys -t pc C-c
        wait_screen '^DONE RC=20' 40
        case $opt in
        -q) [[ $(screen | grep -c '^pcopy') -eq 0 ]] || { screen >&2; fail "-q printed something"; } ;;
        -P*) screen_has '^pcopy: progress: ' || { screen >&2; fail "-P printed no progress line"; } ;;
        # Without a bar, the terminal's own "^C" echo stays (as for any
        # program); with one, clearing the bar takes it away.
        *) clean_end '^(\^C)?pcopy: interrupted by signal' ;;
        esac
    done
    # stderr not a terminal: only the summary, no carriage return, no escape.
    expect_exit 0 "$PCOPY" "$T/big" "$T/copy"
    if grep -q $'[\r\033]' "$LAST_STDERR"; then
        fail "pcopy drew on a stderr that is not a terminal"
    fi
    expect_summary 209715200 1 4
}

case_remote() {
    local line
    mkfile "$T/big" 200M
    # The terminal's shell starts with an empty environment: say how to
    # reach the test's sshd in the script.
    {
        printf 'export PCOPY_RSH=%q\n' "$PCOPY_RSH"
        printf '%q %q - | /usr/bin/python3 %q >/dev/null\n' "$PCOPY" "pctest:$T/big" "$SLOWREAD"
        printf 'echo "DONE RC=${PIPESTATUS[0]}"\n'
    } >"$T/pull.sh"
    start_term
    type_cmd "$T/pull.sh"
    wait_screen ' [1-9][0-9]?% .*ETA [0-9]+:[0-9]{2}' 30
    log "pull: '$(bar_line)'"
    wait_screen '^DONE RC=0' 60
    clean_end '^pcopy: 209715200 bytes in 1 file, .*encrypted \(TLS 1.3'

    # Into a file, with a cap: the total is final once the one entry
    # came, long before the source's END, so percent and ETA show.
    {
        printf 'export PCOPY_RSH=%q\n' "$PCOPY_RSH"
        printf '%q --bwlimit 40M %q %q\n' "$PCOPY" "pctest:$T/big" "$T/pulled"
        printf 'echo "DONE RC=$?"\n'
    } >"$T/pull2.sh"
    start_term
    type_cmd "$T/pull2.sh"
    wait_screen ' [1-9][0-9]?% .*MiB/200 MiB .*ETA [0-9]+:[0-9]{2}' 30
    log "pull into a file: '$(bar_line)'"
    wait_screen '^DONE RC=0' 60
    clean_end '^pcopy: 209715200 bytes in 1 file, '
    same_file "$T/big" "$T/pulled"

    text_tree "$T/src"
    mkdir -p "$T/third"
    {
        printf 'export PCOPY_RSH=%q\n' "$PCOPY_RSH"
        printf '%q -r -c bz2:9 %q %q\n' "$PCOPY" "h1:$T/src" "h2:$T/third/"
        printf 'echo "DONE RC=$?"\n'
    } >"$T/third.sh"
    start_term
    type_cmd "$T/third.sh"
    wait_screen '[0-9]+/[0-9]+\+? entries' 30
    log "third party: '$(bar_line)'"
    wait_screen '^DONE RC=0' 120
    clean_end '^pcopy: [0-9]+ bytes in 24 files, 2 directories'
    diff -r "$T/src" "$T/third/src" || fail "the third-party copy is not whole"

    mkdir -p "$T/root"
    start_daemon "$T/root"
    slow_producer "$T/fifo" 3000000 4
    {
        printf '%q --key-file %q - %q <%q\n' "$PCOPY" "$DAEMON_KEY" "$DAEMON_URL/s" "$T/fifo"
        printf 'echo "DONE RC=$?"\n'
    } >"$T/daemon.sh"
    start_term
    type_cmd "$T/daemon.sh"
    wait_screen 'avg [0-9.]+ MB/s' 15
    line=$(bar_line)
    log "daemon push of a stream: '$line'"
    [[ ! $line =~ %|ETA ]] || fail "a stream of unknown length shows a percent or an ETA: '$line'"
    wait_screen '^DONE RC=0' 30
    clean_end '^pcopy: 3000000 bytes in 1 file, '
}

run_case local case_local
run_case tree case_tree
run_case partial case_partial
run_case interrupt case_interrupt
run_case full case_full
run_case stream case_stream
run_case plain case_plain
run_case remote case_remote
finish
