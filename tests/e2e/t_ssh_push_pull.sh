#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_ssh_push_pull: `pcopy SRC... host:DST` and `pcopy host:SRC... DST`
# through a real sshd that the test starts (tests/e2e/sshd.sh): several
# files with 1 and 8 streams, standard input and output, paths relative to
# the remote home and a bare `host:`, user@host, a bracketed IPv6 host,
# --rsh against PCOPY_RSH, and `./a:b` as a local file.
# ctest: cost 35
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

sshd_start

# The remote user's home directory: the remote pcopy starts in it.
REMOTE_HOME=$(getent passwd root | cut -d: -f6)
[[ -d $REMOTE_HOME ]] || fail "root's home directory '$REMOTE_HOME' does not exist"
# A name of our own in it, removed when the test exits.
UNIQUE=pcopy-e2e-$TEST_NAME.$$

SMALL="a b c"

# make_sources DIR: a 20 MiB file and three small ones (one empty).
make_sources() {
    mkdir -p "$1"
    mkfile "$1/big" 20M
    mkfile "$1/a" 1000
    mkfile "$1/b" 0
    mkfile "$1/c" 77777
}

case_push_pull() {
    local s f total=$((20 * 1048576 + 1000 + 77777))
    make_sources "$T/src"
    for s in 1 8; do
        mkdir -p "$T/remote.$s" "$T/back.$s"
        # Push: several sources into an existing remote directory.
        expect_exit 0 "$PCOPY" -s "$s" "$T/src/big" "$T/src/a" "$T/src/b" "$T/src/c" "pctest:$T/remote.$s/"
        expect_summary "$total" 4 "$s"
        for f in big $SMALL; do
            same_file "$T/src/$f" "$T/remote.$s/$f"
        done
        # Pull: several remote sources in one command.
        expect_exit 0 "$PCOPY" -s "$s" "pctest:$T/remote.$s/big" "pctest:$T/remote.$s/a" \
            "pctest:$T/remote.$s/b" "pctest:$T/remote.$s/c" "$T/back.$s"
        expect_summary "$total" 4 "$s"
        for f in big $SMALL; do
            same_file "$T/src/$f" "$T/back.$s/$f"
        done
        no_temp_files "$T/remote.$s"
        no_temp_files "$T/back.$s"
    done
    # Every remote pcopy has exited.
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

case_names() {
    make_sources "$T/src"
    mkdir -p "$T/remote" "$T/back"
    # One file to a new remote name, and back to a new local name.
    expect_exit 0 "$PCOPY" -s 4 "$T/src/c" "pctest:$T/remote/renamed"
    same_file "$T/src/c" "$T/remote/renamed"
    expect_exit 0 "$PCOPY" -s 4 "pctest:$T/remote/renamed" "$T/back/c2"
    same_file "$T/src/c" "$T/back/c2"
    # An existing remote file is replaced.
    expect_exit 0 "$PCOPY" "$T/src/a" "pctest:$T/remote/renamed"
    same_file "$T/src/a" "$T/remote/renamed"
    # user@host, both ways.
    expect_exit 0 "$PCOPY" -s 2 "$T/src/big" "root@pctest:$T/remote/"
    same_file "$T/src/big" "$T/remote/big"
    expect_exit 0 "$PCOPY" -s 2 "root@pctest:$T/remote/big" "$T/back/"
    same_file "$T/src/big" "$T/back/big"
    no_temp_files "$T/remote"
    no_temp_files "$T/back"
}

case_stdio() {
    mkfile "$T/in" $((5 * 1048576 + 4321))
    mkdir -p "$T/remote"
    # Standard input to the remote host: ssh must not eat it.
    expect_exit 0 "$PCOPY" -s 4 - "pctest:$T/remote/from-stdin" <"$T/in"
    same_file "$T/in" "$T/remote/from-stdin"
    cat "$T/in" | expect_exit 0 "$PCOPY" -s 1 - "pctest:$T/remote/from-pipe"
    same_file "$T/in" "$T/remote/from-pipe"
    # A remote file to standard output: nothing but the data on it.
    expect_exit 0 "$PCOPY" -s 4 "pctest:$T/remote/from-stdin" - >"$T/out"
    same_file "$T/in" "$T/out"
    expect_exit 0 "$PCOPY" -s 8 "pctest:$T/remote/from-pipe" - | cat >"$T/out.pipe"
    same_file "$T/in" "$T/out.pipe"
}

case_remote_home() {
    local home=$REMOTE_HOME/$UNIQUE bare=$UNIQUE.bare
    sshd_at_exit rm -rf "$home" "$REMOTE_HOME/$bare"
    [[ ! -e $home && ! -e $REMOTE_HOME/$bare ]] || fail "$home or $REMOTE_HOME/$bare exists already"
    mkfile "$T/$bare" 300000
    mkfile "$T/f" 2M
    mkdir -p "$home" "$T/back"
    # A relative remote path is relative to the remote home.
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "pctest:$UNIQUE/"
    same_file "$T/f" "$home/f"
    mkfile "$home/g" 1234567
    expect_exit 0 "$PCOPY" -s 4 "pctest:$UNIQUE/g" "pctest:$UNIQUE/f" "$T/back/"
    same_file "$home/g" "$T/back/g"
    same_file "$T/f" "$T/back/f"
    # A bare `host:` is the remote home itself.
    expect_exit 0 "$PCOPY" -s 2 "$T/$bare" pctest:
    same_file "$T/$bare" "$REMOTE_HOME/$bare"
    expect_exit 0 "$PCOPY" -s 2 "root@pctest:$bare" "$T/back/"
    same_file "$T/$bare" "$T/back/$bare"
    rm -rf "$home" "${REMOTE_HOME:?}/$bare"
    no_temp_files "$T/back"
}

case_ipv6() {
    mkfile "$T/f" 6M
    mkfile "$T/g" 4097
    mkdir -p "$T/remote" "$T/back"
    # A bracketed IPv6 address; ssh reaches ::1 through SSH_CONFIG.
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "$T/g" "[::1]:$T/remote/"
    same_file "$T/f" "$T/remote/f"
    same_file "$T/g" "$T/remote/g"
    expect_exit 0 "$PCOPY" -s 4 "[::1]:$T/remote/f" "[::1]:$T/remote/g" "$T/back/"
    same_file "$T/f" "$T/back/f"
    same_file "$T/g" "$T/back/g"
    # With a user, and to a new name.
    expect_exit 0 "$PCOPY" -s 2 "$T/g" "root@[::1]:$T/remote/g2"
    same_file "$T/g" "$T/remote/g2"
    expect_exit 0 "$PCOPY" -s 2 "root@[::1]:$T/remote/g2" "$T/back/g2"
    same_file "$T/g" "$T/back/g2"
    # A name that resolves to ::1 only.
    expect_exit 0 "$PCOPY" -s 3 "$T/f" "pctest6:$T/remote/f6"
    same_file "$T/f" "$T/remote/f6"
    no_temp_files "$T/remote"
}

case_rsh_option() {
    mkfile "$T/f" 3M
    mkdir -p "$T/remote" "$T/back"
    # --rsh alone, without PCOPY_RSH.
    expect_exit 0 env -u PCOPY_RSH "$PCOPY" --rsh "ssh -F $SSH_CONFIG" "$T/f" "pctest:$T/remote/"
    same_file "$T/f" "$T/remote/f"
    # --rsh wins over PCOPY_RSH, with more words, both ways.
    expect_exit 0 env PCOPY_RSH=false "$PCOPY" --rsh "ssh -F $SSH_CONFIG -o ConnectionAttempts=2" \
        "pctest:$T/remote/f" "$T/back/"
    same_file "$T/f" "$T/back/f"
    # The remote binary named with --remote-pcopy.
    expect_exit 0 "$PCOPY" --remote-pcopy "$PCOPY" "$T/f" "pctest:$T/remote/f.named"
    same_file "$T/f" "$T/remote/f.named"
}

case_local_colon() {
    # A colon after a slash is part of a local path: no ssh is run.
    mkdir -p "$T/d"
    mkfile "$T/a:b" 200000
    (cd "$T" && exec env PCOPY_RSH=false "$PCOPY" -q ./a:b ./c:d) ||
        fail "pcopy ./a:b ./c:d (local) failed"
    same_file "$T/a:b" "$T/c:d"
    (cd "$T" && exec env PCOPY_RSH=false "$PCOPY" -q ./a:b d/) ||
        fail "pcopy ./a:b d/ (local) failed"
    same_file "$T/a:b" "$T/d/a:b"
    expect_exit 0 env PCOPY_RSH=false "$PCOPY" "$T/a:b" "$T/d/x:y"
    same_file "$T/a:b" "$T/d/x:y"
    no_temp_files "$T"
}

# --data-via ssh: every data stream its own ssh connection (here on an open
# loopback; t_ssh_firewall has the firewall): push and pull of several
# files with 1 and 4 streams, and the summary says how the data went.
case_data_via_ssh() {
    local s f total=$((20 * 1048576 + 1000 + 77777))
    make_sources "$T/src"
    for s in 1 4; do
        mkdir -p "$T/remote.$s" "$T/back.$s"
        expect_exit 0 "$PCOPY" -s "$s" --data-via ssh "$T/src/big" "$T/src/a" "$T/src/b" "$T/src/c" "pctest:$T/remote.$s/"
        expect_summary "$total" 4 "$s"
        expect_stderr_matches 'encrypted \(ssh\)'
        for f in big $SMALL; do
            same_file "$T/src/$f" "$T/remote.$s/$f"
        done
        expect_exit 0 "$PCOPY" -s "$s" --data-via ssh "pctest:$T/remote.$s/big" "pctest:$T/remote.$s/a" \
            "pctest:$T/remote.$s/b" "pctest:$T/remote.$s/c" "$T/back.$s/"
        expect_summary "$total" 4 "$s"
        expect_stderr_matches 'encrypted \(ssh\)'
        for f in big $SMALL; do
            same_file "$T/src/$f" "$T/back.$s/$f"
        done
    done
    # Nothing is left behind on the far side: no attach process, no socket.
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(pgrep -af 'pcopy --attach' || true)"
}

run_case push-pull case_push_pull
run_case names case_names
run_case stdio case_stdio
run_case remote-home case_remote_home
run_case ipv6 case_ipv6
run_case rsh-option case_rsh_option
run_case local-colon case_local_colon
run_case data-via-ssh case_data_via_ssh
finish
