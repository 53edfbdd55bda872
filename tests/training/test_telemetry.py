"""Hardware telemetry (real psutil / NVML readings, never faked) and the step timer's split and MFU."""

from __future__ import annotations

import time

import pytest

from observatory.contract import METRIC_NAME_RE
from training.telemetry import HardwareMonitor, StepTimer, open_nvml, peak_flops, transformer_flops_per_token


def test_a_sample_has_real_host_numbers_and_contract_names():
    mon = HardwareMonitor(interval_s=0.05)
    s = mon.sample()
    for key in ("hw/cpu_percent", "hw/process_cpu_percent", "hw/rss_bytes", "hw/host_mem_percent"):
        assert key in s and isinstance(s[key], float)
    assert s["hw/rss_bytes"] > 10e6 and 0 < s["hw/host_mem_percent"] <= 100
    assert all(METRIC_NAME_RE.match(k) for k in s)


def test_gpu_numbers_are_present_exactly_when_nvml_is():
    mon = HardwareMonitor()
    s = mon.sample()
    gpu_keys = [k for k in s if k.startswith("hw/gpu")]
    if open_nvml()[0] is None:
        assert gpu_keys == [] and mon.gpu_count == 0 and mon.describe()["gpu_backend"]
    else:
        assert mon.gpu_count >= 1
        assert {"hw/gpu0/util_percent", "hw/gpu0/mem_used_bytes", "hw/gpu0/temperature_c"} <= set(gpu_keys)
        assert s["hw/gpu0/mem_total_bytes"] > 1e9 and 0 <= s["hw/gpu0/util_percent"] <= 100


def test_background_thread_publishes_and_stops():
    with HardwareMonitor(interval_s=0.02) as mon:
        deadline = time.time() + 5
        while not mon.latest() and time.time() < deadline:
            time.sleep(0.01)
        assert "hw/cpu_percent" in mon.latest()
        thread = mon._thread
    assert not thread.is_alive()


def test_step_timer_splits_data_compute_host():
    t = StepTimer(tokens_per_step=1000, flops_per_token=6e6, peak_flops_per_s=1e12)
    time.sleep(0.03)
    t.mark("data")
    with t.phase("compute"):
        time.sleep(0.05)
    time.sleep(0.02)
    m = t.end()
    assert m["time/data_s"] == pytest.approx(0.03, abs=0.015)
    assert m["time/compute_s"] == pytest.approx(0.05, abs=0.015)
    assert m["time/host_s"] == pytest.approx(0.02, abs=0.015)
    assert m["time/step_s"] == pytest.approx(m["time/data_s"] + m["time/compute_s"] + m["time/host_s"])
    assert m["throughput/tokens_per_second"] == pytest.approx(1000 / m["time/step_s"])
    assert m["throughput/mfu"] == pytest.approx(m["throughput/tokens_per_second"] * 6e6 / 1e12)
    time.sleep(0.01)
    assert t.end()["time/step_s"] < 0.05  # the next step starts where the last one ended


def test_no_mfu_without_flops():
    assert "throughput/mfu" not in StepTimer(tokens_per_step=10).end()


def test_peak_flops_order_override_env_table_cpu(monkeypatch):
    monkeypatch.delenv("OBS_PEAK_FLOPS", raising=False)
    assert peak_flops("NVIDIA H100 80GB HBM3", 8)[0] == 8 * 989e12
    flops, why = peak_flops("cpu")
    assert flops > 1e9 and "cpu assumption" in why
    monkeypatch.setenv("OBS_PEAK_FLOPS", "5e12")
    assert peak_flops("NVIDIA H100", 8) == (5e12, "env OBS_PEAK_FLOPS")
    assert peak_flops("cpu", override=7e11) == (7e11, "config")


def test_flops_per_token_formula():
    assert transformer_flops_per_token(1_000_000, 2, 128, 64) == 6e6 + 12 * 2 * 128 * 64


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
    assert s["hw/gpu0/util_percent"] == 87 and s["hw/gpu0/power_watts"] == pytest.approx(512.345)
    assert s["hw/gpu0/mem_total_bytes"] == 141 * 2**30 and s["hw/gpu0/temperature_c"] == 61
    assert "hw/gpu1/power_watts" not in s and s["hw/gpu1/util_percent"] == 87
