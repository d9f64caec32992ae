#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_resume_cut: -a after a cut link. A host in another network namespace,
# reached through ssh over a veth pair; a quarter into a -a copy, an nft
# table in that namespace drops every packet both ways (a link with 100%
# loss: no reset, no error, nothing more arrives). Both ends give up after
# --timeout, the far one keeping its partial file. The same command, link
# mended, resumes the copy and is cut again at 5/8; once the link is back
# for good, the same command finishes the copy: the file is byte-identical and only
# the missing blocks (and a few) travel. A push (the sink far away, kept by
# the far end) and a pull (the sink here).
# ctest: cost 60
source "$PCOPY_TEST_LIB"
needs_root "it makes a network namespace, a veth pair and an nft table, and runs sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"
command -v nft >/dev/null || fail "nft is missing (tools/install-deps installs nftables)"

MB=1048576
CUT=pccut$$

netns_peer k
sshd_start "$NS" "$THERE"
sshd_at_exit ip netns exec "$NS" nft delete table inet "$CUT"

cut_link() {
    ip netns exec "$NS" nft -f - <<EOF || fail "cannot cut the link"
table inet $CUT {
    chain in { type filter hook input priority -10; policy drop; }
    chain out { type filter hook output priority -10; oif "lo" accept; policy drop; }
}
EOF
}

mend_link() {
    ip netns exec "$NS" nft delete table inet "$CUT" || fail "cannot mend the link"
}

# link_cut: the table that cuts the link is there.
link_cut() {
    ip netns exec "$NS" nft list table inet "$CUT" >/dev/null 2>&1
}

# cut_at SRC DST J PART BLOCKS: a -a copy from SRC to DST whose link is
# cut once its journal J names BLOCKS blocks; both ends give up and the
# partial file PART stays. CUT_DONE: the blocks the journal names then.
cut_at() {
    local src=$1 dst=$2 j=$3 part=$4 n=$5 pid
    ! link_cut || mend_link # a case before failed with the link cut
    "$PCOPY" -a -s 3 -x "$(pace_rest $(((128 - n) * MB)))" --timeout 3 "$src" "$dst" \
        2>"$T/cut.$n.err" &
    pid=$!
    track_pid "$pid"
    wait_until 60 journal_at_least "$j" "$n" || fail "the copy never wrote $n blocks"
    cut_link
    # --timeout 3, then at most 5 s for ssh, whose connection is dead too.
    wait_exit 30 "$pid" || fail "the client did not give up after the link was cut"
    [[ $WAIT_RC == 30 ]] || fail "the copy cut off ended with status $WAIT_RC, not 30 (timeout)"
    # The far end gives up too (its data and control go through the cut).
    wait_until 60 file_unheld "$part" || fail "$part is still being written after the cut"
    [[ -f $part ]] || fail "the cut copy left no partial file"
    mend_link
    CUT_DONE=$(journal_done "$j")
}

# cut_story SRC DST LSRC LDST: a 128 MiB -a copy from SRC to DST, the link
# cut at a quarter (at LDST), then the same command, cut again at 5/8;
# then once more with the link whole.
cut_story() {
    local src=$1 dst=$2 lsrc=$3 ldst=$4 d1 d same wire
    local j=${ldst%/*}/.${ldst##*/}.pcopy-jrnl part=${ldst%/*}/.${ldst##*/}.pcopy-part
    cut_at "$src" "$dst" "$j" "$part" 32
    d1=$CUT_DONE
    cut_at "$src" "$dst" "$j" "$part" 80
    d=$CUT_DONE
    ((d >= d1)) || fail "the journal lost blocks across the cuts: $d after $d1"
    expect_exit 0 "$PCOPY" -a -s 3 --json="$T/j" "$src" "$dst"
    same_file "$lsrc" "$ldst"
    same=$(jget "$T/j" 'j["files"]["bytes_unchanged"]')
    wire=$(jget "$T/j" 'j["source"]["wire_bytes"]')
    [[ $(jget "$T/j" 'j["files"]["resumed"]') == 1 ]] || fail "the file was not resumed"
    [[ $same == $((d * MB)) ]] || fail "bytes_unchanged is $same, want the $d blocks journalled"
    ((wire <= (128 - d + 2) * MB)) || fail "$wire bytes on the wire for $((128 - d)) missing blocks"
    no_temp_files "${ldst%/*}"
}

case_push() {
    mkdir -p "$T/far"
    mkfile "$T/f" 128M
    cut_story "$T/f" "pctest:$T/far/f" "$T/f" "$T/far/f"
}

case_pull() {
    mkdir -p "$T/here"
    mkfile "$T/g" 128M
    cut_story "pctest:$T/g" "$T/here/g" "$T/g" "$T/here/g"
}

run_case push case_push
run_case pull case_pull
finish
