#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_netns_ssh: ssh copies to a host in another network namespace, joined to
# this one by a veth pair (10.99.N.1 here, 10.99.N.2 there), with an sshd
# that listens only there: push and pull with 4 streams, with -z (the
# remote connects back to 10.99.N.1), and a third-party copy whose two
# hosts are both the namespace's address.
source "$PCOPY_TEST_LIB"
needs_root "it makes a network namespace and a veth pair, and runs sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

netns_peer r
log "namespace $NS at $THERE, this side $HERE on $VETH_HERE"

sshd_start "$NS" "$THERE"

case_push_pull() {
    mkfile "$T/f" 10M
    mkfile "$T/g" 33333
    mkdir -p "$T/remote" "$T/back"
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "$T/g" "pctest:$T/remote/"
    expect_summary $((10 * 1048576 + 33333)) 2 4
    same_file "$T/f" "$T/remote/f"
    same_file "$T/g" "$T/remote/g"
    expect_exit 0 "$PCOPY" -s 4 "pctest:$T/remote/f" "pctest:$T/remote/g" "$T/back/"
    expect_summary $((10 * 1048576 + 33333)) 2 4
    same_file "$T/f" "$T/back/f"
    same_file "$T/g" "$T/back/g"
    # By address, with a user.
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "root@$THERE:$T/remote/by-address"
    same_file "$T/f" "$T/remote/by-address"
    expect_exit 0 "$PCOPY" -s 4 "$THERE:$T/remote/by-address" "$T/back/by-address"
    same_file "$T/f" "$T/back/by-address"
    no_temp_files "$T/remote"
    no_temp_files "$T/back"
}

case_reverse() {
    mkfile "$T/f" 10M
    mkdir -p "$T/remote" "$T/back"
    # The remote pcopy connects back to this namespace, at $HERE.
    expect_exit 0 "$PCOPY" -z -s 4 "$T/f" "pctest:$T/remote/"
    same_file "$T/f" "$T/remote/f"
    expect_exit 0 "$PCOPY" -z -s 4 "pctest:$T/remote/f" "$T/back/"
    same_file "$T/f" "$T/back/f"
    no_temp_files "$T/remote"
}

case_third_party() {
    mkdir -p "$T/src" "$T/dst"
    mkfile "$T/src/f" 10M
    mkfile "$T/src/g" 1
    expect_exit 0 "$PCOPY" -s 4 "h1:$T/src/f" "h1:$T/src/g" "h2:$T/dst/"
    same_file "$T/src/f" "$T/dst/f"
    same_file "$T/src/g" "$T/dst/g"
    expect_exit 0 "$PCOPY" -s 4 "h1:$T/src/f" "root@$THERE:$T/dst/f2"
    same_file "$T/src/f" "$T/dst/f2"
    no_temp_files "$T/dst"
    # Every remote pcopy has exited.
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

run_case push-pull case_push_pull
run_case reverse case_reverse
run_case third-party case_third_party
finish
