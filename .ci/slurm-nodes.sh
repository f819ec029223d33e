#!/usr/bin/env bash
# A real Slurm cluster of TWO nodes on this one machine, for the multi-node
# tests (tests/slurm/test_slurm_multinode.py; docs/multinode.md "On Slurm"). It is
# a second cluster beside the one-node cluster of .ci/slurm.sh, which it
# leaves alone:
#   - its own configuration, /etc/slurm-nodes/slurm.conf (clients use
#     SLURM_CONF=/etc/slurm-nodes/slurm.conf), ClusterName dlrnodes, its own
#     ports (slurmctld 6917, slurmd 6918), state, pid, spool and log paths;
#   - a bridge dlrnodes0 (10.213.0.1/24 on the host: the controller's
#     address) and, per node n1 and n2, a network namespace of the same name
#     holding one end of a veth pair as eth0 (10.213.0.11, 10.213.0.12) and a
#     UTS namespace whose hostname is the node's name; names in /etc/hosts;
#   - `iptables -I FORWARD -i dlrnodes0 -o dlrnodes0 -j ACCEPT`: the Docker
#     engine sets FORWARD's policy to DROP and bridged packets pass iptables;
#   - a second slurmctld on that configuration, one slurmd per namespace.
# Munge is shared with the one-node cluster (this script starts munged when
# it is not running). How this was first verified by hand: the machine notes
# of this project ("a real two-node Slurm cluster on one machine").
#
# Idempotent: does nothing when both nodes answer idle (or busy) on the same
# configuration. `--stop` stops the daemons and removes the namespaces, the
# bridge, the iptables rule and the /etc/hosts lines.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
BR=dlrnodes0
NET=10.213.0
CONF_DIR=/etc/slurm-nodes
export SLURM_CONF=$CONF_DIR/slurm.conf
NODES="n1 n2"
ip_of() { case "$1" in n1) echo "$NET.11" ;; n2) echo "$NET.12" ;; esac; }
HOSTS_MARK="# dlrepro slurm-nodes"
CTLD_PID=/run/slurmctld-dlrnodes.pid
slurmd_pid() { echo "/run/slurmd-dlrnodes-$1.pid"; }
started=$(date +%s.%N)

stop_pidfile() {
    local file=$1 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        $sudo kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && $sudo kill -9 "$pid" 2>/dev/null || true
    fi
    $sudo rm -f "$file"
}

stop() {
    for node in $NODES; do
        stop_pidfile "$(slurmd_pid "$node")"
        if ip netns list | grep -qw "^$node"; then
            # Whatever still runs in the namespace (a job's processes).
            for pid in $(ip netns pids "$node" 2>/dev/null); do
                $sudo kill -9 "$pid" 2>/dev/null || true
            done
            $sudo ip netns delete "$node"
        fi
        $sudo ip link delete "v-$node" 2>/dev/null || true
    done
    stop_pidfile "$CTLD_PID"
    $sudo ip link delete "$BR" 2>/dev/null || true
    while $sudo iptables -C FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null; do
        $sudo iptables -D FORWARD -i "$BR" -o "$BR" -j ACCEPT
    done
    if grep -q "$HOSTS_MARK" /etc/hosts; then
        # /etc/hosts may be a bind mount: rewrite it in place.
        grep -v "$HOSTS_MARK" /etc/hosts >/tmp/hosts.dlrnodes
        $sudo sh -c 'cat /tmp/hosts.dlrnodes >/etc/hosts'
        rm -f /tmp/hosts.dlrnodes
    fi
    echo "slurm-nodes.sh: stopped (namespaces, bridge $BR, iptables rule, daemons)"
}

if [ "${1:-}" = "--stop" ]; then
    stop
    exit 0
fi

host=$(hostname -s)
memory_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.4)}' /proc/meminfo)
cpus=$(nproc)
wanted=$(mktemp)
trap 'rm -f "$wanted"' EXIT
cat >"$wanted" <<CONF
# Written by dlrepro's .ci/slurm-nodes.sh: two nodes, each a network
# namespace of this host; a second cluster beside .ci/slurm.sh's.
ClusterName=dlrnodes
SlurmctldHost=$host($NET.1)
SlurmctldPort=6917
SlurmdPort=6918
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MailProg=/bin/true
StateSaveLocation=/var/spool/slurmctld-dlrnodes
SlurmdSpoolDir=/var/spool/slurmd-dlrnodes-%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=/run/slurmd-dlrnodes-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld-dlrnodes.log
SlurmdLogFile=/var/log/slurm/slurmd-dlrnodes-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=30
MinJobAge=3600
DefMemPerCPU=$(( memory_mb / cpus ))
NodeName=n1 NodeAddr=$(ip_of n1) CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
NodeName=n2 NodeAddr=$(ip_of n2) CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=nodes Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF

ready() {
    local states
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
    for node in $NODES; do
        echo "$states" | grep -qE "^$node (idle|mixed|allocated|completing)" || return 1
    done
}

# Each slurmd sees the host's cgroup mounts (a cluster started by an older
# version of this script, under `ip netns exec`, does not: it is restarted).
sees_cgroups() {
    local node pid
    grep -q " /sys/fs/cgroup" /proc/self/mountinfo || return 0
    for node in $NODES; do
        pid=$(cat "$(slurmd_pid "$node")" 2>/dev/null) || return 1
        grep -q " /sys/fs/cgroup" "/proc/$pid/mountinfo" 2>/dev/null || return 1
    done
}

if command -v sinfo >/dev/null && cmp -s "$wanted" "$SLURM_CONF" \
        && [ -s "$CTLD_PID" ] && ready && sees_cgroups; then
    echo "slurm-nodes.sh: nodes n1 n2 are up ($(sinfo -h -N -o '%N=%T' | tr '\n' ' '))"
    exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-nodes.sh: installing Debian's slurm-wlm and munge"
    for attempt in 1 2 3 4 5 6; do
        if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends slurm-wlm munge >/dev/null; then
            break
        fi
        [ "$attempt" = 1 ] && $sudo apt-get update -qq || sleep 10
    done
    command -v slurmctld >/dev/null
fi
# A changed or half-started cluster: start again from nothing.
stop >/dev/null
$sudo mkdir -p "$CONF_DIR" /var/spool/slurmctld-dlrnodes /var/log/slurm \
    /run/munge /var/log/munge /var/lib/munge
$sudo cp "$wanted" "$SLURM_CONF"
$sudo chmod 0644 "$SLURM_CONF"
# slurmd's cgroup autodetection fails in this kind of container/VM.
echo "CgroupPlugin=cgroup/v1" | $sudo tee "$CONF_DIR/cgroup.conf" >/dev/null
if [ ! -s /etc/munge/munge.key ]; then
    $sudo sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
    $sudo chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    $sudo chmod 0400 /etc/munge/munge.key
fi
if ! pgrep -x munged >/dev/null; then
    $sudo runuser -u munge -- munged 2>/dev/null || $sudo munged --force
fi

# The network: a bridge with the controller's address, a namespace per node.
$sudo ip link add "$BR" type bridge
$sudo ip addr add "$NET.1/24" dev "$BR"
$sudo ip link set "$BR" up
$sudo iptables -I FORWARD -i "$BR" -o "$BR" -j ACCEPT
{
    echo "$NET.1 $host-dlrnodes $HOSTS_MARK"
    for node in $NODES; do echo "$(ip_of "$node") $node $HOSTS_MARK"; done
} >/tmp/hosts.dlrnodes
$sudo sh -c 'cat /tmp/hosts.dlrnodes >>/etc/hosts'
rm -f /tmp/hosts.dlrnodes
for node in $NODES; do
    $sudo ip netns add "$node"
    $sudo ip link add "v-$node" type veth peer name eth0 netns "$node"
    $sudo ip link set "v-$node" master "$BR" up
    $sudo ip netns exec "$node" ip addr add "$(ip_of "$node")/24" dev eth0
    $sudo ip netns exec "$node" ip link set eth0 up
    $sudo ip netns exec "$node" ip link set lo up
done

$sudo slurmctld -f "$SLURM_CONF"
for node in $NODES; do
    $sudo mkdir -p "/var/spool/slurmd-dlrnodes-$node"
    # nsenter --net, not `ip netns exec`: that also gives the process a
    # mount namespace with a fresh /sys (the namespace's sysfs), which
    # hides /sys/fs/cgroup, and rootful podman under slurmd then fails
    # "runc create failed: no cgroup mount found in mountinfo". A real
    # node has its cgroups; so do these (tests/slurm/test_slurm_multinode_runtimes.py).
    $sudo nsenter --net="/run/netns/$node" unshare --uts sh -c \
        "hostname $node && exec slurmd -f $SLURM_CONF -N $node"
done
for _ in $(seq 1 120); do
    if ready; then
        took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
        echo "slurm-nodes.sh: nodes n1 ($(ip_of n1)) and n2 ($(ip_of n2)) idle in ${took} s; SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    for node in $NODES; do
        state=$(sinfo -h -n "$node" -o '%T' 2>/dev/null || true)
        case "$state" in
            down*|drain*) $sudo scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
        esac
    done
    sleep 0.5
done
echo "slurm-nodes.sh: nodes not idle within 60 s; last log lines:" >&2
$sudo tail -5 /var/log/slurm/slurmctld-dlrnodes.log \
    /var/log/slurm/slurmd-dlrnodes-n1.log /var/log/slurm/slurmd-dlrnodes-n2.log >&2 || true
exit 1
