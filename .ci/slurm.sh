#!/usr/bin/env bash
# A real Slurm cluster of one node for the Slurm executor's tests: installs
# Debian's slurm-wlm and munge when missing, writes a one-node slurm.conf
# (this host is controller and only node), starts munged, slurmctld and
# slurmd, and waits until `sinfo` shows the node idle. Idempotent: leaves a
# cluster alone when its node already answers idle (or allocated/mixed).
# Accounting is off (no slurmdbd): the executor falls back to `scontrol show
# job` for a finished task's state, which MinJobAge keeps for an hour.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
node=$(hostname -s)
ready() { sinfo -h -n "$node" -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; }
wanted=$(mktemp)
trap 'rm -f "$wanted"' EXIT
memory_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat >"$wanted" <<CONF
# Written by dlrepro's .ci/slurm.sh: one node, this host.
ClusterName=dlrepro
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MailProg=/bin/true
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Slurm's default grace between SIGTERM and SIGKILL (a harness writes its
# partial result in it, slowly on a loaded machine); finished jobs stay
# visible to scontrol for an hour; a job without --mem gets one CPU's share
# of memory, not the whole node, so that tasks can share it.
KillWait=30
MinJobAge=3600
DefMemPerCPU=$(( memory_mb / $(nproc) ))
NodeName=$node CPUs=$(nproc) RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
if command -v sinfo >/dev/null && ready && cmp -s "$wanted" /etc/slurm/slurm.conf; then
    echo "slurm.sh: node $node is up ($(sinfo -h -o '%T' -n "$node"))"
    exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm.sh: installing Debian's slurm-wlm and munge"
    for attempt in 1 2 3 4 5 6; do  # another apt may hold the lock
        if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends slurm-wlm munge >/dev/null; then
            break
        fi
        [ "$attempt" = 1 ] && $sudo apt-get update -qq || sleep 10
    done
    command -v slurmctld >/dev/null
fi
$sudo mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm \
    /run/munge /var/log/munge /var/lib/munge
if [ ! -s /etc/munge/munge.key ]; then
    $sudo sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
fi
$sudo chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
$sudo chmod 0700 /etc/munge
$sudo chmod 0400 /etc/munge/munge.key
if ! cmp -s "$wanted" /etc/slurm/slurm.conf; then
    # A changed configuration: restart the daemons on it.
    $sudo cp "$wanted" /etc/slurm/slurm.conf
    $sudo chmod 0644 /etc/slurm/slurm.conf
    for daemon in slurmd slurmctld; do
        pid=$(pgrep -xf "$daemon" || true)  # not slurm-nodes.sh's (-f CONF)
        if [ -n "$pid" ]; then
            $sudo kill $pid
            while kill -0 $pid 2>/dev/null; do sleep 0.2; done
        fi
    done
fi
# slurmd's cgroup autodetection fails in this kind of container/VM.
echo "CgroupPlugin=cgroup/v1" | $sudo tee /etc/slurm/cgroup.conf >/dev/null
if ! pgrep -x munged >/dev/null; then
    $sudo runuser -u munge -- munged 2>/dev/null || $sudo munged --force
fi
pgrep -xf slurmctld >/dev/null || $sudo slurmctld
pgrep -xf slurmd >/dev/null || $sudo slurmd
for _ in $(seq 1 60); do
    if ready; then
        echo "slurm.sh: node $node is idle ($(nproc) CPUs, ${memory_mb} MB)"
        exit 0
    fi
    # A node left DOWN or DRAINED by an earlier run (or a test) is resumed.
    state=$(sinfo -h -n "$node" -o '%T' 2>/dev/null || true)
    case "$state" in
        down*|drain*) $sudo scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
done
echo "slurm.sh: node $node not idle within 60 s; last log lines:" >&2
$sudo tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
