"""Hardware telemetry on a ~1 Hz background thread (psutil, NVML), and a step timer giving tokens/s and MFU.

GPU numbers come only from NVML (pynvml when installed, else libnvidia-ml through ctypes); with no GPU or no
NVML they are absent, never faked.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time

import psutil

from observatory import contract
from training.flops import mfu

# ---------------------------------------------------------------------------------------------- NVML
class _CtypesNvml:
    """The handful of NVML calls we need, straight from libnvidia-ml (ships with the driver), pynvml-shaped."""

    class _Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    class _Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    NVML_TEMPERATURE_GPU = 0

    def __init__(self):
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._call("nvmlInit_v2")

    def _call(self, name, *args):
        rc = getattr(self._lib, name)(*args)
        if rc != 0:
            raise OSError(f"{name} failed with NVML status {rc}")

    def nvmlDeviceGetCount(self):
        n = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def nvmlDeviceGetHandleByIndex(self, i):
        h = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i), ctypes.byref(h))
        return h

    def nvmlDeviceGetUtilizationRates(self, h):
        u = self._Util()
        self._call("nvmlDeviceGetUtilizationRates", h, ctypes.byref(u))
        return u

    def nvmlDeviceGetMemoryInfo(self, h):
        m = self._Mem()
        self._call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(m))
        return m

    def nvmlDeviceGetPowerUsage(self, h):
        mw = ctypes.c_uint()
        self._call("nvmlDeviceGetPowerUsage", h, ctypes.byref(mw))
        return mw.value

    def nvmlDeviceGetTemperature(self, h, sensor):
        t = ctypes.c_uint()
        self._call("nvmlDeviceGetTemperature", h, ctypes.c_int(sensor), ctypes.byref(t))
        return t.value


def open_nvml():
    """(nvml module-like object, backend name), or (None, reason) when there is no usable NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml, "pynvml"
    except ImportError:
        pass
    except Exception as e:  # pynvml present but no driver/GPU
        return None, f"pynvml: {e}"
    try:
        return _CtypesNvml(), "ctypes:libnvidia-ml.so.1"
    except OSError as e:
        return None, f"no NVML ({e})"


def _gpu_sample(nvml, handles) -> dict[str, float]:
    out = {}
    for i, h in enumerate(handles):
        # Each reading on its own: MIG slices and some boards refuse power or utilisation queries.
        for fn in (lambda: {"util_percent": nvml.nvmlDeviceGetUtilizationRates(h).gpu,
                            "mem_bandwidth_util_percent": nvml.nvmlDeviceGetUtilizationRates(h).memory},
                   lambda: (lambda m: {"mem_used_bytes": m.used, "mem_total_bytes": m.total,
                                       "mem_percent": 100.0 * m.used / max(1, m.total)})(
                       nvml.nvmlDeviceGetMemoryInfo(h)),
                   lambda: {"power_watts": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0},
                   lambda: {"temperature_c": nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)}):
            try:
                out.update({contract.gpu_metric(i, k): float(v) for k, v in fn().items()})
            except Exception:
                pass
    return out


# ---------------------------------------------------------------------------------------------- monitor
class HardwareMonitor:
    """Samples every `interval_s` on a daemon thread; `due()` hands the newest readings to the loop (hw/...)."""

    def __init__(self, interval_s: float = 1.0, gpu: bool = True):
        self.interval_s = interval_s
        self._proc = psutil.Process()
        self._lock = threading.Lock()
        self._latest: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handed_out_at = 0.0
        self.errors = 0
        self.nvml, self.gpu_backend, self._handles = None, "disabled", []
        if gpu:
            self.nvml, self.gpu_backend = open_nvml()
            if self.nvml is not None:
                try:
                    self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i)
                                     for i in range(self.nvml.nvmlDeviceGetCount())]
                except Exception as e:
                    self.nvml, self.gpu_backend = None, f"NVML device query failed: {e}"
        # cpu_percent(None) measures since the previous call; prime both so the first sample means something.
        psutil.cpu_percent(None)
        self._proc.cpu_percent(None)

    def sample(self) -> dict[str, float]:
        vm = psutil.virtual_memory()
        mem = self._proc.memory_info()
        out = {contract.HW_CPU_PERCENT: psutil.cpu_percent(None),
               contract.HW_PROCESS_CPU: self._proc.cpu_percent(None),  # can exceed 100: one per busy core
               contract.HW_RSS: float(mem.rss),
               contract.HW_HOST_MEM_PERCENT: vm.percent,
               contract.HW_HOST_MEM_USED: float(vm.total - vm.available),
               contract.HW_LOAD1: os.getloadavg()[0],
               contract.HW_PROCESS_THREADS: float(self._proc.num_threads())}
        if self.nvml is not None:
            out.update(_gpu_sample(self.nvml, self._handles))
        return {k: float(v) for k, v in out.items()}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                s = self.sample()
            except Exception:  # telemetry must never take training down
                self.errors += 1
                continue
            with self._lock:
                self._latest = s

    def start(self) -> "HardwareMonitor":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hw-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def latest(self) -> dict[str, float]:
        with self._lock:
            return dict(self._latest)

    def due(self) -> dict[str, float]:
        """The newest readings once per interval, else {}: steps are faster than 1 Hz, readings are not."""
        now = time.monotonic()
        if now - self._handed_out_at < self.interval_s:
            return {}
        self._handed_out_at = now
        return self.latest()


# ---------------------------------------------------------------------------------------------- FLOPs
# Dense bf16 peak per chip, from vendor data sheets (no sparsity). Matched as a substring of jax's device_kind.
PEAK_FLOPS_BY_DEVICE = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "A10G": 125e12,
                        "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
                        "TPU v6": 918e12}
MATMUL_N = 512  # CPU peak: the best of many n x n fp32 matmuls (a quiet moment on a shared host is enough)


@functools.lru_cache(maxsize=1)
def measured_matmul_flops(n: int = MATMUL_N, budget_s: float = 1.5, max_reps: int = 200) -> float:
    """Best fp32 matmul FLOP/s of the default device: the peak of hardware that publishes none (a CPU).

    Best of as many repetitions as fit in `budget_s` (at least 3): other processes on the host slow some of
    them, and the fastest is the closest to what the cores can do."""
    import jax

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jax.numpy.float32)
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(a))
    best, start, reps = float("inf"), time.perf_counter(), 0
    while reps < 3 or (reps < max_reps and time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a))
        best = min(best, time.perf_counter() - t0)
        reps += 1
    return 2 * n ** 3 / best


def peak_flops(device_kind: str | None = None, n_devices: int = 1,
               override: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s of the whole job, or None when unknown; how it was decided).

    Order: override (train.peak_flops), $OBS_PEAK_FLOPS, the data-sheet table (per chip x chips), a measured
    matmul on CPU (not x devices: fake host devices share the same cores). An accelerator missing from the
    table gives None, and no MFU is published rather than a guessed one."""
    if override:
        return float(override), "config"
    env = os.environ.get("OBS_PEAK_FLOPS")
    if env:
        try:
            return float(env), "env OBS_PEAK_FLOPS"
        except ValueError:
            pass
    kind = (device_kind or "").lower()
    if kind == "cpu":
        return measured_matmul_flops(), f"cpu: measured {MATMUL_N}x{MATMUL_N} fp32 matmul"
    for name, flops in PEAK_FLOPS_BY_DEVICE.items():
        if name.lower() in kind:
            return flops * n_devices, f"{name} dense bf16 x {n_devices}"
    return None, f"unknown device kind {device_kind!r}: set train.peak_flops for MFU"


# ---------------------------------------------------------------------------------------------- step timer
PHASES = ("data", "compute", "host")


class StepTimer:
    """Splits wall time between consecutive `end()` calls into data / compute / host.

    Call `mark("data")` after fetching the batch, `mark("compute")` after blocking on the step's result (with
    JAX's async dispatch, where you block is where compute shows up); whatever is left is host time.
    """

    def __init__(self, tokens_per_step: int, flops_per_token: float = 0.0, peak_flops_per_s: float | None = None):
        self.tokens_per_step = tokens_per_step
        self.flops_per_token = flops_per_token
        self.peak = peak_flops_per_s
        self._t0 = self._last = time.perf_counter()
        self._acc = dict.fromkeys(PHASES, 0.0)
        self._skip = False

    def start(self) -> None:
        """After a pause, compile, checkpoint, eval or command: the next `end()` is not a throughput sample.

        A step that spans such an interruption has no honest duration (it may look long, or short when its
        start was reset mid-flight), so it publishes no timing; the clock restarts when it completes."""
        self._t0 = self._last = time.perf_counter()
        self._acc = dict.fromkeys(PHASES, 0.0)
        self._skip = True

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self._acc[phase] += now - self._last
        self._last = now

    def end(self) -> dict[str, float]:
        """Timing of the step completed just now: the interval since the previous completion (empty after start)."""
        now = time.perf_counter()
        if self._skip:
            self._skip = False
            self._t0 = self._last = now
            self._acc = dict.fromkeys(PHASES, 0.0)
            return {}
        total = max(now - self._t0, 1e-12)
        data, compute = self._acc["data"], self._acc["compute"]
        tps = self.tokens_per_step / total
        out = {contract.M_STEP_TIME: total, contract.M_DATA_TIME: data, contract.M_COMPUTE_TIME: compute,
               contract.M_HOST_TIME: max(0.0, total - data - compute), contract.M_TOKENS_PER_S: tps}
        u = mfu(tps, self.flops_per_token, self.peak)
        if u is not None:
            out[contract.M_MFU] = u
        self._t0 = self._last = now
        self._acc = dict.fromkeys(PHASES, 0.0)
        return out
