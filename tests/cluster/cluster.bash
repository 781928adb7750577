# An emulated cluster on one Linux machine, for the `cluster` tests (sourced, not run; ctest runs
# only tests/cluster/*.sh):
#   source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
#   cluster_up 2 [RATE]   # nodes mircn0, mircn1 (+ a head where mpirun runs); RATE: tc tbf, e.g. 1gbit
#   cluster_mpirun -np 4 "$train" ...      # mpirun on the head, ranks on the nodes
#   cluster_mirrorrun -np 4 "$train" ...   # launch/mirrorrun --hostfile, the same way
#
# Note [Emulated cluster]
# Each node is a network namespace (`mirc-<id>-n<i>`) with its own loopback and one interface,
# eth0 = 10.77.0.<i+1>/24, the end of a veth pair whose other end sits on a bridge in a
# namespace of its own (`mirc-<id>-sw`, the "switch"). The head (where mpirun runs, like a login
# node) is the switch namespace itself, 10.77.0.254 on the bridge. Open MPI starts its daemons on
# the nodes through $cluster_dir/rsh-agent, an ssh stand-in (plm_rsh_agent) that runs the daemon
# inside the node's namespace, in a UTS namespace of its own whose hostname is the node's name,
# so ranks see different hosts and Open MPI groups them by node (local ranks, shared memory
# inside a node, TCP between nodes). Names resolve through /etc/netns/<ns>/hosts, which
# `ip netns exec` mounts over /etc/hosts. The addresses exist only inside these namespaces;
# nothing outside this machine is addressed. Everything is removed on exit by a trap, also when
# a test fails or is interrupted (and namespaces left by a killed run are removed by the next).
# tc netem (added latency) is often not built into the kernel (it is not on Mirror's CI box);
# links are shaped with tbf (rate) only.
set -u
[ $# -ge 1 ] && [ -d "$1" ] || { echo "usage: $(basename "$0") <build dir>" >&2; exit 2; }
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
train="$build/bin/mirror-train"
bench="$build/bin/mirror-bench"
mirrorrun="$root/launch/mirrorrun"
if [ ! -x "$train" ]; then echo "skip: $train is not built"; exit 77; fi
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# The reason namespaces cannot be used here, or "" when they can.
cluster_unsupported() {
  [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return; }
  command -v ip >/dev/null || { echo "no 'ip' command (apt-get install iproute2)"; return; }
  command -v unshare >/dev/null || { echo "no 'unshare' command (util-linux)"; return; }
  local probe="mirc-probe-$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then echo "ip netns add is not permitted: $err"; return; fi
  if ! err=$(ip netns exec "$probe" unshare --uts hostname mircprobe 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "UTS namespaces are not permitted: $err"; return
  fi
  if ! err=$(ip -n "$probe" link add mircprobe type bridge 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "bridges cannot be created in a namespace: $err"; return
  fi
  ip netns del "$probe"
  echo ""
}

cluster_id="$$"  # names stay unique, and a dead owner marks leftovers
cluster_nodes=0
cluster_dir=""
cluster_sw="mirc-$cluster_id-sw"
cluster_ns() { echo "mirc-$cluster_id-n$1"; }
cluster_host() { echo "mircn$1"; }
cluster_link() { echo "mirc${cluster_id}v$1"; }  # the switch end of node i's veth (<= 15 chars)

# Kills every process inside namespace $1 (SIGKILL), waiting until none is left.
cluster_kill_ns() {
  local pids
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] || return 0
    kill -9 $pids 2>/dev/null
    sleep 0.2
  done
}

cluster_down() {
  local i ns
  for ((i = 0; i < cluster_nodes; i++)); do
    ns=$(cluster_ns "$i")
    cluster_kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  cluster_kill_ns "$cluster_sw"
  ip netns del "$cluster_sw" 2>/dev/null
  rm -rf "/etc/netns/$cluster_sw"
  [ -z "$cluster_dir" ] || rm -rf "$cluster_dir"
  cluster_nodes=0
}

# Namespaces of earlier runs whose shell is gone (a run killed before its trap ran).
cluster_remove_stale() {
  local ns id
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mirc-[0-9]+-(sw|n[0-9]+)$'); do
    id=${ns#mirc-}; id=${id%%-*}
    kill -0 "$id" 2>/dev/null && continue
    cluster_kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null && rm -rf "/etc/netns/$ns"
  done
}

# cluster_shape RATE: tbf on both ends of every node's link (node -> switch and back).
cluster_shape() {
  local rate="$1" i
  for ((i = 0; i < cluster_nodes; i++)); do
    cluster_shape_link "$i" "$rate"
  done
}
cluster_shape_link() {
  local i="$1" rate="$2" burst
  # burst: at least one MTU and ~1 ms of the rate, so tbf can reach the rate with jumbo frames.
  burst=$(awk -v r="$rate" 'BEGIN { m = r; sub(/[a-zA-Z]+$/, "", m); u = r; sub(/^[0-9.]+/, "", u);
    f = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1;
    b = m * f / 8 / 1000; if (b < 131072) b = 131072; printf "%d", b }')
  ip netns exec "$(cluster_ns "$i")" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
  ip netns exec "$cluster_sw" tc qdisc replace dev "$(cluster_link "$i")" root tbf rate "$rate" burst "$burst" latency 100ms
}

# Note [Partition detection]: a TCP connection to a host that vanished (link down, no RST) fails
# only when its retransmissions give up: tcp_retries2 = 15 on Linux, about 15 minutes. Until
# then mpirun waits on the lost node's daemon (after the ranks' --comm-timeout aborts, it cannot
# deliver the kill to it). Clusters that want failures detected quickly lower it; the emulated
# nodes use 4 (about 6 s at a LAN round trip: 0.2 + 0.4 + ... s), per namespace.
cluster_tcp_tuning() {
  ip netns exec "$1" sh -c 'echo 4 >/proc/sys/net/ipv4/tcp_retries2' 2>/dev/null || true
}

# cluster_up N [SLOTS] [RATE]: N nodes of SLOTS slots (default 2), links shaped to RATE if given.
cluster_up() {
  local n="$1" slots="${2:-2}" rate="${3:-}" reason i ns host hosts
  reason=$(cluster_unsupported)
  if [ -n "$reason" ]; then echo "skip: cannot emulate a cluster here: $reason"; exit 77; fi
  trap 'cluster_down' EXIT
  trap 'exit 130' INT TERM
  cluster_remove_stale
  cluster_dir=$(mktemp -d)
  ip netns add "$cluster_sw"
  ip -n "$cluster_sw" link set lo up
  cluster_tcp_tuning "$cluster_sw"
  ip -n "$cluster_sw" link add br0 type bridge
  ip -n "$cluster_sw" addr add 10.77.0.254/24 dev br0
  ip -n "$cluster_sw" link set br0 up
  hosts="127.0.0.1 localhost
10.77.0.254 mirchead"
  for ((i = 0; i < n; i++)); do
    hosts+=$'\n'"10.77.0.$((i + 1)) $(cluster_host "$i")"
  done
  mkdir -p "/etc/netns/$cluster_sw"
  echo "$hosts" >"/etc/netns/$cluster_sw/hosts"
  : >"$cluster_dir/hostfile"
  for ((i = 0; i < n; i++)); do
    ns=$(cluster_ns "$i")
    host=$(cluster_host "$i")
    ip netns add "$ns"
    cluster_nodes=$((i + 1))
    mkdir -p "/etc/netns/$ns"
    echo "$hosts" >"/etc/netns/$ns/hosts"
    ip -n "$ns" link set lo up
    cluster_tcp_tuning "$ns"
    ip link add "mirc${cluster_id}a$i" type veth peer name "mirc${cluster_id}b$i"
    ip link set "mirc${cluster_id}a$i" netns "$cluster_sw"
    ip -n "$cluster_sw" link set "mirc${cluster_id}a$i" name "$(cluster_link "$i")"
    ip link set "mirc${cluster_id}b$i" netns "$ns"
    ip -n "$ns" link set "mirc${cluster_id}b$i" name eth0
    ip -n "$cluster_sw" link set "$(cluster_link "$i")" master br0 up
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    echo "$host slots=$slots" >>"$cluster_dir/hostfile"
  done
  [ -z "$rate" ] || cluster_shape "$rate"
  cluster_write_agent
}

# The ssh stand-in Open MPI calls as `agent [options] host command...` (Note [Emulated cluster]).
# A node marked lost (cluster_lose_node) or cut off (cluster_partition) answers like an
# unreachable ssh host (the agent itself reaches every namespace, whatever its links).
cluster_write_agent() {
  local i
  {
    echo '#!/usr/bin/env bash'
    echo '# plm_rsh_agent of an emulated cluster: runs the command inside the node namespace.'
    echo 'while [[ "${1:-}" == -* ]]; do shift; done'
    echo 'host="$1"; shift'
    echo 'case "$host" in'
    for ((i = 0; i < cluster_nodes; i++)); do
      echo "  $(cluster_host "$i")|10.77.0.$((i + 1))) ns=$(cluster_ns "$i") ;;"
    done
    echo '  *) echo "ssh: Could not resolve hostname $host" >&2; exit 255 ;;'
    echo 'esac'
    echo "if [ -e \"$cluster_dir/lost-\$ns\" ]; then"
    echo '  echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255'
    echo 'fi'
    echo "if [ -e \"$cluster_dir/cut-\$ns\" ]; then"
    echo '  echo "ssh: connect to host $host port 22: Connection timed out" >&2; exit 255'
    echo 'fi'
    echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c '"'"'hostname "$0" && eval "$*"'"'"' "$host" "$@"'
  } >"$cluster_dir/rsh-agent"
  chmod +x "$cluster_dir/rsh-agent"
}

# Open MPI settings for the emulated cluster (one "--mca KEY VALUE" per line): the agent, TCP
# on the cluster subnet only, every daemon started from the head (no tree spawn).
cluster_mca_args() {
  printf -- '--mca %s %s\n' plm_rsh_agent "$cluster_dir/rsh-agent" plm_rsh_no_tree_spawn 1 \
    oob_tcp_if_include 10.77.0.0/24 btl_tcp_if_include 10.77.0.0/24 btl self,vader,tcp
}

# cluster_head COMMAND...: runs COMMAND on the head (the switch namespace, hostname mirchead),
# ended after $cluster_limit seconds (default 300) so that a hang fails the test instead of
# blocking it (exit code 124).
cluster_limit=300
cluster_head() {
  timeout -k 10 "$cluster_limit" ip netns exec "$cluster_sw" unshare --uts /bin/sh -c 'hostname mirchead && exec "$@"' sh "$@"
}

# cluster_mpirun MPIRUN-ARGS... : mpirun on the head with the hostfile and the agent.
cluster_mpirun() {
  local mca
  read -ra mca <<<"$(cluster_mca_args | tr '\n' ' ')"
  cluster_head mpirun --hostfile "${cluster_hostfile:-$cluster_dir/hostfile}" "${mca[@]}" --bind-to none \
    -x OMP_NUM_THREADS "$@"
}

# cluster_mirrorrun MIRRORRUN-ARGS... : launch/mirrorrun --hostfile on the head.
cluster_mirrorrun() {
  local mca
  read -ra mca <<<"$(cluster_mca_args | tr '\n' ' ')"
  cluster_head "$mirrorrun" --hostfile "$cluster_dir/hostfile" "${mca[@]}" "$@"
}

# An mpirun stand-in for `mirror-bench train --launcher`: takes its -np and the program after
# `--`, drops its binding flags, and starts the ranks on the nodes, one per slot. Prints its path.
cluster_write_launcher() {
  local mca
  mca=$(cluster_mca_args | tr '\n' ' ')
  {
    echo '#!/usr/bin/env bash'
    echo 'np=1'
    echo 'while [ $# -gt 0 ]; do'
    echo '  case "$1" in -np) np="$2"; shift 2 ;; --) shift; break ;; *) shift ;; esac'
    echo 'done'
    echo "exec ip netns exec $cluster_sw unshare --uts /bin/sh -c 'hostname mirchead && exec \"\$@\"' sh \\"
    echo "  mpirun --hostfile $cluster_dir/hostfile $mca --bind-to none -x OMP_NUM_THREADS -np \"\$np\" \"\$@\""
  } >"$cluster_dir/launcher"
  chmod +x "$cluster_dir/launcher"
  echo "$cluster_dir/launcher"
}

# Node loss: every process of node $1 killed, and the node refuses new daemons from then on.
cluster_lose_node() {
  local ns
  ns=$(cluster_ns "$1")
  touch "$cluster_dir/lost-$ns"
  cluster_kill_ns "$ns"
}

# cluster_hostfile_without I: a hostfile of every node but node I (what a scheduler gives a job
# after losing that node); its path is printed.
cluster_hostfile_without() {
  grep -v "^$(cluster_host "$1") " "$cluster_dir/hostfile" >"$cluster_dir/hostfile-without-$1"
  echo "$cluster_dir/hostfile-without-$1"
}

# Partition: node $1's link set down at the switch (its processes keep running, unreachable).
cluster_partition() {
  touch "$cluster_dir/cut-$(cluster_ns "$1")"
  ip -n "$cluster_sw" link set "$(cluster_link "$1")" down
  ip -n "$(cluster_ns "$1")" link set eth0 down
}

# Ends a partition of node $1 (both ends of its link up again).
cluster_heal() {
  ip -n "$(cluster_ns "$1")" link set eth0 up
  ip -n "$cluster_sw" link set "$(cluster_link "$1")" up
  rm -f "$cluster_dir/cut-$(cluster_ns "$1")"
}

# The pids of program $1 (a path) running inside node $2.
cluster_pids_of() {
  local pid
  for pid in $(ip netns pids "$(cluster_ns "$2")" 2>/dev/null); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$1" ] && echo "$pid"
  done
}
