"""What produced a run's results, from its run.json and the results'
environment blocks: hardware, framework versions, container images and
digests, the GPU clock policy, a telemetry summary and the warnings.

Functions return (label, value) tuples and rows of dicts; the page lays
them out."""


def _distinct(values):
    return list(dict.fromkeys(v for v in values if v not in (None, "", [])))


def _results(job_results):
    return [r for _e, r in job_results if r is not None]


def hardware(record, job_results):
    """[(label, value)] of the machine the run measured on."""
    results = _results(job_results)
    envs = [r.get("environment") or {} for r in results]
    host = record.get("host") or {}
    gpus = _distinct(f"{g.get('name') or '?'}"
                     + (f" (driver {g['driver_version']})"
                        if g.get("driver_version") else "")
                     for e in envs for g in e.get("gpus") or [])
    items = [
        ("host", ", ".join(_distinct(e.get("host") for e in envs))
         or host.get("hostname")),
        ("CPU", ", ".join(_distinct(e.get("cpu_model") for e in envs))),
        ("CPU cores", host.get("cpus") or ", ".join(
            str(c) for c in _distinct(e.get("cpu_count") for e in envs))),
        ("GPUs", "; ".join(gpus) or "none used"),
        ("OS", ", ".join(_distinct(e.get("os") for e in envs))),
    ]
    return [(label, str(value)) for label, value in items if value]


def software(job_results):
    """One row per (framework, version, Python, CUDA, cuDNN, image,
    digest) seen in the results."""
    rows = {}
    for result in _results(job_results):
        env = result.get("environment") or {}
        container = env.get("container") or {}
        row = {"framework": result["cell"]["framework"],
               "version": env.get("framework_version") or "?",
               "python": env.get("python_version") or "?",
               "cuda": env.get("cuda") or "-",
               "cudnn": env.get("cudnn") or "-",
               "image": container.get("image") or "(native: "
               + (env.get("python_executable") or "a virtual environment")
               + ")",
               # The pullable reference `invoke push` recorded, else the
               # engine's own repository digest (results before either:
               # "digest").
               "digest": container.get("pullable")
               or container.get("repo_digest") or container.get("digest")
               or "-"}
        rows.setdefault(tuple(row.values()), row)
    return list(rows.values())


def clock_policy(job_results):
    """[(label, value)]: the GPU clock policies and how they were applied."""
    seen = []
    for result in _results(job_results):
        clocks = result.get("gpu_clocks") or {}
        if not clocks:
            continue
        text = clocks.get("policy") or "?"
        if clocks.get("applicable"):
            text += f" ({clocks.get('mode') or 'applied'})"
        elif clocks.get("reason"):
            text += f" (not applicable: {clocks['reason']})"
        seen.append(text)
    return [("GPU clock policy", "; ".join(_distinct(seen)) or "not recorded")]


def _span(block, unit, digits=0):
    if not block:
        return "-"
    return (f"{block['mean']:.{digits}f} {unit} "
            f"({block['min']:.{digits}f}-{block['max']:.{digits}f})")


def telemetry(job_results):
    """One row per (job, GPU) that recorded telemetry: mean (min-max) SM
    clock, power and temperature, and any throttling flag raised."""
    rows = []
    for entry, result in job_results:
        block = (result or {}).get("telemetry")
        if not block:
            continue
        for gpu in block.get("gpus") or []:
            flags = gpu.get("flags") or block.get("flags") or {}
            raised = [name for name, on in sorted(flags.items()) if on]
            rows.append({"job": entry["id"], "gpu": gpu.get("index"),
                         "samples": block.get("samples"),
                         "sm_clock": _span(gpu.get("sm_clock_mhz"), "MHz"),
                         "power": _span(gpu.get("power_w"), "W"),
                         "temperature": _span(gpu.get("temperature_c"), "C"),
                         "throttling": ", ".join(raised) or "none"})
    return rows


def warnings(job_results):
    """One row per warning of a result, and per job that did not end ok."""
    rows = []
    for entry, result in job_results:
        if entry["status"] != "ok":
            rows.append({"job": entry["id"], "status": entry["status"],
                         "warning": entry.get("message") or ""})
        for text in (result or {}).get("warnings") or []:
            rows.append({"job": entry["id"], "status": entry["status"],
                         "warning": text})
    return rows
