"""A driver version that is not a version (the fake NVML reports "abc")
on the real command line: the compatibility gate cannot compare it with
the stack's minimum driver, so it says so (verdict unknown) instead of
admitting the profile as native."""
import subprocess

import fake_nvml
from paths import INVOKE, ROOT


def dry_run(tmp_path, driver):
    env, _state = fake_nvml.child_env(tmp_path, [fake_nvml.hopper_h200()],
                                      driver=driver, path_extra=[ROOT])
    done = subprocess.run([INVOKE, "bench", "--framework", "pytorch",
                           "--device", "gpu", "--network", "fcn5",
                           "--dry-run", "--out", str(tmp_path / "results")],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines()
                if line.startswith("  pytorch: "))


def test_a_driver_version_that_is_not_one_is_not_native(tmp_path):
    assert dry_run(tmp_path, "580.65.06").startswith(
        "  pytorch: cuda (native: machine code ")
    assert dry_run(tmp_path, "abc") == (
        "  pytorch: cuda (unknown: the driver reports version 'abc', which "
        "is not a version; the stack was not checked)")
