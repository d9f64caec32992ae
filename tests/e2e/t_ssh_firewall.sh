#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_ssh_firewall: issue 18, pcopy works wherever scp works. Behind a
# firewall that lets only ssh through, the data streams go through ssh
# (--data-via auto falls back by itself and says so once on stderr;
# --data-via ssh forces it), still in parallel; an open link never falls
# back. Every copy checks the bytes and the notice line (the contract:
# "... the data goes through ssh").
#
# The network (three namespaces, each pair joined by a veth pair; the
# addresses are in one 10.99.N.0/24 of our own):
#
#   here (this namespace) .1 ---- .2 far (sshd on :22, nft firewall)  /29
#                         .9 ---- .10 bastion (sshd on :22, forwards)  /30
#                 bastion .13 ---- .14 far's inner address             /30
#
#   far       runs the sshd under test on 10.99.N.2 ("pctest", "h1", "h2")
#             and, listen-only, on its inner address 10.99.N.14, which
#             only the bastion reaches. 10.99.N.3 is far's too, with
#             nothing listening on it: the dead host ("dead").
#   bastion   a jump host (its own sshd, same key, no pcopy). "inner" is
#             far's inner address reached with ProxyJump bastion. Here
#             routes the inner /30 through the bastion, which forwards
#             it, but far has no route back to here: a direct connection
#             to the inner address gets no answer at all, as a private
#             address behind a bastion usually does, so only a fallback
#             that skips the direct attempt is quick.
#
# Far's sshd forbids forwarding of every kind (DisableForwarding yes): data
# streams through ssh need none.
#
# firewall_close [drop|reject] closes far to everything but ssh (tcp port
# 22), on each of its addresses and even from far itself, and closes here
# to new connections coming in from far and the bastion (replies to our
# own connections pass); firewall_open removes both. So:
#   - here cannot reach far's data ports, and far cannot connect back;
#   - third party: h1 and h2 are two names of far, as in t_netns_ssh. With
#     the firewall closed, a connection from far to its own address
#     10.99.N.2 (h1's data connection to h2) is dropped or refused like
#     one from outside, while ssh from h1 to h2 works. For that ssh, far's
#     /etc/ssh/ssh_config is a copy of the client's config (ip netns exec
#     binds /etc/netns/NS/ssh over /etc/ssh in far's namespace), as a user
#     with the same ~/.ssh/config on both hosts would have.
# DROP sends nothing back (only pcopy's own bound ends the wait); REJECT
# answers at once (ECONNREFUSED).
#
# Each case sets the firewall it needs, so that PCOPY_TEST_CASES can run
# any one of them alone.
# ctest: cost 80
# ctest: lock system_pcopy
source "$PCOPY_TEST_LIB"
needs_root "it makes network namespaces, veth pairs and nft firewalls, and runs sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

command -v ip >/dev/null || fail "ip (iproute2) is missing (tools/install-deps installs it)"
command -v nft >/dev/null || fail "nft is missing (tools/install-deps installs nftables)"
command -v nc >/dev/null || fail "nc is missing (tools/install-deps installs netcat-openbsd)"
command -v scp >/dev/null || fail "scp is missing (tools/install-deps installs openssh-client)"

# Names of our own: tests running in parallel each have theirs.
NS_FAR=pcff$$
NS_BAST=pcfb$$
VETH_FAR_HERE=pcfa$$h VETH_FAR_THERE=pcfa$$f
VETH_BAST_HERE=pcfd$$h VETH_BAST_THERE=pcfd$$b
VETH_IN_BAST=pcfc$$b VETH_IN_FAR=pcfc$$f
[[ ${#VETH_FAR_HERE} -le 15 ]] || fail "interface name $VETH_FAR_HERE is too long"
FW_TABLE=pcopyfw$$

# N: a /24 of 10.99.0.0/16 that no interface of this namespace uses yet.
N=$(free_test_subnet) || fail "every 10.99.N.0/24 from N=20 to 219 is in use"
HERE=10.99.$N.1
FAR=10.99.$N.2
DEAD=10.99.$N.3
HERE_B=10.99.$N.9
BASTION=10.99.$N.10
BASTION_IN=10.99.$N.13
FAR_IN=10.99.$N.14

# Removed when the test exits, after the sshds are stopped (last first).
sshd_at_exit rmdir /etc/netns
sshd_at_exit rm -rf "/etc/netns/$NS_FAR"
sshd_at_exit nft delete table inet "$FW_TABLE"
sshd_at_exit ip link del "$VETH_FAR_HERE"
sshd_at_exit ip link del "$VETH_BAST_HERE"
sshd_at_exit ip netns del "$NS_FAR"
sshd_at_exit ip netns del "$NS_BAST"

ip netns add "$NS_FAR" || fail "cannot create the network namespace $NS_FAR"
ip netns add "$NS_BAST" || fail "cannot create the network namespace $NS_BAST"
# veth_pair NAME_HERE NS_HERE NAME_THERE NS_THERE: a veth pair, one end in
# each namespace ("" for this one), both up.
veth_pair() {
    ip link add "$1" type veth peer name "$3" || fail "cannot create the veth pair $1/$3"
    [[ -z $2 ]] || ip link set "$1" netns "$2"
    ip link set "$3" netns "$4"
    ip ${2:+-n "$2"} link set "$1" up
    ip -n "$4" link set "$3" up
}
veth_pair "$VETH_FAR_HERE" "" "$VETH_FAR_THERE" "$NS_FAR"
veth_pair "$VETH_BAST_HERE" "" "$VETH_BAST_THERE" "$NS_BAST"
veth_pair "$VETH_IN_BAST" "$NS_BAST" "$VETH_IN_FAR" "$NS_FAR"
ip addr add "$HERE/29" dev "$VETH_FAR_HERE"
ip -n "$NS_FAR" addr add "$FAR/29" dev "$VETH_FAR_THERE"
ip -n "$NS_FAR" addr add "$DEAD/29" dev "$VETH_FAR_THERE"
ip addr add "$HERE_B/30" dev "$VETH_BAST_HERE"
ip -n "$NS_BAST" addr add "$BASTION/30" dev "$VETH_BAST_THERE"
ip -n "$NS_BAST" addr add "$BASTION_IN/30" dev "$VETH_IN_BAST"
ip -n "$NS_FAR" addr add "$FAR_IN/30" dev "$VETH_IN_FAR"
ip -n "$NS_FAR" link set lo up
ip -n "$NS_BAST" link set lo up
# Here sends the inner /30 to the bastion, which forwards it to far; far
# has no route back (see the top).
ip route add "10.99.$N.12/30" via "$BASTION" dev "$VETH_BAST_HERE"
ip netns exec "$NS_BAST" sysctl -qw net.ipv4.ip_forward=1 ||
    fail "cannot enable forwarding in $NS_BAST"

# far's ssh client config: written below, once the client's is complete;
# the directory must exist before far's sshd starts (ip netns exec binds it).
mkdir -p "/etc/netns/$NS_FAR/ssh"
: >"/etc/netns/$NS_FAR/ssh/ssh_config"

SSHD_FIXED_PORT=22
SSHD_MORE_ADDRS=("$FAR_IN")
# Far forbids forwarding of every kind, as locked-down servers do: data
# streams through ssh must not need it (each is a session of its own).
SSHD_MORE_CONFIG=("DisableForwarding yes")
sshd_start "$NS_FAR" "$FAR"
sshd_bastion_start "$NS_BAST" "$BASTION"
ssh_config_host inner HostName "$FAR_IN" ProxyJump bastion
ssh_config_host dead HostName "$DEAD"
cp "$SSH_CONFIG" "/etc/netns/$NS_FAR/ssh/ssh_config"
log "far $NS_FAR at $FAR (inner $FAR_IN, dead $DEAD), bastion $NS_BAST at $BASTION, here $HERE/$HERE_B"

# ---------------------------------------------------------------- firewall

# FW_MODE: what the closed firewall does with what it does not let in
# (drop or reject), when firewall_close is given no mode.
FW_MODE=drop

# _nft_in [NETNS] ARGS...: nft in NETNS ("" for this namespace).
_nft_in() {
    local ns=$1
    shift
    if [[ -n $ns ]]; then
        ip netns exec "$ns" nft "$@"
    else
        nft "$@"
    fi
}

# _fw_remove NETNS: remove our table in NETNS, if it is there.
_fw_remove() {
    if _nft_in "$1" list table inet "$FW_TABLE" >/dev/null 2>&1; then
        _nft_in "$1" delete table inet "$FW_TABLE" ||
            fail "cannot remove the nft table $FW_TABLE${1:+ in $1}"
    fi
}

# firewall_open: no firewall on either side.
firewall_open() {
    _fw_remove "$NS_FAR"
    _fw_remove ""
}

# firewall_close [drop|reject [PORTS]]: far takes only ssh (tcp port 22,
# and PORTS, an nft port or range such as 40000-40019, when given, plus
# what belongs to its established connections), on each of its addresses
# and even from itself; everything else on them is dropped or rejected
# (default $FW_MODE). Loopback (127.0.0.1: the sessions' own sockets)
# stays open. Here takes no new connection from far or the bastion (a
# stateless rule on our two interfaces only, so that it adds no conntrack
# to this namespace and touches nothing else in it).
firewall_close() {
    local mode=${1:-$FW_MODE} verdict ports=22
    [[ -z ${2-} ]] || ports="22, $2"
    case $mode in
    drop) verdict=drop ;;
    # ICMP port unreachable (as iptables' REJECT): ECONNREFUSED at once.
    reject) verdict=reject ;;
    *) fail "firewall_close: mode '$mode' is neither drop nor reject" ;;
    esac
    firewall_open
    _nft_in "$NS_FAR" -f - <<EOF || fail "cannot load the firewall into $NS_FAR"
table inet $FW_TABLE {
    chain input {
        type filter hook input priority 0; policy accept;
        ct state established,related accept
        tcp dport { $ports } accept
        ip daddr { $FAR, $DEAD, $FAR_IN } $verdict
        iif lo accept
        $verdict
    }
}
EOF
    nft -f - <<EOF || fail "cannot load the firewall of this namespace"
table inet $FW_TABLE {
    chain input {
        type filter hook input priority 0; policy accept;
        iifname { "$VETH_FAR_HERE", "$VETH_BAST_HERE" } tcp flags & (syn | ack) == syn $verdict
    }
}
EOF
}

# ------------------------------------------------------------------ checks

# NOTICE: the fallback notice of the contract, one line on stderr.
NOTICE='the data goes through ssh'
# SSH_SUMMARY: the security part of the summary line for ssh streams.
SSH_SUMMARY='encrypted \(ssh\)'

# notice_count: how many lines of the last stderr are the notice.
notice_count() {
    grep -cF -- "$NOTICE" "$LAST_STDERR" || true
}

# expect_notice_once [REGEX]: the last stderr has the notice exactly once,
# and that line matches REGEX (ERE) when given.
expect_notice_once() {
    local n
    n=$(notice_count)
    if [[ $n -ne 1 ]]; then
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "the notice '$NOTICE' is on $n lines of stderr, wanted exactly 1"
    fi
    [[ -z ${1-} ]] || expect_stderr_matches "$1"
}

# expect_notice_lines MIN MAX: the last stderr has the notice on MIN to MAX
# lines.
expect_notice_lines() {
    local n
    n=$(notice_count)
    if ((n < $1 || n > $2)); then
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "the notice '$NOTICE' is on $n lines of stderr, wanted $1 to $2"
    fi
}

# expect_no_notice: the last stderr has no notice.
expect_no_notice() {
    expect_stderr_lacks "$NOTICE"
}

# DIRECT_NOTICE: the notice of a direct attempt that failed.
DIRECT_NOTICE="^pcopy: no direct data connection to [^ ]+ port [0-9]+ \(.+\); $NOTICE\$"
# PROXY_NOTICE: the notice for a host reached through a proxy.
PROXY_NOTICE="^pcopy: inner is reached through a proxy \(ProxyJump\); $NOTICE\$"

# quicker_than SECONDS START WHAT: less than SECONDS (a decimal) went by
# since START (a `now` value); fails naming WHAT otherwise.
quicker_than() {
    local took
    took=$(secs_since "$2")
    awk -v t="$took" -v l="$1" 'BEGIN { exit !(t < l) }' ||
        fail "$3 took $took s, wanted less than $1 s"
    log "$3 took $took s (limit $1 s)"
}

# timed_copy VAR CODES CMD...: expect_exit CODES CMD..., and set VAR to the
# seconds it took.
timed_copy() {
    local -n _out=$1
    local codes=$2 start
    shift 2
    start=$(now)
    expect_exit "$codes" "$@"
    _out=$(secs_since "$start")
}

# forget_hosts: pcopy forgets the hosts where it fell back (case
# remembered), so that the next copy races direct against ssh again rather
# than going through ssh at once.
forget_hosts() {
    rm -f -- "$XDG_CACHE_HOME/pcopy/direct-failed"
}

# push_pull_20m DIR OPTIONS...: push a 20 MiB file to far with -s 4 and
# OPTIONS, and pull it back; checks the bytes and the summary (4 streams,
# ssh). Leaves LAST_STDERR of the pull; the push's stderr in PUSH_STDERR.
PUSH_STDERR=
push_pull_20m() {
    local d=$1
    shift
    mkdir -p "$d/remote" "$d/back"
    mkfile "$d/f" 20M
    expect_exit 0 "$PCOPY" -s 4 "$@" "$d/f" "pctest:$d/remote/f"
    PUSH_STDERR=$LAST_STDERR
    same_file "$d/f" "$d/remote/f"
    expect_summary $((20 * 1048576)) 1 4 "$SSH_SUMMARY"
    forget_hosts
    expect_exit 0 "$PCOPY" -s 4 "$@" "pctest:$d/remote/f" "$d/back/f"
    same_file "$d/f" "$d/back/f"
    expect_summary $((20 * 1048576)) 1 4 "$SSH_SUMMARY"
    no_temp_files "$d/remote"
    no_temp_files "$d/back"
}

# REMOTE_PCOPY: the command lines of remote pcopy processes: the session
# (--server) and the data streams through ssh (--attach).
REMOTE_PCOPY='pcopy.* --(server|attach)'

# _no_remote_pcopy: no remote pcopy runs under far's sshd.
_no_remote_pcopy() {
    [[ -z $(sshd_remote_pids "$REMOTE_PCOPY") ]]
}

# no_remote_left: every remote pcopy under far's sshd has exited.
no_remote_left() {
    wait_until 10 _no_remote_pcopy ||
        fail "remote pcopy processes are left: $(sshd_remote_pids "$REMOTE_PCOPY")"
}

# ------------------------------------------------------------------- cases

# The harness itself, with what exists today: a plain copy over the open
# link; with the firewall closed, ssh and scp still work while a listener
# on another port of far cannot be reached (DROP: no answer; REJECT:
# refused at once), nor one here from far; the inner address is reached
# through the bastion only.
case_sanity() {
    local port here_port pid start
    firewall_open
    mkfile "$T/f" 5M
    mkdir -p "$T/remote"
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "pctest:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_no_notice

    port=$(free_port)
    ip netns exec "$NS_FAR" nc -lk "$FAR" "$port" </dev/null >/dev/null 2>&1 &
    pid=$!
    track_pid "$pid"
    here_port=$(free_port)
    nc -lk "$HERE" "$here_port" </dev/null >/dev/null 2>&1 &
    track_pid "$!"
    wait_until 10 nc -z -w 1 "$FAR" "$port" || fail "the listener on $FAR port $port is not reachable with the firewall open"
    wait_until 10 ip netns exec "$NS_FAR" nc -z -w 1 "$HERE" "$here_port" ||
        fail "far cannot reach the listener here on $HERE port $here_port with the firewall open"

    firewall_close drop
    expect_exit 0 ssh -F "$SSH_CONFIG" pctest true
    ! nc -z -w 1 "$FAR" "$port" || fail "$FAR port $port is reachable through the closed firewall (drop)"
    ! ip netns exec "$NS_FAR" nc -z -w 1 "$HERE" "$here_port" ||
        fail "far reaches $HERE port $here_port through the closed firewall (drop)"
    # scp works: the promise pcopy is held to.
    expect_exit 0 scp -q -F "$SSH_CONFIG" "$T/f" "pctest:$T/remote/by-scp"
    same_file "$T/f" "$T/remote/by-scp"
    # Only through the bastion for the inner address; not from here.
    expect_exit 0 ssh -F "$SSH_CONFIG" inner true
    expect_exit 255 ssh -F "$SSH_CONFIG" -o ConnectTimeout=2 "$FAR_IN" true
    # Far's own address from far itself: ssh yes, anything else no (h1 -> h2).
    expect_exit 0 ip netns exec "$NS_FAR" ssh h2 true
    ! ip netns exec "$NS_FAR" nc -z -w 1 "$FAR" "$port" ||
        fail "far reaches its own $FAR port $port through the closed firewall"

    firewall_close reject
    start=$(now)
    ! nc -z -w 5 "$FAR" "$port" || fail "$FAR port $port is reachable through the closed firewall (reject)"
    quicker_than 2 "$start" "a connection refused by the firewall"
    expect_exit 0 ssh -F "$SSH_CONFIG" pctest true

    firewall_open
    nc -z -w 1 "$FAR" "$port" || fail "$FAR port $port is not reachable again after firewall_open"
    # The dead host: ssh is refused there (nothing listens on port 22).
    expect_exit 255 ssh -F "$SSH_CONFIG" dead true
    expect_stderr_contains "port 22: Connection refused"
}

# auto behind a DROP firewall: push and pull fall back, once each.
case_auto_drop() {
    firewall_close drop
    push_pull_20m "$T"
    expect_notice_once "$DIRECT_NOTICE"
    LAST_STDERR=$PUSH_STDERR
    expect_notice_once "$DIRECT_NOTICE"
    no_remote_left
}

# auto behind a REJECT firewall; -q silences the notice, -v says it too.
case_auto_reject() {
    firewall_close reject
    push_pull_20m "$T"
    expect_notice_once "$DIRECT_NOTICE"
    LAST_STDERR=$PUSH_STDERR
    expect_notice_once "$DIRECT_NOTICE"
    mkfile "$T/small" 100000
    forget_hosts
    expect_exit 0 "$PCOPY" -q -s 4 "$T/small" "pctest:$T/remote/quiet"
    same_file "$T/small" "$T/remote/quiet"
    expect_stderr_empty
    forget_hosts
    expect_exit 0 "$PCOPY" -v -s 4 "$T/small" "pctest:$T/remote/verbose"
    same_file "$T/small" "$T/remote/verbose"
    expect_notice_once "$DIRECT_NOTICE"
    # --json carries the fallback and its reason, valid against the schema.
    local root
    root=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
    forget_hosts
    expect_exit 0 "$PCOPY" -q --json -s 4 "$T/small" "pctest:$T/remote/json" >"$T/j"
    same_file "$T/small" "$T/remote/json"
    /usr/bin/python3 "$root/tests/e2e/check_json.py" "$root/docs/pcopy-summary.schema.json" "$T/j" ||
        fail "--json output is not valid against the schema"
    /usr/bin/python3 -c 'import json, re, sys
j = json.load(open(sys.argv[1]))
assert j["data_via"] == "ssh", j["data_via"]
assert re.fullmatch(r"no direct data connection to \S+ port [0-9]+ \(.+\)", j["data_via_reason"]), j["data_via_reason"]' "$T/j" ||
        fail "--json does not say that the data fell back to ssh, and why"
    no_remote_left
}

# The fallback bound behind DROP: a small copy in auto is done in < 8 s,
# and costs at most about 3 s more than the same copy with --data-via ssh.
case_drop_quick() {
    local t_ssh t_auto limit
    firewall_close drop
    mkfile "$T/small" 100000
    mkdir -p "$T/remote"
    timed_copy t_ssh 0 "$PCOPY" --data-via ssh -s 4 "$T/small" "pctest:$T/remote/via-ssh"
    same_file "$T/small" "$T/remote/via-ssh"
    timed_copy t_auto 0 "$PCOPY" -s 4 "$T/small" "pctest:$T/remote/auto"
    same_file "$T/small" "$T/remote/auto"
    expect_notice_once "$DIRECT_NOTICE"
    # Sanitizer builds start slower; the bound itself is wall-clock time.
    limit=$((5 + 3 * SLOW))
    awk -v t="$t_auto" -v l="$limit" 'BEGIN { exit !(t < l) }' ||
        fail "auto behind DROP took $t_auto s for 100 kB, wanted less than $limit s"
    awk -v a="$t_auto" -v s="$t_ssh" -v l="$((3 + SLOW))" 'BEGIN { exit !(a - s < l) }' ||
        fail "auto behind DROP took $t_auto s, --data-via ssh $t_ssh s: the fallback waited more than $((3 + SLOW)) s"
    log "100 kB behind DROP: auto $t_auto s, --data-via ssh $t_ssh s"
}

# EARLY: -v's line when the look at the direct path during the login got
# no answer (for 0.15 s at most, or until the far end answered the first
# flight) and the streams through ssh start then.
# It comes within 0.15 s of the probe's start in a two-party copy; in -3 the
# second host's comes once the first host is READY, and says how long.
EARLY='^pcopy: no answer from [^ ]+ to a look at the direct path within 0\.[0-4][0-9] s; the data streams through ssh start now, in case$'
EARLY_ANY='^pcopy: no answer from [^ ]+ to a look at the direct path within [0-9]+\.[0-9]{2} s; the data streams through ssh start now, in case$'

# auto behind DROP: the look at the direct path (roles/datapath.h) gets no
# answer while the control ssh logs in, so the streams through ssh start
# then, beside it (-v says so), and the copy falls back once, push and
# pull. With -Z the look goes to the range's first port: a firewall that
# lets the range through answers it (refused: nothing listens there yet),
# and the copy goes direct, with no early ssh streams.
case_early() {
    local lo
    firewall_close drop
    mkfile "$T/f" 5M
    mkdir -p "$T/remote" "$T/back"
    forget_hosts
    expect_exit 0 "$PCOPY" -v -s 4 "$T/f" "pctest:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_stderr_matches "$EARLY"
    expect_notice_once "$DIRECT_NOTICE"
    expect_stderr_matches '^pcopy: no direct data connection to .*, nor to an earlier probe\); '
    expect_summary $((5 * 1048576)) 1 4 "$SSH_SUMMARY"
    forget_hosts
    expect_exit 0 "$PCOPY" -v -s 4 "pctest:$T/remote/f" "$T/back/f"
    same_file "$T/f" "$T/back/f"
    expect_stderr_matches "$EARLY"
    expect_notice_once "$DIRECT_NOTICE"
    expect_summary $((5 * 1048576)) 1 4 "$SSH_SUMMARY"
    no_remote_left

    lo=$((40000 + RANDOM % 20000))
    firewall_close drop "$lo-$((lo + 19))"
    forget_hosts
    expect_exit 0 "$PCOPY" -v -s 4 -Z "$lo-$((lo + 19))" "$T/f" "pctest:$T/remote/g"
    same_file "$T/f" "$T/remote/g"
    expect_no_notice
    expect_stderr_lacks "through ssh start now"
    expect_summary $((5 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    no_remote_left
}

# An open link where the look at the direct path is made to get no answer
# (the test fault data_probe): the streams through ssh start early, yet
# the direct connects at READY win, the early streams stop before they
# ever reach the session (no duplicate stream), and nothing falls back.
case_probe_misled() {
    firewall_open
    mkfile "$T/f" 5M
    mkdir -p "$T/remote" "$T/back"
    forget_hosts
    expect_exit 0 env PCOPY_TEST_FAULT=data_probe:1 "$PCOPY" -v -s 4 "$T/f" "pctest:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_stderr_matches "$EARLY"
    expect_no_notice
    # The listener (its stderr comes back through ssh) dropped no stream
    # as a duplicate or a failure: the early streams that reached its attach
    # socket ended before their proofs, which it notes with -v only.
    expect_stderr_lacks "dropped data connection"
    expect_summary $((5 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    expect_exit 0 env PCOPY_TEST_FAULT=data_probe:1 "$PCOPY" -v -s 4 "pctest:$T/remote/f" "$T/back/f"
    same_file "$T/f" "$T/back/f"
    expect_stderr_matches "$EARLY"
    expect_no_notice
    expect_summary $((5 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    no_remote_left
    # Nothing remembers a fallback: the next copy races again.
    [[ ! -s $XDG_CACHE_HOME/pcopy/direct-failed ]] ||
        fail "a copy that went direct left the host in the fallback memo"
}

# An open link whose round trip is longer than the look's wait (the test
# fault data_probe_slow: its answer is seen only 0.5 s after it left): the
# streams through ssh start early, and the late answer stops them at once,
# while the far end is still starting (held 2 s here by a --remote-pcopy
# wrapper, so that the answer comes before READY, as it does across a
# real link, where a login takes many round trips), not at READY. The
# copy goes direct.
case_probe_slow() {
    local wrap=$T/slow-start
    firewall_open
    mkfile "$T/f" 3M
    mkdir -p "$T/remote"
    printf '#!/bin/sh\ncase " $* " in *" --server "*) sleep 2 ;; esac\nexec %q "$@"\n' \
        "$PCOPY" >"$wrap"
    chmod 755 "$wrap"
    forget_hosts
    # -w: the streams' ssh's connect through `pcopy --ssh-dial`, which
    # gives up its connect when its ssh is stopped.
    expect_exit 0 env PCOPY_TEST_FAULT=data_probe_slow:1 "$PCOPY" -vv -s 4 -w 1M \
        --remote-pcopy "$wrap" "$T/f" "pctest:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_stderr_matches "$EARLY"
    expect_stderr_matches '^pcopy: [^ ]+ answered the look at the direct path after all; the data streams through ssh stop$'
    # Stopped at the answer, not at READY.
    awk '/answered the look at the direct path after all/ && !ready { ok = 1 }
         /^pcopy: received READY from/ { ready = 1 }
         END { exit !ok }' "$LAST_STDERR" ||
        fail "the early streams did not stop before READY: $(grep -E 'after all|received READY' "$LAST_STDERR")"
    expect_no_notice
    expect_stderr_lacks "dropped data connection"
    expect_summary $((3 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    no_remote_left
    [[ ! -s $XDG_CACHE_HOME/pcopy/direct-failed ]] ||
        fail "a copy that went direct left the host in the fallback memo"
}

# An open link where a stream through ssh gets the listener's proof before
# any direct connect completes (the test fault data_late: as when the
# direct connects' first SYNs were lost, and ssh logged in meanwhile). The
# listener holds that stream, so direct must not win any more (it did: the
# listener dropped the direct stream of the same index as a duplicate, and
# the copy failed): the copy goes through ssh and says so, push (-s 4) and
# pull (-s 1).
case_proof_first() {
    local streams from to
    firewall_open
    mkfile "$T/f" 3M
    mkdir -p "$T/remote" "$T/back"
    for streams in 4 1; do
        from=$T/f to=pctest:$T/remote/f
        [[ $streams == 4 ]] || from=pctest:$T/remote/f to=$T/back/f
        forget_hosts
        expect_exit 0 env PCOPY_TEST_FAULT=data_late:1 "$PCOPY" -s "$streams" "$from" "$to"
        same_file "$T/f" "${to#pctest:}"
        expect_notice_once "$DIRECT_NOTICE"
        expect_stderr_lacks "dropped data connection"
        expect_summary $((3 * 1048576)) 1 "$streams" "$SSH_SUMMARY"
    done
    forget_hosts
    no_remote_left
}

# --data-via ssh through the closed firewall: no direct attempt at all, so
# no notice is needed; --data-via direct fails as pcopy did before (exit
# 10, "cannot reach"), and a dead host is still ssh's error (exit 5).
case_via_ssh() {
    firewall_close drop
    push_pull_20m "$T" --data-via ssh
    expect_stderr_lacks "no direct data connection"
    LAST_STDERR=$PUSH_STDERR
    expect_stderr_lacks "no direct data connection"
    firewall_close reject
    expect_exit 10 "$PCOPY" --data-via direct -s 4 "$T/f" "pctest:$T/remote/direct"
    expect_stderr_contains "cannot reach"
    expect_no_notice
    [[ ! -e $T/remote/direct ]] || fail "--data-via direct created $T/remote/direct"
    expect_exit 5 "$PCOPY" --data-via ssh "$T/f" "dead:$T/remote/dead"
    expect_stderr_contains "port 22: Connection refused"
    no_remote_left
    # While a pull through ssh streams runs (held to about 4 s by
    # --bwlimit), far listens on nothing new but loopback: its sessions'
    # attach socket is a Unix socket, and no TCP listener is opened.
    "$PCOPY" --data-via ssh -s 4 -x 5M "pctest:$T/f" "$T/pulled.slow" 2>"$T/slow.err" &
    local cpid=$! listen
    wait_until 20 _far_has_session || fail "no remote pcopy appeared for the slow pull"
    listen=$(ip netns exec "$NS_FAR" ss -Hltn | awk '{ print $4 }' | sort -u | tr '\n' ' ')
    wait_exit 60 "$cpid" || fail "the slow pull did not finish"
    [[ $WAIT_RC -eq 0 ]] || fail "the slow pull exited with $WAIT_RC: $(cat "$T/slow.err")"
    same_file "$T/f" "$T/pulled.slow"
    for a in $listen; do
        [[ $a == *:22 || $a == 127.0.0.1:* || $a == \[::1\]:* ]] ||
            fail "during a copy through ssh streams far listened on $a (all: $listen)"
    done
}

_far_has_session() {
    [[ -n $(sshd_remote_pids) ]]
}

# A tree with -r through the closed firewall.
case_tree() {
    local d=$T/tree
    firewall_close drop
    mkdir -p "$d/a/b/c" "$d/empty" "$d/x" "$T/remote"
    mkfile "$d/top" 3M
    mkfile "$d/a/one" 100000
    mkfile "$d/a/b/two" 1
    : >"$d/a/b/c/zero"
    mkfile "$d/x/three" 2M
    expect_exit 0 "$PCOPY" -r -s 4 "$d" "pctest:$T/remote/"
    expect_notice_once "$DIRECT_NOTICE"
    diff -r "$d" "$T/remote/tree" >"$T/diff.out" 2>&1 || {
        sed 's/^/  diff: /' "$T/diff.out" >&2
        fail "the tree pushed through the firewall differs (diff -r)"
    }
    no_remote_left
}

# Third party h1 -> h2 where h1 cannot reach h2's data port (see the top):
# h1 sends through ssh itself. With -3 the data is relayed through here,
# which reaches neither data port, so through ssh to both.
case_third_party() {
    firewall_close drop
    mkdir -p "$T/src" "$T/dst"
    mkfile "$T/src/f" 10M
    mkfile "$T/src/g" 4097
    expect_exit 0 "$PCOPY" -s 4 "h1:$T/src/f" "h1:$T/src/g" "h2:$T/dst/"
    same_file "$T/src/f" "$T/dst/f"
    same_file "$T/src/g" "$T/dst/g"
    # h1's notice, relayed by the client: its prefix is not pinned down.
    expect_notice_once
    no_remote_left
    # -3: each host's probe waits while both logins run (the second ssh
    # does not wait for the first host's probe); both start early streams.
    expect_exit 0 "$PCOPY" -3 -v -s 4 "h1:$T/src/f" "h2:$T/dst/relayed"
    same_file "$T/src/f" "$T/dst/relayed"
    [[ $(grep -Ec "$EARLY_ANY" "$LAST_STDERR") -eq 2 ]] ||
        fail "-3 behind DROP: wanted the early-streams line once for each host: $(cat "$LAST_STDERR")"
    # Once, or once for each host.
    expect_notice_lines 1 2
    no_temp_files "$T/dst"
    no_remote_left
}

# A missing source through the firewall: exit 3 (pcopy(1): some files were
# not copied), naming it; the other source still arrives, through ssh.
case_missing_source() {
    firewall_close drop
    mkdir -p "$T/remote" "$T/back"
    mkfile "$T/present" 3M
    expect_exit 3 "$PCOPY" -s 4 "$T/present" "$T/nosuch" "pctest:$T/remote/"
    expect_stderr_contains "$T/nosuch"
    same_file "$T/present" "$T/remote/present"
    expect_notice_once "$DIRECT_NOTICE"
    [[ ! -e $T/remote/nosuch ]] || fail "$T/remote/nosuch was created"
    forget_hosts
    expect_exit 3 "$PCOPY" -s 4 "pctest:$T/remote/present" "pctest:$T/remote/gone" "$T/back/"
    expect_stderr_contains "$T/remote/gone"
    same_file "$T/present" "$T/back/present"
    expect_notice_once "$DIRECT_NOTICE"
    [[ ! -e $T/back/gone ]] || fail "$T/back/gone was created"
    no_temp_files "$T/remote"
    no_temp_files "$T/back"
    no_remote_left
}

# A dead host (nothing listens on its ssh port) behind the closed firewall:
# ssh's own error and exit 5 (pcopy(1): the other end could not be
# reached), quickly, and no notice (it is no firewall). Passes today too:
# the fallback must not change it.
case_dead_host() {
    local start
    firewall_close drop
    mkfile "$T/f" 1000
    mkdir -p "$T/back"
    start=$(now)
    expect_exit 5 "$PCOPY" -s 4 "$T/f" "dead:$T/remote-f"
    expect_stderr_contains "port 22: Connection refused"
    expect_no_notice
    expect_exit 5 "$PCOPY" -s 4 "dead:$T/f" "$T/back/f"
    expect_stderr_contains "port 22: Connection refused"
    expect_no_notice
    quicker_than $((2 + 2 * SLOW)) "$start" "two copies with a dead host"
    [[ ! -e $T/remote-f && ! -e $T/back/f ]] || fail "a file was created"
}

# Far's inner address through the bastion (ProxyJump in the ssh config):
# auto goes through ssh at once (the notice says proxy), no slower than
# --data-via ssh, though a direct connection would get no answer.
case_bastion() {
    local t_ssh t_push t_pull
    firewall_close drop
    mkdir -p "$T/remote" "$T/back"
    mkfile "$T/f" 10M
    timed_copy t_ssh 0 "$PCOPY" --data-via ssh -s 4 "$T/f" "inner:$T/remote/via-ssh"
    same_file "$T/f" "$T/remote/via-ssh"
    timed_copy t_push 0 "$PCOPY" -s 4 "$T/f" "inner:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_notice_once "$PROXY_NOTICE"
    expect_summary $((10 * 1048576)) 1 4 "$SSH_SUMMARY"
    timed_copy t_pull 0 "$PCOPY" -s 4 "inner:$T/remote/f" "$T/back/f"
    same_file "$T/f" "$T/back/f"
    expect_notice_once "$PROXY_NOTICE"
    log "10 MiB through the bastion: --data-via ssh $t_ssh s, auto push $t_push s, pull $t_pull s"
    awk -v a="$t_push" -v s="$t_ssh" -v l="$((1 + SLOW))" 'BEGIN { exit !(a - s < l) }' ||
        fail "auto through the bastion took $t_push s, --data-via ssh $t_ssh s: it waited for a direct connection"
    no_remote_left
}

# A host whose direct connections failed is remembered for an hour
# (hashed, in the user's cache): the next copy goes through ssh at once and
# says so; it does not renew the memory. Once the hour is over, the race
# runs again: on a link that opened, direct wins and the host is forgotten.
case_remembered() {
    local memo=$XDG_CACHE_HOME/pcopy/direct-failed
    firewall_close drop
    mkdir -p "$T/remote"
    mkfile "$T/f" 4M
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "pctest:$T/remote/f1"
    same_file "$T/f" "$T/remote/f1"
    expect_notice_once "$DIRECT_NOTICE"
    [[ -f $memo ]] || fail "no $memo after a fallback"
    [[ $(stat -c %a "$memo") == 600 ]] || fail "$memo has mode $(stat -c %a "$memo"), not 600"
    [[ $(wc -l <"$memo") -eq 1 ]] || fail "$memo: $(cat "$memo")"
    grep -Eq '^[0-9a-f]{64} [0-9]+$' "$memo" || fail "$memo: $(cat "$memo")"
    ! grep -q -e "$FAR" -e pctest "$memo" || fail "$memo names the host in clear"
    cp "$memo" "$T/memo.1"

    expect_exit 0 "$PCOPY" -s 4 --json "$T/f" "pctest:$T/remote/f2" >"$T/j2"
    same_file "$T/f" "$T/remote/f2"
    expect_notice_once "^pcopy: no direct data connection to pctest [0-9]+ min ago; $NOTICE\$"
    expect_summary $((4 * 1048576)) 1 4 "$SSH_SUMMARY"
    grep -q '"data_via":"ssh","data_via_reason":"no direct data connection to pctest [0-9]* min ago"' "$T/j2" ||
        grep -Eq '"data_via": ?"ssh"' "$T/j2" || fail "--json does not say the data went through ssh: $(cat "$T/j2")"
    cmp -s "$memo" "$T/memo.1" || fail "the remembered fallback rewrote $memo"

    # Within the hour an opened firewall changes nothing yet.
    firewall_open
    expect_exit 0 "$PCOPY" -s 4 "$T/f" "pctest:$T/remote/f3"
    same_file "$T/f" "$T/remote/f3"
    expect_notice_once "min ago; $NOTICE\$"
    # An hour later: the race again, which direct wins, and the host is forgotten.
    sed -i -E "s/ [0-9]+\$/ $(($(date +%s) - 3601))/" "$memo"
    expect_exit 0 "$PCOPY" -v -s 4 "$T/f" "pctest:$T/remote/f4"
    same_file "$T/f" "$T/remote/f4"
    expect_no_notice
    expect_summary $((4 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    [[ ! -s $memo ]] || fail "$memo still remembers the host after a direct copy: $(cat "$memo")"
    no_remote_left
}

# _dialed N RB TB: N established connections from here to far's port 22
# have socket buffers RB (receive) and TB (send), as ss shows them.
_dialed() {
    local n
    n=$(ss -tnmH state established dst "$FAR" dport = :22 | grep -c "rb$2,.*tb$3,") || true
    [[ $n -eq $1 ]]
}

# -w through ssh: each data stream's ssh gets its TCP connection from
# `pcopy --ssh-dial` (ProxyUseFdpass) with the window asked for, as a
# direct stream would; the control channel's ssh connects by itself. ss
# shows it while the copy waits for the rest of its input. Without -w,
# every ssh connects by itself. The data ssh's also put AES-GCM first
# where the CPU has AES instructions.
case_dial_window() {
    local pid rb tb w=1048576
    firewall_close drop
    mkdir -p "$T/remote"
    # What the kernel grants an unprivileged SO_RCVBUF/SO_SNDBUF of $w.
    rb=$((2 * ($(sysctl -n net.core.rmem_max) < w ? $(sysctl -n net.core.rmem_max) : w)))
    tb=$((2 * ($(sysctl -n net.core.wmem_max) < w ? $(sysctl -n net.core.wmem_max) : w)))
    slow_producer "$T/fifo" 3M 60 "$T/in"
    "$PCOPY" -vv --data-via ssh -s 4 -w "$w" - "pctest:$T/remote/f" <"$T/fifo" 2>"$T/err" &
    pid=$!
    track_pid "$pid"
    wait_until 20 _dialed 4 "$rb" "$tb" ||
        fail "not 4 ssh connections with rb$rb/tb$tb: $(ss -tnmH state established dst "$FAR" dport = :22 | tr '\n' ' ')"
    _dialed 5 "$rb" "$tb" && fail "the control channel's ssh got the window too"
    # On a CPU with AES instructions the data ssh's prefer AES-GCM (the
    # test's ssh config leaves OpenSSH's default cipher order); the
    # control ssh keeps the user's choice.
    local gcm
    # Only our own pcopy's ssh's: other tests may run ssh meanwhile.
    gcm=$(pgrep -c -P "$pid" -f -- "-o Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,") || true
    if grep -qw aes /proc/cpuinfo; then
        [[ $gcm -eq 4 ]] || fail "$gcm data ssh's prefer aes128-gcm, not 4: $(pgrep -a -P "$pid")"
    else
        [[ $gcm -eq 0 ]] || fail "without AES instructions $gcm data ssh's still prefer aes128-gcm"
    fi
    kill "$PRODUCER_PID"
    wait_exit 30 "$pid" || fail "pcopy did not finish after its input ended"
    [[ $WAIT_RC -eq 0 ]] || fail "pcopy exited with $WAIT_RC: $(cat "$T/err")"
    same_file "$T/in" "$T/remote/f"
    grep -q "pcopy connects them, window $w" "$T/err" || fail "-vv does not say that pcopy connects the streams"
    expect_exit 0 "$PCOPY" -vv --data-via ssh -s 2 "$T/in" "pctest:$T/remote/g"
    same_file "$T/in" "$T/remote/g"
    expect_stderr_lacks "pcopy connects them"
    # Not a command for people: its output must be ssh's socket.
    expect_exit 1 "$PCOPY" --ssh-dial "$FAR" 22
    expect_stderr_contains "--ssh-dial is ssh's ProxyCommand with ProxyUseFdpass"
    no_remote_left
}

# The open link: auto never falls back, and -v says nothing of ssh data.
case_open_link() {
    firewall_open
    mkdir -p "$T/remote" "$T/back"
    mkfile "$T/f" 20M
    expect_exit 0 "$PCOPY" -v -s 4 "$T/f" "pctest:$T/remote/f"
    same_file "$T/f" "$T/remote/f"
    expect_no_notice
    expect_stderr_lacks "(ssh)"
    expect_stderr_lacks "through ssh"
    # -v: the data went in TLS over its own connections.
    expect_stderr_matches '^pcopy: .*data encrypted \(TLS'
    expect_summary $((20 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    expect_exit 0 "$PCOPY" -v -s 4 "pctest:$T/remote/f" "$T/back/f"
    same_file "$T/f" "$T/back/f"
    expect_no_notice
    expect_stderr_lacks "(ssh)"
    expect_stderr_lacks "through ssh"
    # -v: the data went in TLS over its own connections.
    expect_stderr_matches '^pcopy: .*data encrypted \(TLS'
    expect_summary $((20 * 1048576)) 1 4 'encrypted \(TLS[^)]*\)'
    # -3: the second host's probe was answered while the first host got
    # READY; its answer counts even though its control channel has spoken
    # by then: no early streams for either host.
    mkdir -p "$T/relayed"
    expect_exit 0 "$PCOPY" -3 -v -s 4 "h1:$T/f" "h2:$T/relayed/f"
    same_file "$T/f" "$T/relayed/f"
    expect_no_notice
    expect_stderr_lacks "through ssh start now"
    expect_stderr_lacks "answered the look at the direct path after all"
    no_remote_left
}

run_case sanity case_sanity
run_case auto-drop case_auto_drop
run_case auto-reject case_auto_reject
run_case drop-quick case_drop_quick
run_case early case_early
run_case probe-misled case_probe_misled
run_case probe-slow case_probe_slow
run_case proof-first case_proof_first
run_case via-ssh case_via_ssh
run_case tree case_tree
run_case third-party case_third_party
run_case missing-source case_missing_source
run_case dead-host case_dead_host
run_case bastion case_bastion
run_case open-link case_open_link
run_case dial-window case_dial_window
run_case remembered case_remembered
finish
