# SPDX-License-Identifier: Apache-2.0
# sshd.sh: a private sshd for the ssh end-to-end tests.
#
# An ssh test starts with
#
#   source "$PCOPY_TEST_LIB"
#   source "${PCOPY_TEST_LIB%/*}/sshd.sh"
#   sshd_start                      # or: sshd_start NETNS ADDR...
#
# in its main shell (not inside a case), so that every case uses the same
# sshd. sshd_start makes, under $T/sshd.N/: a host key, a key pair for root,
# an authorized_keys file, bin/pcopy (a symbolic link to $PCOPY), an
# sshd_config and an ssh_config, and starts /usr/sbin/sshd on a free port.
# Every session of that sshd has bin/ first on its PATH, so the remote
# `pcopy` is the binary under test. The sshd serves the sftp subsystem, so
# that scp (SFTP by default since OpenSSH 9) works against it too.
#
# Before sshd_start, a test may set
#   SSHD_FIXED_PORT   listen on this port instead of a free one (for an sshd
#                     in a network namespace of the test's own, where no
#                     one else can take it: e.g. 22)
#   SSHD_MORE_ADDRS   (an array) more addresses to listen on that this
#                     namespace may not reach: they get no Host entry and
#                     no login check (the target of a ProxyJump)
#   SSHD_MORE_CONFIG  (an array) more lines for its sshd_config (e.g.
#                     "DisableForwarding yes"); not for the bastion's
#
# After it, the client's ssh reaches that sshd as root through these names:
#   pctest, h1, h2   the first address (two names for one host, so that a
#                    third-party copy has two "hosts")
#   pctest4          the first IPv4 address, if any
#   pctest6          the first IPv6 address, if any
#   each address     as itself: 127.0.0.1, ::1, 10.99.7.2 ...
# It sets:
#   PCOPY_RSH        "ssh -F $SSH_CONFIG", exported: what pcopy runs
#   SSH_CONFIG       the client's config
#   SSH_KEY          root's private key
#   SSHD_PID SSHD_PORT SSHD_LOG SSHD_DIR SSHD_NETNS SSHD_ADDRS (an array)
# Helpers:
#   sshd_remote_pids [ERE]  the processes the sshd's sessions run whose
#                           command line matches ERE (default: the remote
#                           pcopy, "--server")
#   sshd_no_remote_pcopy    true when no remote pcopy runs (for wait_until)
#   sshd_sessions           how many processes run under the sshd
#   proc_descendants PID    every descendant of PID
#   sshd_at_exit CMD...     run CMD at exit, after the sshds are stopped
#   sshd_bastion_start NETNS ADDR
#                           a second sshd, on ADDR port 22 in NETNS, that
#                           takes the same key and runs no pcopy: a jump
#                           host, reached by the name "bastion"
#   ssh_config_host NAME KEY VALUE...
#                           add "Host NAME" with these settings to the
#                           client's config, e.g. ProxyJump bastion
#
# The EXIT trap of lib.sh is chained, not replaced: at exit this file first
# stops every sshd it started together with all its sessions (the remote
# pcopy processes too), runs the commands given to sshd_at_exit (last
# first), and then lib.sh's cleanup removes the scratch directory.
#
# A missing /usr/sbin/sshd fails the test: CI installs openssh-server, and
# the ssh tests are never skipped.

[[ -n ${_LIB_STATE-} ]] || { echo "FAIL: source lib.sh before sshd.sh" >&2; exit 1; }

SSHD_BIN=/usr/sbin/sshd
# State in the test's top scratch directory (T as it is now, not a case's),
# so that the EXIT trap of the main shell finds what a case started.
_SSHD_STATE=$T/.sshd
mkdir -p "$_SSHD_STATE"
: >"$_SSHD_STATE/pids"
: >"$_SSHD_STATE/atexit"
_SSHD_N=0

SSHD_PID='' SSHD_PORT='' SSHD_LOG='' SSHD_DIR='' SSHD_NETNS='' SSH_CONFIG='' SSH_KEY=''
SSHD_ADDRS=()
: "${SSHD_FIXED_PORT:=}"
[[ -n ${SSHD_MORE_ADDRS+set} ]] || SSHD_MORE_ADDRS=()
[[ -n ${SSHD_MORE_CONFIG+set} ]] || SSHD_MORE_CONFIG=()
BASTION_PID='' BASTION_ADDR='' BASTION_LOG=''
SSHD_LAUNCH_TRIES=0

# sshd_at_exit CMD...: run CMD when the test exits, after the sshds are
# stopped and before the scratch directory is removed. Commands run in the
# reverse order of registration; their failures are ignored.
sshd_at_exit() {
    printf '%q ' "$@" >>"$_SSHD_STATE/atexit"
    printf '\n' >>"$_SSHD_STATE/atexit"
}

# netns_peer TAG: a network namespace pcTAG<pid> joined to this one by a
# veth pair (pcTAG<pid>a here, pcTAG<pid>b there), both up, in a
# 10.99.N.0/24 of our own (tests running in parallel each take theirs).
# Sets NS, VETH_HERE, VETH_THERE, N, HERE (this side, .1) and THERE (the
# namespace's, .2); the pair and the namespace go when the test exits,
# after its sshds.
netns_peer() {
    NS=pc$1$$
    VETH_HERE=pc$1$$a
    VETH_THERE=pc$1$$b
    [[ ${#VETH_HERE} -le 15 ]] || fail "interface name $VETH_HERE is too long"
    command -v ip >/dev/null || fail "ip (iproute2) is missing (tools/install-deps installs it)"
    N=$(free_test_subnet) || fail "every 10.99.N.0/24 from N=20 to 219 is in use"
    HERE=10.99.$N.1
    THERE=10.99.$N.2
    sshd_at_exit ip link del "$VETH_HERE"
    sshd_at_exit ip netns del "$NS"
    ip netns add "$NS" || fail "cannot create the network namespace $NS (the test needs root)"
    ip link add "$VETH_HERE" type veth peer name "$VETH_THERE" ||
        fail "cannot create the veth pair $VETH_HERE"
    ip link set "$VETH_THERE" netns "$NS"
    ip addr add "$HERE/24" dev "$VETH_HERE"
    ip link set "$VETH_HERE" up
    ip -n "$NS" addr add "$THERE/24" dev "$VETH_THERE"
    ip -n "$NS" link set "$VETH_THERE" up
    ip -n "$NS" link set lo up
}

# _sshd_in_ns CMD...: run CMD in the sshd's network namespace, if any.
_sshd_in_ns() {
    if [[ -n $SSHD_NETNS ]]; then
        ip netns exec "$SSHD_NETNS" "$@"
    else
        "$@"
    fi
}

# proc_descendants PID: every descendant of PID, parents before children.
proc_descendants() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do
        echo "$c"
        proc_descendants "$c"
    done
}

# sshd_remote_pids [PATTERN]: the processes run by sessions of the current
# sshd whose command line matches PATTERN (an ERE, default: pcopy's server
# side, "--server"). These are the remote ends of pcopy.
sshd_remote_pids() {
    local pat=${1:---server} p cmd
    [[ -n $SSHD_PID ]] || return 0
    for p in $(proc_descendants "$SSHD_PID"); do
        cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
        if [[ $cmd =~ $pat ]]; then
            echo "$p"
        fi
    done
    return 0
}

# sshd_no_remote_pcopy: no remote pcopy runs under the current sshd.
sshd_no_remote_pcopy() {
    [[ -z $(sshd_remote_pids) ]]
}

# sshd_sessions: the number of processes under the current sshd (0 when no
# session is open).
sshd_sessions() {
    proc_descendants "$SSHD_PID" | wc -l
}

# _sshd_listening PID PORT N: PID listens on PORT on N addresses.
_sshd_listening() {
    local n
    n=$(_sshd_in_ns ss -Hltnp "sport = :$2" 2>/dev/null | grep -c "pid=$1," || true)
    [[ $n -ge $3 ]]
}

# _sshd_settled PID PORT N LOG: sshd PID listens on PORT on N addresses, or
# has exited, or could not bind one of them (it says so in LOG).
_sshd_settled() {
    proc_gone "$1" || _sshd_listening "$1" "$2" "$3" || grep -q "Bind to port $2 " "$4" 2>/dev/null
}

# _sshd_write_configs DIR PORT: write DIR/sshd_config and DIR/ssh_config.
_sshd_write_configs() {
    local dir=$1 port=$2 a v first4='' first6='' setenv
    # The remote pcopy finds the binary under test first; the sanitizer
    # options of this test reach it too, since ssh passes no environment.
    setenv="PATH=$dir/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS LSAN_OPTIONS; do
        if [[ -n ${!v-} ]]; then
            setenv+=" \"$v=${!v}\""
        fi
    done
    {
        echo "# sshd for $TEST_NAME ($$); written by tests/e2e/sshd.sh"
        echo "Port $port"
        for a in "${SSHD_ADDRS[@]}" "${SSHD_MORE_ADDRS[@]}"; do
            echo "ListenAddress $a"
        done
        echo "HostKey $dir/host_ed25519"
        echo "PidFile $dir/sshd.pid"
        echo "AuthorizedKeysFile $dir/authorized_keys"
        echo "PermitRootLogin prohibit-password"
        echo "PubkeyAuthentication yes"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "UsePAM no"
        echo "StrictModes no"
        echo "PermitUserEnvironment no"
        echo "PrintMotd no"
        echo "PrintLastLog no"
        echo "X11Forwarding no"
        echo "LoginGraceTime 30"
        echo "MaxStartups 100:30:200"
        echo "LogLevel ERROR"
        # scp of OpenSSH 9 speaks SFTP unless given -O.
        echo "Subsystem sftp /usr/lib/openssh/sftp-server"
        # sshd accepts no variable from the client (there is no AcceptEnv).
        echo "SetEnv $setenv"
        for a in "${SSHD_MORE_CONFIG[@]}"; do
            echo "$a"
        done
    } >"$dir/sshd_config"

    for a in "${SSHD_ADDRS[@]}"; do
        if [[ $a == *:* ]]; then
            [[ -n $first6 ]] || first6=$a
        else
            [[ -n $first4 ]] || first4=$a
        fi
    done
    {
        echo "# ssh client config for $TEST_NAME ($$); written by tests/e2e/sshd.sh"
        echo "Host pctest h1 h2"
        echo "    HostName ${SSHD_ADDRS[0]}"
        if [[ -n $first4 ]]; then
            echo "Host pctest4"
            echo "    HostName $first4"
        fi
        if [[ -n $first6 ]]; then
            echo "Host pctest6"
            echo "    HostName $first6"
        fi
        for a in "${SSHD_ADDRS[@]}"; do
            echo "Host $a"
            echo "    HostName $a"
        done
        echo "Host *"
        echo "    Port $port"
        echo "    User root"
        echo "    IdentityFile $dir/id_ed25519"
        echo "    IdentitiesOnly yes"
        echo "    StrictHostKeyChecking no"
        echo "    UserKnownHostsFile /dev/null"
        echo "    GlobalKnownHostsFile /dev/null"
        echo "    LogLevel ERROR"
        echo "    BatchMode yes"
        echo "    ConnectTimeout $((10 * SLOW))"
        echo "    ControlMaster no"
        echo "    ControlPath none"
    } >"$dir/ssh_config"
}

# _sshd_launch DIR NETNS: start sshd with DIR/sshd_config (written here) in
# NETNS (if not empty) on SSHD_ADDRS and SSHD_MORE_ADDRS, on port
# SSHD_FIXED_PORT or a free one, and wait until it listens on all of them.
# Sets SSHD_PID and SSHD_PORT; fails if it never listens.
_sshd_launch() {
    local dir=$1 netns=$2 try tries=5 naddrs
    naddrs=$((${#SSHD_ADDRS[@]} + ${#SSHD_MORE_ADDRS[@]}))
    [[ -z $SSHD_FIXED_PORT ]] || tries=1
    SSHD_PID=
    for ((try = 0; try < tries; try++)); do
        SSHD_PORT=${SSHD_FIXED_PORT:-$(free_port)}
        _sshd_write_configs "$dir" "$SSHD_PORT"
        "$SSHD_BIN" -t -f "$dir/sshd_config" 2>"$dir/sshd_check.log" || {
            sed 's/^/  sshd -t: /' "$dir/sshd_check.log" >&2
            fail "sshd rejects the config $dir/sshd_config"
        }
        # sshd must be started by its absolute path (it re-executes itself).
        if [[ -n $netns ]]; then
            ip netns exec "$netns" "$SSHD_BIN" -D -e -f "$dir/sshd_config" 2>>"$SSHD_LOG" &
        else
            "$SSHD_BIN" -D -e -f "$dir/sshd_config" 2>>"$SSHD_LOG" &
        fi
        SSHD_PID=$!
        echo "$SSHD_PID $(_starttime "$SSHD_PID")" >>"$_SSHD_STATE/pids"
        # Another test may take the port meanwhile: then sshd exits (or,
        # with one of its addresses left, runs on the others), and we try
        # another port.
        if wait_until 20 _sshd_settled "$SSHD_PID" "$SSHD_PORT" "$naddrs" "$SSHD_LOG" &&
            _sshd_listening "$SSHD_PID" "$SSHD_PORT" "$naddrs"; then
            SSHD_LAUNCH_TRIES=$((try + 1))
            return 0
        fi
        _sshd_stop "$SSHD_PID"
        SSHD_PID=
    done
    sed 's/^/  sshd: /' "$SSHD_LOG" >&2
    fail "sshd did not start listening on port $SSHD_PORT of ${SSHD_ADDRS[*]} ${SSHD_MORE_ADDRS[*]}${netns:+ in netns $netns}"
}

# sshd_start [NETNS [ADDR...]]: start an sshd (in network namespace NETNS if
# it is not empty) listening on ADDR... (default 127.0.0.1 and ::1), and on
# SSHD_MORE_ADDRS, wait until it accepts logins, and check that the remote
# `pcopy` is $PCOPY. Sets the variables listed at the top of this file.
sshd_start() {
    local netns=${1-} dir path start
    shift || true
    start=$(now)
    if [[ ! -x $SSHD_BIN ]]; then
        fail "$SSHD_BIN is missing: the ssh tests need openssh-server (tools/install-deps installs it)"
    fi
    command -v ssh >/dev/null || fail "ssh is missing: the ssh tests need openssh-client"
    command -v ssh-keygen >/dev/null || fail "ssh-keygen is missing: the ssh tests need openssh-client"
    SSHD_NETNS=$netns
    if [[ $# -gt 0 ]]; then
        SSHD_ADDRS=("$@")
    else
        SSHD_ADDRS=(127.0.0.1 ::1)
    fi
    _SSHD_N=$((_SSHD_N + 1))
    dir=$T/sshd.$_SSHD_N
    # PCOPY_RSH is split on spaces, so the config's path may not have any.
    [[ $dir != *[[:space:]]* ]] || fail "the scratch directory '$dir' has white space in it"
    rm -rf "$dir"
    mkdir -p "$dir/bin"
    SSHD_DIR=$dir
    SSHD_LOG=$dir/sshd.log
    SSH_CONFIG=$dir/ssh_config
    SSH_KEY=$dir/id_ed25519

    ssh-keygen -q -t ed25519 -N '' -C "pcopy-test-host" -f "$dir/host_ed25519" ||
        fail "ssh-keygen could not make a host key"
    ssh-keygen -q -t ed25519 -N '' -C "pcopy-test-root" -f "$SSH_KEY" ||
        fail "ssh-keygen could not make a user key"
    cp "$SSH_KEY.pub" "$dir/authorized_keys"
    ln -s "$(readlink -f "$PCOPY")" "$dir/bin/pcopy"
    # sshd checks that its privilege separation directory exists.
    mkdir -p /run/sshd
    chmod 0755 /run/sshd

    _sshd_launch "$dir" "$netns"

    export PCOPY_RSH="ssh -F $SSH_CONFIG"
    # A login on every name, and the remote pcopy is ours.
    local name names=(pctest h1 h2 "${SSHD_ADDRS[@]}")
    for name in "${names[@]}"; do
        path=$(timeout $((30 * SLOW)) ssh -F "$SSH_CONFIG" "$name" 'command -v pcopy' \
            </dev/null 2>"$dir/login.err") || {
            sed 's/^/  ssh: /' "$dir/login.err" >&2
            sed 's/^/  sshd: /' "$SSHD_LOG" >&2
            fail "cannot log in as root to $name (sshd on ${SSHD_ADDRS[*]} port $SSHD_PORT${netns:+ in netns $netns})"
        }
        [[ $path == "$dir/bin/pcopy" ]] ||
            fail "the remote pcopy on $name is '$path', not $dir/bin/pcopy (a login script changes PATH?)"
    done
    log "sshd $SSHD_PID on ${SSHD_ADDRS[*]}${SSHD_MORE_ADDRS[*]:+ ${SSHD_MORE_ADDRS[*]}} port $SSHD_PORT${netns:+ in netns $netns}, up in $(secs_since "$start") s ($SSHD_LAUNCH_TRIES tries); PCOPY_RSH=$PCOPY_RSH"
}

# ssh_config_host NAME KEY VALUE [KEY VALUE...]: put a "Host NAME" block
# with these settings at the top of $SSH_CONFIG (ssh takes the first value
# it finds, so they win over "Host *" at the end, which still gives the
# port, user and key). E.g.: ssh_config_host inner HostName 10.0.0.2
# ProxyJump bastion.
ssh_config_host() {
    local name=$1 tmp
    shift
    [[ -n $SSH_CONFIG && -f $SSH_CONFIG ]] || fail "ssh_config_host: call sshd_start first"
    (($# > 0 && $# % 2 == 0)) || fail "ssh_config_host $name: settings come as KEY VALUE pairs"
    tmp=$SSH_CONFIG.new
    {
        echo "Host $name"
        while (($# > 0)); do
            echo "    $1 $2"
            shift 2
        done
        cat "$SSH_CONFIG"
    } >"$tmp"
    mv "$tmp" "$SSH_CONFIG"
}

# sshd_bastion_start NETNS ADDR: start a second sshd, in network namespace
# NETNS on ADDR port 22, to be a jump host (ProxyJump): it lets in the key
# of the sshd of sshd_start (call that first), allows TCP forwarding (the
# default), and has no pcopy on its PATH, as a bastion would not. Adds
# "Host bastion" (HostName ADDR) to $SSH_CONFIG and checks a login through
# it. Sets BASTION_PID, BASTION_ADDR and BASTION_LOG; the sshd is stopped
# at exit like the others. The globals of the first sshd stay as they are.
sshd_bastion_start() {
    local netns=$1 addr=$2 dir main_dir=$SSHD_DIR main_config=$SSH_CONFIG
    [[ -n $main_dir ]] || fail "sshd_bastion_start: call sshd_start first"
    # The launcher works on the SSHD_* globals: these shadow them.
    local SSHD_PID='' SSHD_PORT='' SSHD_LOG='' SSHD_DIR='' SSHD_NETNS=$netns
    local SSHD_FIXED_PORT=22 SSH_CONFIG='' SSH_KEY=''
    local SSHD_ADDRS=("$addr") SSHD_MORE_ADDRS=() SSHD_MORE_CONFIG=()
    _SSHD_N=$((_SSHD_N + 1))
    dir=$T/sshd.$_SSHD_N
    rm -rf "$dir"
    mkdir -p "$dir/bin"
    SSHD_DIR=$dir
    SSHD_LOG=$dir/sshd.log
    ssh-keygen -q -t ed25519 -N '' -C "pcopy-test-bastion" -f "$dir/host_ed25519" ||
        fail "ssh-keygen could not make a host key for the bastion"
    cp "$main_dir/authorized_keys" "$dir/authorized_keys"
    _sshd_launch "$dir" "$netns"
    BASTION_PID=$SSHD_PID
    BASTION_ADDR=$addr
    BASTION_LOG=$SSHD_LOG
    SSH_CONFIG=$main_config
    ssh_config_host bastion HostName "$addr" Port 22
    # A login (the shell's `exit 7` comes back), and no pcopy there.
    local rc=0
    timeout $((30 * SLOW)) ssh -F "$SSH_CONFIG" bastion 'command -v pcopy || exit 7' \
        </dev/null >"$dir/login.out" 2>"$dir/login.err" || rc=$?
    if [[ $rc -eq 0 ]]; then
        fail "the bastion finds a pcopy: $(cat "$dir/login.out")"
    elif [[ $rc -ne 7 ]]; then
        sed 's/^/  ssh: /' "$dir/login.err" >&2
        sed 's/^/  sshd: /' "$SSHD_LOG" >&2
        fail "cannot log in as root to the bastion ($addr port 22 in netns $netns; ssh exit $rc)"
    fi
    log "bastion sshd $BASTION_PID on $addr port 22 in netns $netns"
}

# _sshd_stop PID: stop sshd PID and every process under it (its sessions
# and the commands they run): TERM, then KILL after 5 s.
_sshd_stop() {
    local pid=$1 p all left i
    all="$pid $(proc_descendants "$pid")"
    # shellcheck disable=SC2086  # lists of PIDs
    kill -TERM $all 2>/dev/null
    for ((i = 0; i < 100; i++)); do
        left=$(for p in $all; do proc_gone "$p" || echo "$p"; done)
        [[ -z $left ]] && break
        sleep 0.05
    done
    # What is left, and whatever a session started meanwhile.
    left=$(for p in $all $(proc_descendants "$pid"); do proc_gone "$p" || echo "$p"; done)
    # shellcheck disable=SC2086
    [[ -z $left ]] || kill -KILL $left 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

# _sshd_exit: the chained EXIT trap.
_sshd_exit() {
    local rc=$? pid start cmds i
    set +e
    while read -r pid start; do
        [[ -n $pid && -e /proc/$pid && $(_starttime "$pid") == "$start" ]] || continue
        _sshd_stop "$pid"
    done <"$_SSHD_STATE/pids"
    : >"$_SSHD_STATE/pids"
    mapfile -t cmds <"$_SSHD_STATE/atexit"
    for ((i = ${#cmds[@]} - 1; i >= 0; i--)); do
        eval "${cmds[i]}" >/dev/null 2>&1
    done
    : >"$_SSHD_STATE/atexit"
    if [[ -n $_SSHD_PREV_EXIT ]]; then
        # The previous handler reads the exit status from $?.
        (exit "$rc")
        eval "$_SSHD_PREV_EXIT"
    fi
    exit "$rc"
}

_SSHD_PREV_EXIT=
eval "_sshd_trap=($(trap -p EXIT))"
if [[ ${#_sshd_trap[@]} -ge 3 ]]; then
    _SSHD_PREV_EXIT=${_sshd_trap[2]}
fi
unset _sshd_trap
trap _sshd_exit EXIT
