#!/usr/bin/env bash
# An emulated ByteComp cluster on one Linux host: the scheduler, every server and every worker
# in a network namespace of its own, joined by veth pairs to a bridge that lives in a further
# namespace, with tc tbf limiting each link in both directions (netem is not available on the
# target kernels; tbf is). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
#
#   netns_cluster.sh up   --workers W --servers S --rate 1gbit [--burst BYTES] [--latency 20ms]
#                         [--colocate]
#   netns_cluster.sh exec NAME -- cmd args...      NAME: sched | s<i> | w<i> (or the full name)
#   netns_cluster.sh addr NAME                     prints the node's IP address
#   netns_cluster.sh list                          the namespaces of this cluster, with addresses
#   netns_cluster.sh run  --workers W --servers S --rate R [--burst B] [--latency L]
#                         [--colocate] [bytecomp-run options] -- cmd args...
#                         up, then deploy/bytecomp-run with every process in its namespace,
#                         then down (always, also after a failure or Ctrl-C)
#   netns_cluster.sh down                          removes everything 'up' made
#
# Every subcommand takes --prefix P (default "bc-", or $BYTECOMP_NETNS_PREFIX): namespaces are
# P"br" (the bridge), P"sched", P"s0".., P"w0"..; distinct prefixes give independent clusters.
# Addresses are in 10.213.0.0/16 and exist only inside these namespaces: the scheduler is
# 10.213.0.1, server i is 10.213.1.(i+1), worker i is 10.213.2.(i+1). Nothing is added to the
# root namespace: each veth pair is created inside the bridge namespace and one end moved.
#
# --colocate: the BytePS layout, a server beside each worker (S <= W): server i runs in worker
# i's namespace ("machine"), shares its link and is reached at its address; s<i> is then a
# second name for w<i>'s namespace (a bind mount of it, as 'ip netns' names are), so that
# 'exec s<i>' and the launcher's --netns find it. Traffic between a worker and its own server
# stays inside the namespace, as on a real machine.
#
# Shaping: a node's upload is a tbf on its own eth0 (egress); its download is a tbf on the
# bridge-side end of its veth (that end's egress), so each link is limited both ways.
# Every namespace 'up' creates is recorded in $BYTECOMP_NETNS_STATE_DIR (default
# /run/bytecomp-netns)/<prefix>cluster as it is made; 'down'
# deletes exactly those (deleting a namespace also removes the veth ends in it).
set -euo pipefail

STATE_DIR=${BYTECOMP_NETNS_STATE_DIR:-/run/bytecomp-netns}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=${BYTECOMP_NETNS_PREFIX:-bc-}

die() { echo "netns_cluster.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

state_file() { echo "$STATE_DIR/${prefix}cluster"; }
# Holds "colocate" when servers share the workers' namespaces.
layout_file() { echo "$STATE_DIR/${prefix}layout"; }
colocated() { [[ -f $(layout_file) ]] && grep -qx colocate "$(layout_file)"; }

# Node short name -> IP address (the fixed plan above).
node_addr() {
  local name=$1
  case "$name" in
    sched) echo 10.213.0.1 ;;
    s[0-9]*) if colocated; then echo "10.213.2.$(( ${name#s} + 1 ))";
             else echo "10.213.1.$(( ${name#s} + 1 ))"; fi ;;
    w[0-9]*) echo "10.213.2.$(( ${name#w} + 1 ))" ;;
    *) die "unknown node '$name' (expected sched, s<i> or w<i>)" ;;
  esac
}

# "100mbit" -> bytes per second (tc's bit units; tc's 'bps' means bytes and is not accepted).
rate_bytes_per_s() {
  local rate=$1 num unit mult
  [[ $rate =~ ^([0-9]+)([kmgt]?bit)$ ]] || die "bad --rate '$rate' (use e.g. 100mbit, 1gbit)"
  num=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
  case $unit in
    bit) mult=1 ;; kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;;
    tbit) mult=1000000000000 ;;
  esac
  echo $(( num * mult / 8 ))
}

require_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (CAP_NET_ADMIN) to create network namespaces"
}

cmd_down() {
  local file ns
  file=$(state_file)
  [[ -f $file ]] || { echo "netns_cluster.sh: no cluster with prefix '$prefix'"; return 0; }
  # Node namespaces first, the bridge last; each was recorded by 'up' as it was made.
  while read -r ns; do
    [[ -n $ns ]] || continue
    # Processes still running in it would keep it alive as an unnamed namespace: stop them.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 0.5
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done < <(tac "$file")
  rm -f "$file" "$(layout_file)"
  echo "netns_cluster.sh: removed cluster '$prefix'"
}

# Adds a tbf root qdisc on dev inside namespace ns.
shape() {
  local ns=$1 dev=$2
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency "$latency" \
    || die "tc tbf on $dev in $ns failed (rate $rate burst $burst latency $latency)"
}

add_node() {
  local name=$1 ns=${prefix}$1 addr
  addr=$(node_addr "$name")
  ip netns add "$ns" || die "cannot create namespace $ns"
  echo "$ns" >> "$(state_file)"
  ip -n "$ns" link set lo up
  # Port named after the node inside the bridge namespace; the node's end becomes its eth0.
  ip -n "$bridge_ns" link add "$name" type veth peer name eth0 netns "$ns"
  ip -n "$bridge_ns" link set "$name" master br0 up
  ip -n "$ns" addr add "$addr/16" dev eth0
  ip -n "$ns" link set eth0 up
  shape "$ns" eth0              # upload
  shape "$bridge_ns" "$name"    # download
}

# A second name for node $2's namespace: s<i> beside w<i> (--colocate).
add_alias() {
  local alias=${prefix}$1 target=${prefix}$2
  touch "/run/netns/$alias" || die "cannot create /run/netns/$alias"
  echo "$alias" >> "$(state_file)"
  mount --bind "/run/netns/$target" "/run/netns/$alias" \
    || die "cannot bind-mount namespace $target as $alias"
}

cmd_up() {
  local workers="" servers="" burst_arg="" colocate=0 i
  rate=""; latency=20ms
  while (($#)); do
    case $1 in
      --workers) workers=$2; shift 2 ;;
      --servers) servers=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --burst) burst_arg=$2; shift 2 ;;
      --latency) latency=$2; shift 2 ;;
      --prefix) prefix=$2; shift 2 ;;
      --colocate) colocate=1; shift ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ $workers =~ ^[0-9]+$ && $workers -ge 1 && $workers -le 254 ]] \
    || die "up: --workers must be 1..254"
  [[ $servers =~ ^[0-9]+$ && $servers -le 254 ]] || die "up: --servers must be 0..254"
  [[ -n $rate ]] || die "up: --rate is required (e.g. --rate 1gbit)"
  ((colocate == 0 || servers <= workers)) \
    || die "up: --colocate puts server i beside worker i: --servers must be <= --workers"
  local bytes_per_s
  bytes_per_s=$(rate_bytes_per_s "$rate")
  # Default bucket: 1 ms of traffic, at least 10 full-size frames (tbf needs burst >= MTU, and a
  # bucket smaller than rate/HZ would cap the rate below the limit).
  if [[ -n $burst_arg ]]; then
    burst=$burst_arg
  else
    burst=$(( bytes_per_s / 1000 ))
    (( burst >= 15140 )) || burst=15140
  fi
  require_root
  mkdir -p "$STATE_DIR"
  [[ ! -e $(state_file) ]] \
    || die "a cluster with prefix '$prefix' is up already ($(state_file)); run 'down' first"
  : > "$(state_file)"
  if ((colocate)); then echo colocate > "$(layout_file)"; else rm -f "$(layout_file)"; fi
  # Any failure from here on removes what was made so far.
  trap 'status=$?; if ((status)); then echo "netns_cluster.sh: up failed; removing what it made" >&2; cmd_down >&2; fi' EXIT
  bridge_ns=${prefix}br
  ip netns add "$bridge_ns" || die "cannot create namespace $bridge_ns"
  echo "$bridge_ns" >> "$(state_file)"
  ip -n "$bridge_ns" link set lo up
  ip -n "$bridge_ns" link add br0 type bridge
  ip -n "$bridge_ns" link set br0 up
  add_node sched
  if ((colocate == 0)); then
    for ((i = 0; i < servers; i++)); do add_node "s$i"; done
  fi
  for ((i = 0; i < workers; i++)); do add_node "w$i"; done
  if ((colocate)); then
    mkdir -p /run/netns
    for ((i = 0; i < servers; i++)); do add_alias "s$i" "w$i"; done
  fi
  trap - EXIT
  local layout="$servers servers"
  ((colocate == 0)) || layout="$servers servers beside workers 0..$((servers - 1))"
  echo "netns_cluster.sh: cluster '$prefix' up: scheduler, $layout, $workers workers;" \
       "links $rate both ways (tbf burst $burst bytes, latency $latency)"
}

resolve_ns() {
  local name=$1
  if [[ $name == "$prefix"* ]]; then echo "$name"; else echo "${prefix}${name}"; fi
}

cmd_exec() {
  local name="" ns
  while (($#)); do
    case $1 in
      --prefix) prefix=$2; shift 2 ;;
      --) shift; break ;;
      *) [[ -z $name ]] || die "exec: unexpected '$1' (put the command after --)"; name=$1; shift ;;
    esac
  done
  [[ -n $name ]] || die "exec: which node? (sched, s<i>, w<i>)"
  (($#)) || die "exec: no command after --"
  ns=$(resolve_ns "$name")
  if [[ ! -f $(state_file) ]] || ! grep -qx "$ns" "$(state_file)"; then
    die "exec: no namespace $ns in cluster '$prefix' (is it up?)"
  fi
  exec ip netns exec "$ns" "$@"
}

cmd_addr() {
  local name=""
  while (($#)); do
    case $1 in
      --prefix) prefix=$2; shift 2 ;;
      *) name=$1; shift ;;
    esac
  done
  [[ -n $name ]] || die "addr: which node? (sched, s<i>, w<i>)"
  node_addr "${name#"$prefix"}"
}

cmd_list() {
  while (($#)); do
    case $1 in
      --prefix) prefix=$2; shift 2 ;;
      *) die "list: unknown argument '$1'" ;;
    esac
  done
  [[ -f $(state_file) ]] || die "no cluster with prefix '$prefix'"
  local ns
  while read -r ns; do
    if [[ $ns == "${prefix}br" ]]; then echo "$ns bridge"; elif colocated &&
       [[ ${ns#"$prefix"} == s[0-9]* ]]; then
      echo "$ns $(node_addr "${ns#"$prefix"}") (beside ${prefix}w${ns#"${prefix}s"})"; else
      echo "$ns $(node_addr "${ns#"$prefix"}")"; fi
  done < "$(state_file)"
}

cmd_run() {
  local up_args=() run_args=() workers="" servers=""
  while (($#)); do
    case $1 in
      --workers) workers=$2; up_args+=("$1" "$2"); shift 2 ;;
      --servers) servers=$2; up_args+=("$1" "$2"); shift 2 ;;
      --rate|--burst|--latency) up_args+=("$1" "$2"); shift 2 ;;
      --colocate) up_args+=("$1"); shift ;;
      --prefix) prefix=$2; shift 2 ;;
      --) break ;;
      *) run_args+=("$1"); shift ;;
    esac
  done
  [[ -n $workers && -n $servers ]] || die "run: --workers and --servers are required"
  trap 'cmd_down' EXIT
  cmd_up "${up_args[@]}"
  trap 'cmd_down' EXIT   # cmd_up cleared its own trap on success
  # The launcher runs in the background so that a SIGTERM/SIGINT to this script reaches it at
  # once (bash would otherwise hold the signal until the launcher exited on its own); it
  # forwards the signal to the job, and the EXIT trap then removes the cluster.
  local status=0 launcher_pid
  "$SCRIPT_DIR/bytecomp-run" -np "$workers" --servers "$servers" --netns "$prefix" \
    --scheduler-host "$(node_addr sched)" "${run_args[@]}" "$@" &
  launcher_pid=$!
  trap 'kill -TERM "$launcher_pid" 2>/dev/null || true' TERM INT
  while true; do
    status=0
    wait "$launcher_pid" || status=$?
    kill -0 "$launcher_pid" 2>/dev/null || break   # a trapped signal interrupted wait
  done
  return "$status"
}

(($#)) || usage
sub=$1; shift
case $sub in
  up) cmd_up "$@" ;;
  down)
    while (($#)); do
      case $1 in --prefix) prefix=$2; shift 2 ;; *) die "down: unknown argument '$1'" ;; esac
    done
    cmd_down ;;
  exec) cmd_exec "$@" ;;
  addr) cmd_addr "$@" ;;
  list) cmd_list "$@" ;;
  run) cmd_run "$@" ;;
  -h|--help|help) usage 0 ;;
  *) die "unknown subcommand '$sub' (up, exec, addr, list, run, down)" ;;
esac
