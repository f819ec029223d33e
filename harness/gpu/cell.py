"""The GPU side of one cell: NVML's inventory (environment.gpus), the
compatibility gate, the clock policy, telemetry over the timed iterations,
and MFU. Uses nvidia-ml-py (`import pynvml`) when present; a GPU cell without
it still runs, with what NVML would have told marked as unavailable.

harness/throughput.py drives it in this order:

    gpus = CellGpus(cell, spec, out_path)    # checks the spec's GPU fields
    env["gpus"] = gpus.open()                 # NVML's view of the cell's GPUs
    refusal = gpus.gate(result)               # result["compatibility"]
    warmup = gpus.apply_clocks(result, warmup)  # before the warm-up
    step = gpus.timed(session.step, warmup)   # telemetry: timed steps only
    ...
    gpus.close(result)       # finally: stop telemetry, restore clocks, record
    gpus.summarize(result, backend)  # once timing is summarised: MFU, JIT

A CPU cell only gets its gpu_clocks block ("not applicable"), as before.
"""
import os
import sys
import traceback

from . import compat
from .. import networks
from . import clocks, peaks, telemetry
from .nvml import Nvml, device_info, system_versions, visible_indices

# A timed window whose SM clock strays further than this from the clock the
# policy set is reported.
CLOCK_TOLERANCE = 0.05


def clock_block(policy, device):
    """The `gpu_clocks` block before anything is known about the GPUs."""
    if device != "gpu":
        return {"policy": policy, "applicable": False,
                "reason": "CPU cell: GPU clocks do not apply", "gpus": []}
    return {"policy": policy, "applicable": True, "mode": None,
            "reason": "not reached: the cell ended before the clock policy",
            "state_file": None, "state_status": None, "outstanding": False,
            "gpus": []}


def _uses_convolution(network):
    pending = list(networks.resolve(network))
    while pending:
        resolved = pending.pop()
        if type(resolved.layer) is networks.Conv:
            return True
        if resolved.children is not None:
            body, shortcut = resolved.children
            pending.extend(body)
            pending.extend(shortcut or [])
    return False


class CellGpus(object):
    """See the module docstring. `module` stands in for pynvml in tests."""

    def __init__(self, cell, spec, out_path, module=None, environ=None,
                 log=None, interval_s=telemetry.DEFAULT_INTERVAL_S,
                 group=None):
        self.cell = cell
        # A worker's harness.gpu.clockgroup.GroupClocks: the policy is applied
        # once for the group and restored when the worker ends, not here.
        self.group = group
        self.held = None        # the group's ClockSession, once held
        self.group_block = None
        self.policy = clocks.parse_policy(cell["clock_policy"])
        self.active = cell["device"] == "gpu"
        spec = spec if isinstance(spec, dict) else {}
        self.stack = compat.check_stack(spec.get("stack"))
        # How the host chose this profile for the GPUs it found, if it did.
        self.profile_choice = spec.get("profile_choice")
        self.state_path = clocks.state_path(out_path, spec.get("clock_state"))
        self.module = module
        self.environ = os.environ if environ is None else environ
        self.log = log or (lambda line: sys.stderr.write(line + "\n"))
        self.interval_s = interval_s
        self.nvml = None
        self.used = []          # [(NVML index, handle, environment.gpus entry)]
        self.verdict = None
        self.session = None
        self.sampler = None
        self.reader = None
        self.energy_start = None
        self.telemetry = None
        self.clocks_reached = False
        self.warnings = []

    def _warn(self, message):
        self.warnings.append(message)
        self.log("harness: WARNING: " + message)

    # -- before the framework ---------------------------------------------------
    def open(self):
        """Start NVML and describe the GPUs the cell uses (environment.gpus)."""
        if not self.active:
            return []
        self.nvml, reason = Nvml.open(self.module)
        if self.nvml is None:
            self._warn("NVML unavailable ({}): no GPU provenance from NVML, "
                       "no clock control, no telemetry".format(reason))
            return []
        driver, cuda = system_versions(self.nvml)
        indices, note = visible_indices(self.nvml, self.environ)
        if note:
            self.warnings.append(note)
        wanted = max(self.cell["gpus"], 1)
        if len(indices) < wanted:
            self._warn("the cell uses {} GPU(s) but NVML shows this process "
                       "{}".format(wanted, len(indices)))
        for index in indices[:wanted]:
            handle, info = device_info(self.nvml, index, driver, cuda)
            self.used.append((index, handle, info))
        return [info for _index, _handle, info in self.used]

    def gate(self, result):
        """Run the compatibility gate; returns the reason when the cell must
        end as unsupported (None otherwise)."""
        if not self.active:
            return None
        infos = [info for _i, _h, info in self.used] or [{}]
        checks = [compat.check(info.get("compute_capability"),
                               info.get("driver_version"), self.stack)
                  for info in infos]
        order = (compat.UNSUPPORTED, compat.DRIVER_TOO_OLD, compat.PTX_JIT,
                 compat.UNKNOWN, compat.NATIVE)
        block = min(checks, key=lambda c: order.index(c["verdict"]))
        block["extra_warmup"] = 0
        if self.profile_choice is not None:
            block["profile_choice"] = self.profile_choice
        self.verdict = block["verdict"]
        result["compatibility"] = block
        self.warnings.extend(block["warnings"])
        if self.verdict in compat.BLOCKING:
            return "{} ({})".format(block["reason"], self.verdict)
        return None

    # -- around the timed loop ----------------------------------------------------
    def apply_clocks(self, result, warmup):
        """Apply the clock policy (before the warm-up); returns the warm-up
        to run: at least one iteration when kernels are JIT-compiled."""
        if not self.active:
            return warmup
        self.clocks_reached = True
        if self.verdict == compat.PTX_JIT and warmup == 0:
            warmup = 1
            result["compatibility"]["extra_warmup"] = 1
            self._warn("PTX JIT: one untimed warm-up iteration added so that "
                       "kernel compilation stays out of the timings")
        if self.nvml is None or not self.used:
            if self.policy.name != clocks.OBSERVE:
                self._warn("clock policy {} NOT applied: NVML cannot reach the "
                           "GPU; the cell runs with the GPU's own "
                           "clocks".format(self.policy.text))
            result["gpu_clocks"] = self._clock_block()
            return warmup
        if self.group is not None and self.policy.name != clocks.OBSERVE:
            self.held, self.group_block, warning = self.group.hold(
                self.policy, self.used, self.state_path,
                self._datasheet_base, self.log)
            if warning:
                self._warn(warning)
            result["gpu_clocks"] = self._clock_block()
            return warmup
        self.session = clocks.ClockSession(
            self.nvml, self.policy, self.used, self.state_path,
            datasheet_base=self._datasheet_base, log=self.log)
        self.session.apply()
        result["gpu_clocks"] = self._clock_block()
        return warmup

    @staticmethod
    def _datasheet_base(info):
        entry = peaks.find(info.get("name"))
        return entry.base_mhz if entry else None

    def timed(self, step, warmup):
        """`step` with telemetry started when the timed iterations begin."""
        if not self.active or self.nvml is None or not self.used:
            return step
        self.reader = telemetry.NvmlReader(self.nvml,
                                           [h for _i, h, _info in self.used])
        self.sampler = telemetry.Sampler(self.reader, self.interval_s)

        def start():
            self.energy_start = self.reader.energy_mj()
            self.sampler.start()
        return telemetry.start_after_warmup(step, warmup, start)

    # -- after the loop ---------------------------------------------------------------
    def close(self, result):
        """Stop telemetry, restore the clocks, record both. NVML trouble and
        bugs here end up in the result, never cost the cell its result."""
        if not self.active:
            return
        try:
            self._stop_telemetry(result)
        except Exception as exc:  # telemetry must not cost the cell its result
            traceback.print_exc()
            self._warn("telemetry failed: {}: {}".format(type(exc).__name__,
                                                         exc))
        # A group's clocks stay set for its next cell (harness.gpu.clockgroup).
        if self.session is not None:
            try:
                self.session.restore()
            except Exception as exc:  # still record it and write the result
                traceback.print_exc()
                self._warn("restoring the GPU clocks failed ({}: {}); run "
                           "`invoke gpu-restore --state {}`".format(
                               type(exc).__name__, exc, self.state_path))
        result["gpu_clocks"] = self._clock_block()
        session = self.session or self.held
        if session is not None:
            result["warnings"].extend(w for w in session.warnings
                                      if w not in result["warnings"])
        result["warnings"].extend(self.warnings)
        if self.nvml is not None:
            self.nvml.close()

    def _stop_telemetry(self, result):
        if self.sampler is None or self.sampler.started_at is None and \
                self.energy_start is None:
            result["telemetry"] = None
            return
        if not self.sampler.stop():
            self.warnings.append("the telemetry thread did not stop in time")
        energy_end = self.reader.energy_mj()
        names = [info.get("name") for _i, _h, info in self.used]
        block = telemetry.summarize(
            self.sampler.samples, self.sampler.times, self.interval_s,
            self.energy_start, energy_end, self.reader.unavailable,
            self.reader.reason_call)
        block["missed_ticks"] = self.sampler.missed
        block["error"] = self.sampler.error
        self.telemetry = block
        result["telemetry"] = block
        self.warnings.extend(telemetry.warnings_for(block, names))

    def _clock_block(self):
        block = clock_block(self.policy.text, self.cell["device"])
        if not self.clocks_reached:
            return block
        if self.group_block is not None:
            return self._group_clock_block(block)
        if self.session is None:
            block["mode"] = "observe"
            block["reason"] = ("observe only: clocks read, nothing changed"
                               if self.policy.name == clocks.OBSERVE else
                               "policy NOT applied: NVML cannot reach the GPU")
            return block
        block.update(self.session.block())
        block["gpus"] = self.session.records
        if self.telemetry is not None:
            self._check_measured(block["gpus"])
        return block

    def _group_clock_block(self, block):
        """What the group's session did, as this cell saw it: the records
        of the apply before the group's first cell, the clocks checked before
        this cell's warm-up, and (at its end) its own timed window's SM
        clock; `state_status` is the group file's status when this cell
        ended (`changed`: still held for the cells after it)."""
        block.update(self.held.block())
        block["reason"] += ("; the policy is the worker's group's, set "
                            "once before the warm-up of its first GPU cell "
                            "({}) and restored when the worker ends".format(
                                self.group_block["first_cell"]))
        block["applied_by"] = "group"
        block["group"] = self.group_block
        block["gpus"] = self.group.records()
        if self.telemetry is not None:
            self._check_measured(block["gpus"])
        return block

    def _check_measured(self, records):
        """The real check of a clock policy: the SM clock while timing."""
        for record, entry in zip(records, self.telemetry["gpus"]):
            sm = entry.get("sm_clock_mhz")
            record["timed_window_sm_clock_mhz"] = sm
            target = record.get("target_mhz")
            if not record.get("applied") or not target or not sm:
                continue
            off = abs(sm["mean"] - target) / float(target)
            record["matches_target"] = off <= CLOCK_TOLERANCE
            message = ("GPU {}: the SM clock averaged {:.0f} MHz over the "
                       "timed window, not the {} MHz the clock policy "
                       "set".format(record["index"], sm["mean"], target))
            if off > CLOCK_TOLERANCE and message not in self.warnings:
                self.warnings.append(message)

    def summarize(self, result, backend=None):
        """MFU and the PTX-JIT compile estimate, once timing is summarised."""
        if not self.active:
            return
        timing = result.get("timing") or {}
        compatibility = result.get("compatibility")
        if compatibility and compatibility["verdict"] == compat.PTX_JIT and \
                timing.get("warmup_s"):
            first = timing["warmup_s"][0]
            compatibility["first_warmup_s"] = first
            compatibility["jit_compile_estimate_s"] = (
                first - timing["median_s"] if timing.get("median_s") else None)
        model = result.get("model")
        if model is None or not self.used or not timing.get("mean_s"):
            return
        math_mode = None
        if backend is not None:
            try:
                math_mode = backend.math_mode("gpu")
            except Exception:  # a broken framework must not lose the result
                math_mode = None
        model["math_mode"] = math_mode
        autocast = (result.get("precision") or {}).get("autocast")
        measured = [(e.get("sm_clock_mhz") or {}).get("mean")
                    for e in (self.telemetry or {}).get("gpus", [])]
        model["mfu"] = peaks.mfu(
            model["executed_flops_per_iteration"], timing.get("mean_s"),
            [info.get("name") for _i, _h, info in self.used], measured,
            math_mode, _uses_convolution(networks.get(self.cell["network"])),
            autocast)
