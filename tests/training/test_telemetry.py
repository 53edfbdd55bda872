"""Hardware telemetry (real psutil / NVML readings, never faked) and the step timer's split and MFU."""

from __future__ import annotations

import pytest

from observatory import contract
from observatory.contract import METRIC_NAME_RE
from training import telemetry
from training.telemetry import HardwareMonitor, StepTimer, open_nvml, peak_flops


def test_a_sample_has_real_host_numbers_and_contract_names():
    mon = HardwareMonitor(interval_s=0.05)
    s = mon.sample()
    for key in (contract.HW_CPU_PERCENT, contract.HW_PROCESS_CPU, contract.HW_RSS, contract.HW_HOST_MEM_PERCENT):
        assert key in s and isinstance(s[key], float)
    assert s[contract.HW_RSS] > 10e6 and 0 < s[contract.HW_HOST_MEM_PERCENT] <= 100
    assert all(METRIC_NAME_RE.match(k) for k in s)


def test_gpu_numbers_are_present_exactly_when_nvml_is():
    mon = HardwareMonitor()
    s = mon.sample()
    gpu_keys = [k for k in s if k.startswith("hw/gpu")]
    if open_nvml()[0] is None:
        assert gpu_keys == [] and mon.nvml is None and mon.gpu_backend  # the backend says why
    else:
        gpu0 = {contract.gpu_metric(0, k) for k in ("util_percent", "mem_used_bytes", "temperature_c")}
        assert gpu0 <= set(gpu_keys)
        assert s[contract.gpu_metric(0, "mem_total_bytes")] > 1e9
        assert 0 <= s[contract.gpu_metric(0, "util_percent")] <= 100


def test_background_thread_publishes_and_stops(until):
    mon = HardwareMonitor(interval_s=0.02).start()
    try:
        until(mon.latest, 30, "a first sample")
        assert contract.HW_CPU_PERCENT in mon.latest()
        thread = mon._thread
    finally:
        mon.stop()
    assert not thread.is_alive()


class FakeClock:
    """perf_counter that moves only when told to: the timer's arithmetic, not the machine's speed."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_step_timer_splits_data_compute_host(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(telemetry.time, "perf_counter", clock)
    t = StepTimer(tokens_per_step=1000, flops_per_token=6e6, peak_flops_per_s=1e12)
    clock.now += 0.03
    t.mark("data")
    clock.now += 0.05
    t.mark("compute")
    clock.now += 0.02
    m = t.end()
    assert m[contract.M_DATA_TIME] == pytest.approx(0.03)
    assert m[contract.M_COMPUTE_TIME] == pytest.approx(0.05)
    assert m[contract.M_HOST_TIME] == pytest.approx(0.02)
    assert m[contract.M_STEP_TIME] == pytest.approx(0.1)
    assert m[contract.M_TOKENS_PER_S] == pytest.approx(1000 / 0.1)
    assert m[contract.M_MFU] == pytest.approx(1000 / 0.1 * 6e6 / 1e12)
    clock.now += 0.01
    assert t.end()[contract.M_STEP_TIME] == pytest.approx(0.01)  # the next step starts where the last one ended
    clock.now += 5.0
    t.start()  # after a pause, save or command: the step spanning it is no throughput sample...
    clock.now += 0.001
    assert t.end() == {}
    clock.now += 0.04  # ...and the clock restarts at its completion
    assert t.end()[contract.M_STEP_TIME] == pytest.approx(0.04)


def test_a_fresh_timer_measures_its_first_step_and_mfu_is_absent_without_a_peak():
    assert contract.M_STEP_TIME in StepTimer(tokens_per_step=10).end()
    assert contract.M_MFU not in StepTimer(tokens_per_step=10, flops_per_token=1e6, peak_flops_per_s=None).end()


def test_no_mfu_without_flops():
    assert contract.M_MFU not in StepTimer(tokens_per_step=10).end()


def test_peak_flops_order_override_env_table_cpu(monkeypatch):
    monkeypatch.delenv("OBS_PEAK_FLOPS", raising=False)
    assert peak_flops("NVIDIA H100 80GB HBM3", 8)[0] == 8 * 989e12
    flops, why = peak_flops("cpu")
    assert flops > 1e8 and "measured" in why  # a real matmul on this host, not an assumed clock rate
    assert peak_flops("TPU v5 lite", 4)[0] == 4 * 197e12
    assert peak_flops("NVIDIA H200", 1)[0] == 989e12
    assert peak_flops("Some Future Accelerator", 8)[0] is None  # unknown: no MFU rather than a guess
    monkeypatch.setenv("OBS_PEAK_FLOPS", "5e12")
    assert peak_flops("NVIDIA H100", 8) == (5e12, "env OBS_PEAK_FLOPS")
    assert peak_flops("cpu", override=7e11) == (7e11, "config")


def test_gpu_readings_map_nvml_units_and_survive_a_refused_query():
    """NVML stand-in at the driver edge (no GPU here): units and names, and one refused query loses one reading."""
    from types import SimpleNamespace

    from training.telemetry import _gpu_sample

    class Nvml:
        NVML_TEMPERATURE_GPU = 0

        def nvmlDeviceGetUtilizationRates(self, h):
            return SimpleNamespace(gpu=87, memory=40)

        def nvmlDeviceGetMemoryInfo(self, h):
            return SimpleNamespace(used=30 * 2**30, total=141 * 2**30, free=111 * 2**30)

        def nvmlDeviceGetPowerUsage(self, h):
            if h == "mig":
                raise OSError("not supported")
            return 512_345  # milliwatts

        def nvmlDeviceGetTemperature(self, h, sensor):
            return 61

    s = _gpu_sample(Nvml(), ["full", "mig"])
    g0, g1 = (lambda name: contract.gpu_metric(0, name)), (lambda name: contract.gpu_metric(1, name))
    assert s[g0("util_percent")] == 87 and s[g0("power_watts")] == pytest.approx(512.345)
    assert s[g0("mem_total_bytes")] == 141 * 2**30 and s[g0("temperature_c")] == 61
    assert g1("power_watts") not in s and s[g1("util_percent")] == 87
