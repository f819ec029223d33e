"""The Docker engine as the image commands and the docker runtime reach it
(the SDK is imported only on these paths)."""
from dlrepro.errors import UserError

NATIVE_HINT = "or run natively with --runtime native"


def engine(timeout=600):
    """A docker SDK client whose engine answers, or a one-line UserError."""
    # Imported here: only the image and docker-runtime paths need the SDK.
    import docker
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:
        raise UserError(f"the Docker engine does not answer ({first_line(exc)}); "
                        f"start it (e.g. .ci/docker-engine.sh) {NATIVE_HINT}")
    return client


def first_line(exc):
    # An engine error's explanation is the engine's own message, without the
    # HTTP request around it.
    text = (str(getattr(exc, "explanation", "") or "").strip() or str(exc).strip()
            or type(exc).__name__)
    return text.splitlines()[0][:300]


def local_image(client, ref):
    import docker
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        # A malformed reference is the user's input, not a crash.
        raise UserError(f"image {ref!r}: {first_line(exc)}")
