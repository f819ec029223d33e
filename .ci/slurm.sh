#!/usr/bin/env bash
# A real Slurm cluster of one node for the Slurm executor's tests: installs
# Debian's slurm-wlm, munge, slurmdbd and mariadb-server when missing,
# writes a one-node slurm.conf (this host is controller and only node),
# starts munged, MariaDB and slurmdbd (accounting: sacct, accounts and QOS
# enforced at submit time), registers the cluster, the account `dlrepro`
# (root and the invoking user), then starts slurmctld and slurmd and waits
# until `sinfo` shows the node idle.
#
# Partitions: `debug` (the default) and `high` over the same node, a higher
# PriorityTier that preempts debug's jobs (PreemptMode=REQUEUE; a job
# submitted with --no-requeue, as dlrepro's are, ends PREEMPTED). Memory: task/cgroup confines each task to its --mem (cgroup
# v1), so a task past it is OOM-killed and ends OUT_OF_MEMORY.
#
# Idempotent: leaves a cluster alone when its configuration files are the
# ones wanted and its node answers idle (or allocated/mixed). Only this
# cluster's daemons are touched (found by their pid files, not by name:
# another cluster's slurmctld may run on the same host).
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
node=$(hostname -s)
user=${SUDO_USER:-$(id -un)}
account=dlrepro
ready() { sinfo -h -n "$node" -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; }
# A daemon of this cluster is running: its pid file names a live process
# of that name.
running() {
    local pid
    pid=$(cat "/run/$1.pid" 2>/dev/null || true)
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}
stop() {
    local pid
    if running "$1"; then
        pid=$(cat "/run/$1.pid")
        $sudo kill "$pid"
        while $sudo kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
}
registered() {
    sacctmgr -n -P show assoc cluster=dlrepro account="$account" \
        user="$user" format=user 2>/dev/null | grep -qx "$user"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
memory_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat >"$work/slurm.conf" <<CONF
# Written by dlrepro's .ci/slurm.sh: one node, this host.
ClusterName=dlrepro
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity,task/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MailProg=/bin/true
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# Accounting through slurmdbd: sacct knows every task, and an account or
# QOS without an association is refused at submit time.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# A job in partition high preempts debug's, as sites do: requeued, or,
# for a job that may not be (dlrepro's --no-requeue), cancelled: PREEMPTED.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# Slurm's default grace between SIGTERM and SIGKILL (a harness writes its
# partial result in it, slowly on a loaded machine); finished jobs stay
# visible to scontrol for an hour; a job without --mem gets one CPU's share
# of memory, not the whole node, so that tasks can share it.
KillWait=30
MinJobAge=3600
DefMemPerCPU=$(( memory_mb / $(nproc) ))
NodeName=$node CPUs=$(nproc) RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=$node MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
CONF
# slurmd's cgroup autodetection fails in this kind of container/VM; tasks
# are held to their memory (--mem, else DefMemPerCPU per CPU), not cores
# (task/affinity binds those).
cat >"$work/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=no
ConstrainDevices=no
CONF
dbd_pass=$($sudo sed -n 's/^StoragePass=//p' /etc/slurm/slurmdbd.conf 2>/dev/null || true)
if [ -z "$dbd_pass" ]; then
    dbd_pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
fi
cat >"$work/slurmdbd.conf" <<CONF
# Written by dlrepro's .ci/slurm.sh: the test cluster's accounting daemon,
# on the local MariaDB.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$dbd_pass
CONF
same() { $sudo cmp -s "$work/$1" "/etc/slurm/$1"; }
if command -v sinfo >/dev/null && same slurm.conf && same cgroup.conf \
        && same slurmdbd.conf && running slurmdbd && registered && ready; then
    echo "slurm.sh: node $node is up ($(sinfo -h -o '%T' -n "$node" -p debug))"
    exit 0
fi
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
if ! command -v slurmdbd >/dev/null; then
    if command -v slurmctld >/dev/null; then
        # The accounting daemon of the same Slurm release as the others.
        missing+=("slurmdbd=$(dpkg-query -W -f '${Version}' slurmctld)")
    else
        missing+=(slurmdbd)
    fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "slurm.sh: installing Debian's ${missing[*]}"
    for attempt in 1 2 3 4 5 6; do  # another apt may hold the lock
        if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends "${missing[@]}" >/dev/null; then
            break
        fi
        [ "$attempt" = 1 ] && $sudo apt-get update -qq || sleep 10
    done
    command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null \
        && command -v mariadbd >/dev/null
fi
$sudo mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm \
    /run/munge /var/log/munge /var/lib/munge
if [ ! -s /etc/munge/munge.key ]; then
    $sudo sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
fi
$sudo chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
$sudo chmod 0700 /etc/munge
$sudo chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
    $sudo runuser -u munge -- munged 2>/dev/null || $sudo munged --force
fi

# The accounting database: MariaDB (its init script: no systemd needed),
# a database and a user for slurmdbd, then slurmdbd itself.
if ! $sudo mariadb-admin ping >/dev/null 2>&1; then
    $sudo /etc/init.d/mariadb start >/dev/null
fi
$sudo mariadb <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$dbd_pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$dbd_pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
if ! same slurmdbd.conf; then
    $sudo install -m 0600 "$work/slurmdbd.conf" /etc/slurm/slurmdbd.conf
    stop slurmdbd
fi
running slurmdbd || $sudo slurmdbd

if ! same slurm.conf || ! same cgroup.conf; then
    # A changed configuration: restart this cluster's daemons on it.
    $sudo install -m 0644 "$work/slurm.conf" /etc/slurm/slurm.conf
    $sudo install -m 0644 "$work/cgroup.conf" /etc/slurm/cgroup.conf
    stop slurmd
    stop slurmctld
fi

# The cluster, the account and its users in the accounting database
# (before slurmctld starts, so that it finds its cluster); QOS `normal`
# is slurmdbd's own.
for _ in $(seq 1 30); do
    $sudo sacctmgr -n show cluster >/dev/null 2>&1 && break
    sleep 1
done
if ! registered; then
    $sudo sacctmgr -i add cluster dlrepro >/dev/null || true
    $sudo sacctmgr -i add account "$account" Description="dlrepro tests" \
        Organization=dlrepro >/dev/null || true
    for who in root "$user"; do
        $sudo sacctmgr -i add user "$who" Account="$account" >/dev/null || true
        $sudo sacctmgr -i modify user "$who" set DefaultAccount="$account" \
            >/dev/null || true
    done
    registered
fi

running slurmctld || $sudo slurmctld
running slurmd || $sudo slurmd
for _ in $(seq 1 60); do
    if ready; then
        echo "slurm.sh: node $node is idle ($(nproc) CPUs, ${memory_mb} MB; accounting, partitions debug and high)"
        exit 0
    fi
    # A node left DOWN or DRAINED by an earlier run (or a test) is resumed.
    state=$(sinfo -h -n "$node" -o '%T' -p debug 2>/dev/null || true)
    case "$state" in
        down*|drain*) $sudo scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
done
echo "slurm.sh: node $node not idle within 60 s; last log lines:" >&2
$sudo tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log \
    /var/log/slurm/slurmdbd.log >&2 || true
exit 1
