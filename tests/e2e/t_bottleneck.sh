#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_bottleneck: the summary's last line names the slow link of the chain
# (docs/DESIGN-NOTES.md, "Which link is the slow one") in four staged
# copies, each slowed down at one link by a wide margin:
#   slow-source   standard input fed at 20 MB/s          -> source disk reads
#   slow-sink     standard output drained at 20 MB/s      -> sink disk writes
#   slow-network  a push through ssh over a veth pair
#                 whose sending side a tbf caps at 100 Mbit/s -> the network
#   cpu-compress  -c bz2:9 on a compressible file         -> compression (CPU)
# The local copies run as the user nobody; the ssh copy as root (its sshd
# logs in as root). -v also prints the stage table, which is checked to
# have its seven rows.
source "$PCOPY_TEST_LIB"
needs_root "it makes a network namespace with a tbf qdisc, runs sshd, and runs pcopy as nobody"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

command -v python3 >/dev/null || fail "python3 is needed to pace the pipes"
command -v setpriv >/dev/null || fail "setpriv is needed to run pcopy as nobody"
command -v tc >/dev/null || fail "tc (iproute2) is needed for the rate cap"

NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
# nobody_dir: sets W to a directory of this case that the user nobody may
# write.
nobody_dir() {
    W=$T/nobody
    mkdir -p "$W"
    chown nobody:nogroup "$W"
}

# pace.py gen RATE BYTES: BYTES random bytes to stdout at RATE bytes/s.
# pace.py drain RATE OUT: stdin to OUT at RATE bytes/s.
PACE=$T/pace.py
cat >"$PACE" <<'PY'
import os, sys, time
mode, rate = sys.argv[1], float(sys.argv[2])
chunk = 65536
start, done = time.monotonic(), 0
def pace():
    ahead = done / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
if mode == "gen":
    left = int(sys.argv[3])
    while left > 0:
        n = min(chunk, left)
        sys.stdout.buffer.write(os.urandom(n))
        sys.stdout.buffer.flush()
        left -= n
        done += n
        pace()
else:
    with open(sys.argv[3], "wb") as out:
        while True:
            b = sys.stdin.buffer.read1(chunk)
            if not b:
                break
            out.write(b)
            done += len(b)
            pace()
PY

# expect_verdict NAME: the last stderr ends its summary with the verdict
# NAME, and -v's table has its seven stages. The table and the verdict go
# to the test's log, to see the margins.
expect_verdict() {
    local name=$1 second="network idle" row
    grep -E '^pcopy: (stage|read|compress|send|network|receive|decode|write|bottleneck:) ' \
        "$LAST_STDERR" | sed 's/^pcopy:/  /' >&2 || true
    [[ $name == "the network" ]] && second="sink idle"
    local re=${name//(/\\(}
    re=${re//)/\\)}
    expect_stderr_matches "^pcopy: bottleneck: $re \(busy [0-9]+%, $second [0-9]+%\)\$"
    for row in "read +source" "compress +source" "send +source" "network +both" \
        "receive +sink" "decode +sink" "write +sink"; do
        expect_stderr_matches "^pcopy: $row +[0-9]+ +[0-9]+% +[0-9]+% +[0-9]+%\$"
    done
}

case_slow_source() {
    nobody_dir
    python3 "$PACE" gen 20e6 40000000 |
        expect_exit 0 "${NOBODY[@]}" "$PCOPY" -v -s 4 - "$W/from-stdin"
    [[ $(stat -c %s "$W/from-stdin") -eq 40000000 ]] || fail "the copy of stdin is not 40000000 bytes"
    expect_verdict "source disk reads"
}

case_slow_sink() {
    local drain
    nobody_dir
    mkfile "$W/to-stdout" 40000000
    mkfifo "$T/sink.fifo"
    python3 "$PACE" drain 20e6 "$T/drained" <"$T/sink.fifo" &
    drain=$!
    track_pid "$drain"
    expect_exit 0 "${NOBODY[@]}" "$PCOPY" -v -s 4 "$W/to-stdout" - >"$T/sink.fifo"
    wait "$drain" || fail "the paced reader failed"
    same_file "$W/to-stdout" "$T/drained"
    expect_verdict "sink disk writes"
}

case_cpu_compress() {
    nobody_dir
    # Text that compresses well but costs bzip2 -9 its full effort.
    seq -f 'line %.0f of a compressible file, with some words to sort' 1 420000 >"$W/text"
    expect_exit 0 "${NOBODY[@]}" "$PCOPY" -v -c bz2:9 "$W/text" "$W/text.copy"
    same_file "$W/text" "$W/text.copy"
    expect_verdict "compression (CPU) on the source"
}

# The network: a namespace behind a veth pair, with an sshd there; what
# leaves this side of the pair goes through a 100 Mbit/s token bucket.
netns_peer b
sshd_start "$NS" "$THERE"

case_slow_network() {
    mkfile "$T/net-src" 24M
    mkdir -p "$T/remote"
    tc qdisc add dev "$VETH_HERE" root tbf rate 100mbit burst 64kb latency 100ms ||
        fail "cannot add a tbf qdisc to $VETH_HERE"
    expect_exit 0 "$PCOPY" -v -s 4 "$T/net-src" "pctest:$T/remote/net-dst"
    tc qdisc del dev "$VETH_HERE" root || true
    same_file "$T/net-src" "$T/remote/net-dst"
    expect_verdict "the network"
}

run_case slow-source case_slow_source
run_case slow-sink case_slow_sink
run_case cpu-compress case_cpu_compress
run_case slow-network case_slow_network
finish
