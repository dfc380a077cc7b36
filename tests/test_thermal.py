"""Thermal back-off (edgellm.thermal) over a fake sysfs tree: what the sensor reads, the
policy's hot -> cool transitions, and on the real engine that the active compute thread count
follows it and that fewer threads really compute (per-thread CPU time from /proc)."""
import os
import time
from pathlib import Path

import pytest

from edgellm.thermal import SysfsThermal, ThermalBackoff, backoff_default


class FakeSysfs:
    """A tmp tree shaped like /sys: thermal zones and per-CPU cpufreq files."""

    def __init__(self, root: Path, n_cpus: int = 4, max_khz: int = 1800000):
        self.root = root
        self.n_cpus = n_cpus
        self.max_khz = max_khz
        self.zone(0, 45.0, "cpu-thermal")
        for c in range(n_cpus):
            d = self._cpufreq(c)
            d.mkdir(parents=True)
            (d / "cpuinfo_max_freq").write_text(f"{max_khz}\n")
            (d / "scaling_max_freq").write_text(f"{max_khz}\n")
            (d / "scaling_cur_freq").write_text(f"{max_khz}\n")

    def _cpufreq(self, c: int) -> Path:
        return self.root / f"sys/devices/system/cpu/cpu{c}/cpufreq"

    def zone(self, i: int, celsius: float, kind: str = "cpu-thermal"):
        d = self.root / f"sys/class/thermal/thermal_zone{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "type").write_text(kind + "\n")
        (d / "temp").write_text(f"{int(celsius * 1000)}\n")

    def clock(self, khz: int, cap: int = None):
        for c in range(self.n_cpus):
            (self._cpufreq(c) / "scaling_cur_freq").write_text(f"{khz}\n")
            (self._cpufreq(c) / "scaling_max_freq").write_text(f"{cap or self.max_khz}\n")

    def pi_throttled(self, flags: int):
        p = self.root / "sys/devices/platform/soc/soc:firmware/get_throttled"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{flags:x}\n")

    def x86_throttle_count(self, n: int):
        p = self.root / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{n}\n")

    def hot(self):
        self.zone(0, 84.5)
        self.clock(self.max_khz * 6 // 10)

    def cool(self):
        self.zone(0, 55.0)
        self.clock(self.max_khz)


@pytest.fixture
def sysfs(tmp_path):
    return FakeSysfs(tmp_path)


def test_sensor_reads_temperature_clock_cap_and_counters(sysfs):
    sensor = SysfsThermal(str(sysfs.root))
    assert sensor.available()
    r = sensor.read()
    assert r.temp_c == 45.0 and r.max_freq_khz == 1800000 and r.cur_freq_khz == 1800000
    assert not r.throttled

    sysfs.zone(1, 61.25, "gpu-thermal")  # the hottest zone counts
    assert sensor.read().temp_c == 61.25

    sysfs.clock(1000000)
    assert sensor.read(busy=True).throttled          # a low clock under load
    assert not sensor.read(busy=False).throttled     # an idle governor's choice
    sysfs.clock(1000000, cap=1200000)                 # a cooling device capped the policy
    assert any("capped at 1200 MHz" in x for x in sensor.read(busy=False).reasons)
    sysfs.clock(1800000)

    sysfs.pi_throttled(0x50000)  # happened earlier (sticky bits), not now
    assert not sensor.read().throttled
    sysfs.pi_throttled(0x50004)  # throttled now
    assert "firmware get_throttled=0x50004" in sensor.read().reasons
    sysfs.pi_throttled(0)

    sysfs.x86_throttle_count(10)
    assert not sensor.read().throttled   # first reading: no change to compare with
    assert not sensor.read().throttled
    sysfs.x86_throttle_count(13)
    assert sensor.read().reasons == ["cpu0 core_throttle_count +3"]
    assert not sensor.read().throttled


def test_sensor_on_a_machine_without_sysfs(tmp_path):
    sensor = SysfsThermal(str(tmp_path))
    assert not sensor.available()
    r = sensor.read()
    assert r.temp_c is None and not r.throttled
    assert not backoff_default(str(tmp_path))
    with pytest.raises(ValueError):
        SysfsThermal(str(tmp_path), clock_ratio=0)


class Threads:
    """Stands in for an LLM: a pool size and its active count."""

    def __init__(self, n: int):
        self.n_threads = n
        self.n_threads_active = n
        self.closed = False
        self.calls = []

    def set_n_threads(self, k: int):
        assert 1 <= k <= self.n_threads
        self.calls.append(k)
        self.n_threads_active = k

    def stats(self):
        return {"running": 1, "waiting": 0}


def test_policy_backs_off_when_hot_and_recovers_when_cool(sysfs):
    llm = Threads(4)
    b = ThermalBackoff(llm, SysfsThermal(str(sysfs.root)), recover_after=2)
    assert [b.step() for _ in range(2)] == [4, 4]    # cool, already at the full count
    sysfs.hot()
    assert [b.step() for _ in range(5)] == [3, 2, 1, 1, 1]   # one thread a reading, floor 1
    sysfs.zone(0, 75.0)
    sysfs.clock(sysfs.max_khz)        # between the thresholds: hold
    assert [b.step() for _ in range(3)] == [1, 1, 1]
    sysfs.cool()
    assert [b.step() for _ in range(8)] == [1, 2, 2, 3, 3, 4, 4, 4]
    sysfs.pi_throttled(0x4)           # a throttle flag alone is hot, whatever the temperature
    assert b.step() == 3
    assert b.last.throttled
    assert llm.calls == [3, 2, 1, 2, 3, 4, 3]


def test_policy_checks_its_arguments():
    llm = Threads(2)
    with pytest.raises(ValueError):
        ThermalBackoff(llm, hot_c=70, cool_c=70)
    with pytest.raises(ValueError):
        ThermalBackoff(llm, min_threads=0)
    assert ThermalBackoff(llm, min_threads=8).min_threads == 2


def _thread_ticks() -> dict:
    """CPU time (utime + stime, clock ticks) of each thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def _computing_threads(llm, params, engine_threads) -> int:
    """How many of the engine's threads used any CPU while llm generated."""
    before = _thread_ticks()
    llm.generate("The history of the city of Paris", params)
    after = _thread_ticks()
    return sum(1 for t in engine_threads if after.get(t, 0) - before.get(t, 0) > 0)


@pytest.mark.real_model
@pytest.mark.slow
def test_engine_runs_fewer_threads_while_throttled(smollm2_path, sysfs):
    from edgellm import LLM, InvalidRequestError, SamplingParams

    params = SamplingParams(max_tokens=96, temperature=0, ignore_eos=True)
    existing = set(os.listdir("/proc/self/task"))
    with LLM(str(smollm2_path), n_ctx=256, n_threads=4) as llm:
        # the engine's thread and the pool's 3 workers (the caller is the pool's thread 0)
        engine_threads = set(os.listdir("/proc/self/task")) - existing
        assert len(engine_threads) >= 4
        assert llm.n_threads == 4 and llm.n_threads_active == 4
        full = llm.generate("The capital of France is", SamplingParams(max_tokens=12, temperature=0)).text
        b = ThermalBackoff(llm, SysfsThermal(str(sysfs.root)), recover_after=1)
        sysfs.hot()
        assert [b.step() for _ in range(4)] == [3, 2, 1, 1]
        assert llm.n_threads_active == 1
        # one thread computes: the engine thread alone, the workers sleep
        assert _computing_threads(llm, params, engine_threads) == 1
        # and the answer is the same
        assert llm.generate("The capital of France is",
                            SamplingParams(max_tokens=12, temperature=0)).text == full
        sysfs.cool()
        assert [b.step() for _ in range(4)] == [2, 3, 4, 4]
        assert llm.n_threads_active == 4
        assert _computing_threads(llm, params, engine_threads) >= 3
        with pytest.raises(InvalidRequestError):
            llm.set_n_threads(5)
        with pytest.raises(InvalidRequestError):
            llm.set_n_threads(0)
        with pytest.raises(InvalidRequestError):
            llm.set_n_threads("2")
        assert llm.n_threads_active == 4
    with pytest.raises(InvalidRequestError):
        llm.set_n_threads(2)  # closed


@pytest.mark.real_model
def test_serve_loader_starts_the_monitor(smollm2_path, sysfs):
    from edgellm.server.admission import default_loader
    from edgellm.server.config import ServerConfig

    sysfs.hot()
    config = ServerConfig(model=str(smollm2_path), threads=3, ctx_size=256, parallel=2,
                          thermal_backoff=True, thermal_root=str(sysfs.root),
                          thermal_interval=0.05)
    llm = default_loader(config)
    try:
        deadline = time.monotonic() + 20
        while llm.n_threads_active > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.n_threads_active == 1 and llm.thermal.last.temp_c == 84.5
        sysfs.cool()
        deadline = time.monotonic() + 20
        while llm.n_threads_active < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.n_threads_active == 3
    finally:
        llm.close()
    thread = llm.thermal._thread
    if thread is not None:
        thread.join(timeout=5)
        assert not thread.is_alive()  # ends by itself once the engine is closed


def test_serve_option_sets_the_config(tmp_path):
    from edgellm.commands.serve import _thermal_options
    from edgellm.server.config import ServerConfig

    c = ServerConfig(model="m")
    _thermal_options(c, "on", str(tmp_path))
    assert c.thermal_backoff and c.thermal_root == str(tmp_path)
    _thermal_options(c, "off", "/")
    assert not c.thermal_backoff
    _thermal_options(c, "auto", str(tmp_path))   # nothing to read there
    assert not c.thermal_backoff
