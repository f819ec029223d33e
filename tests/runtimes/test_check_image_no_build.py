"""`invoke check-image --no-build` against a real Docker engine where the
images it would check are missing (an image prefix nothing was built
under): it checks nothing, so it says so and fails, rather than exit 0 as
if every image had passed."""
import os
import subprocess
import uuid

from paths import INVOKE, ROOT


def test_nothing_checked_is_not_a_pass(docker_client):
    prefix = f"dlrepro-absent-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([INVOKE, "check-image", "--framework", "jax",
                           "--no-build"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, DLREPRO_IMAGE_PREFIX=prefix))
    lines = done.stdout.splitlines()
    assert lines and all(f": not checked: image {prefix}/jax:" in line
                         for line in lines), done.stdout + done.stderr
    assert done.returncode == 1
    targets = ", ".join(line.split(":")[0] for line in lines)
    assert done.stderr == (f"{len(lines)} of {len(lines)} image(s) not "
                           f"checked ({targets}): see above\n")
