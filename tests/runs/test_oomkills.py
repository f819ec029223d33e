"""Whose OOM kill: the kernel log's victims, and the verdict from them
(the real kills are in tests/runs/test_faults.py)."""
from dlrepro.run import oomkills
from dlrepro.run.runtimes import podman

import memcgroup

# As this machine's kernel (6.18) writes them to /dev/kmsg.
OOM_KILL = ("6,1901,289333565,-;oom-kill:constraint=CONSTRAINT_MEMCG,"
            "nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a/b,"
            "task_memcg=/a/b/c,task=python3,pid=31085,uid=0\n")
KILLED = ("3,1902,289333597,-;Memory cgroup out of memory: Killed process "
          "31085 (python3) total-vm:114916kB, anon-rss:102016kB, "
          "file-rss:6556kB, shmem-rss:0kB, UID:0 pgtables:264kB "
          "oom_score_adj:0\n")
ID = "ab" * 32


def test_the_kernel_log_names_the_victim_and_its_cgroup():
    assert oomkills.victims([OOM_KILL, KILLED]) == {
        31085: ("python3", "/a/b/c")}
    assert oomkills.victims([KILLED]) == {31085: ("python3", None)}
    assert oomkills.victims(["6,1,1,-;eth0: link up\n"]) == {}


def test_the_verdict_is_oom_only_when_the_victim_is_ours():
    ran = "the OOM killer ran"
    found = {31085: ("python3", "/a/b/c")}
    pid_is = oomkills.victim_verdict
    assert pid_is(found, lambda p, _m: p == 31085, "it", ran, "")[0] is True
    oom, detail = pid_is(found, lambda p, _m: p == 7, "the harness (pid 7)",
                         ran, "")
    assert oom is False
    assert detail == ("the OOM killer ran, but its victim was pid 31085 "
                      "(python3, cgroup /a/b/c), not the harness (pid 7)")
    # another test's hog killed during the same job, on a shared machine
    found[31090] = ("python3", "/a/b/d")
    oom, detail = pid_is(found, lambda p, _m: p == 7, "the harness (pid 7)",
                         ran, "")
    assert oom is False
    assert detail == ("the OOM killer ran, but its victims were pid 31085 "
                      "(python3, cgroup /a/b/c), pid 31090 (python3, cgroup "
                      "/a/b/d), not the harness (pid 7)")
    assert memcgroup.names_victim(detail, 31090)
    assert memcgroup.names_victim(detail, 31085)
    assert not memcgroup.names_victim(detail, 3108)
    for unknown in (None, {}):
        oom, detail = pid_is(unknown, lambda p, _m: True, "it", ran,
                             "/dev/kmsg cannot be read")
        assert oom is None and "cannot be told" in detail


def test_a_podman_container_is_its_cgroup_not_its_conmon():
    ours = podman.in_container(ID)
    assert ours(1, f"/libpod_parent/libpod-{ID}")
    assert ours(1, f"/machine.slice/libpod-{ID}.scope")
    assert ours(1, f"/user.slice/libpod-{ID}.scope/container")
    assert not ours(1, f"/machine.slice/libpod-conmon-{ID}.scope")
    assert not ours(1, "/machine.slice/libpod-" + "cd" * 32 + ".scope")
    assert not ours(1, None)
    assert not podman.in_container(None)(1, f"/libpod-{ID}")
