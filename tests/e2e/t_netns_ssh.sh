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

NS=pcr$$
VETH_HERE=pcv$$a
VETH_THERE=pcv$$b
[[ ${#VETH_HERE} -le 15 ]] || fail "interface name $VETH_HERE is too long"

# N: a /24 of 10.99.0.0/16 that no interface of this namespace uses yet
# (tests running in parallel each take their own).
N=$(free_test_subnet) || fail "every 10.99.N.0/24 from N=20 to 219 is in use"
HERE=10.99.$N.1
THERE=10.99.$N.2

command -v ip >/dev/null || fail "ip (iproute2) is missing"
# Removed when the test exits, after the sshd in the namespace is stopped.
sshd_at_exit ip link del "$VETH_HERE"
sshd_at_exit ip netns del "$NS"
ip netns add "$NS" || fail "cannot create the network namespace $NS (the test needs root)"
ip link add "$VETH_HERE" type veth peer name "$VETH_THERE" || fail "cannot create the veth pair $VETH_HERE"
ip link set "$VETH_THERE" netns "$NS"
ip addr add "$HERE/24" dev "$VETH_HERE"
ip link set "$VETH_HERE" up
ip -n "$NS" addr add "$THERE/24" dev "$VETH_THERE"
ip -n "$NS" link set "$VETH_THERE" up
ip -n "$NS" link set lo up
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
