"""Thermal back-off: run fewer compute threads while the SoC throttles, all of them again once
it has cooled (`edgellm serve --thermal-backoff`, docs/raspberry-pi.md).

A throttled board runs every core at a lower clock; keeping all threads busy then mostly adds
heat, and each matmul waits for its slowest thread. The monitor reads Linux's sysfs under a
root folder (``/`` on a real machine, a temporary tree in the tests):

- ``sys/class/thermal/thermal_zone*/temp``: millidegrees Celsius; the hottest zone counts.
- ``sys/devices/system/cpu/cpu*/cpufreq/``: ``scaling_cur_freq`` against ``cpuinfo_max_freq``
  (a clock well below the maximum while the engine is busy: throttled) and ``scaling_max_freq``
  below ``cpuinfo_max_freq`` (a cooling device capped the policy).
- throttle counters where present: x86's ``cpu*/thermal_throttle/*_throttle_count`` (growing
  since the last reading: throttled) and the Raspberry Pi firmware's
  ``devices/platform/soc/soc:firmware/get_throttled`` (bits 1-3: frequency capped, throttled
  now, soft temperature limit).

Policy, one reading every `interval` seconds: hot (a throttle signal, or the temperature at or
above `hot_c`) takes one thread away, down to `min_threads`; cool (no signal and the
temperature at or below `cool_c`) for `recover_after` readings in a row gives one back, up to
the pool's size. Between the two thresholds nothing changes, so it does not oscillate.
The engine's pool keeps its size; `LLM.set_n_threads` only changes how many of its threads
take work (cpp/src/common/thread_pool.h `set_active`).
"""
import glob
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, List, Optional

log = logging.getLogger("edgellm.thermal")

# Raspberry Pi firmware get_throttled bits that mean "slower now": ARM frequency capped,
# currently throttled, soft temperature limit active (bit 0, under-voltage, comes with bit 2).
_PI_THROTTLED_NOW = 0x2 | 0x4 | 0x8


@dataclass
class ThermalReading:
    """One look at the sensors; `reasons` is empty when nothing says the CPU is throttled."""
    temp_c: Optional[float] = None        # hottest thermal zone, None without zones
    cur_freq_khz: Optional[int] = None    # lowest scaling_cur_freq over the CPUs
    max_freq_khz: Optional[int] = None    # cpuinfo_max_freq (the hardware's maximum)
    reasons: List[str] = field(default_factory=list)

    @property
    def throttled(self) -> bool:
        return bool(self.reasons)


def _read_int(path: str, base: int = 10) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip(), base)
    except (OSError, ValueError):
        return None


class SysfsThermal:
    """Reads the thermal and cpufreq files under `root` (see the module's docstring)."""

    def __init__(self, root: str = "/", clock_ratio: float = 0.85):
        if not 0 < clock_ratio <= 1:
            raise ValueError(f"clock_ratio must be in (0, 1], got {clock_ratio}")
        self.root = os.path.abspath(root)
        self.clock_ratio = clock_ratio
        self._counts: dict = {}  # throttle counter path -> last value

    def _glob(self, pattern: str) -> List[str]:
        return sorted(glob.glob(os.path.join(self.root, pattern)))

    def available(self) -> bool:
        """Whether there is anything to read (thermal zones or cpufreq)."""
        return bool(self._glob("sys/class/thermal/thermal_zone*/temp")
                    or self._glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"))

    def read(self, busy: bool = True) -> ThermalReading:
        """`busy`: the engine has work, so a low clock is throttling rather than an idle
        governor's choice."""
        r = ThermalReading()
        temps = [t for t in (_read_int(p) for p in self._glob("sys/class/thermal/thermal_zone*/temp"))
                 if t is not None]
        if temps:
            r.temp_c = max(temps) / 1000.0
        for d in self._glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq"):
            hw_max = _read_int(os.path.join(d, "cpuinfo_max_freq"))
            if not hw_max:
                continue
            r.max_freq_khz = max(r.max_freq_khz or 0, hw_max)
            cur = _read_int(os.path.join(d, "scaling_cur_freq"))
            cap = _read_int(os.path.join(d, "scaling_max_freq"))
            cpu = os.path.basename(os.path.dirname(d))
            if cur is not None:
                r.cur_freq_khz = cur if r.cur_freq_khz is None else min(r.cur_freq_khz, cur)
                if busy and cur < self.clock_ratio * hw_max:
                    r.reasons.append(f"{cpu} at {cur // 1000} MHz of {hw_max // 1000} MHz")
            if cap is not None and cap < hw_max:
                r.reasons.append(f"{cpu} capped at {cap // 1000} MHz of {hw_max // 1000} MHz")
        for p in self._glob("sys/devices/system/cpu/cpu[0-9]*/thermal_throttle/*_throttle_count"):
            n = _read_int(p)
            if n is None:
                continue
            last = self._counts.get(p)
            self._counts[p] = n
            if last is not None and n > last:
                cpu = p[len(self.root):].split("/")[5]
                r.reasons.append(f"{cpu} {os.path.basename(p)} +{n - last}")
        # the firmware driver prints the flags in hex without a prefix ("50005")
        flags = _read_int(os.path.join(self.root, "sys/devices/platform/soc/soc:firmware/get_throttled"), 16)
        if flags is not None and flags & _PI_THROTTLED_NOW:
            r.reasons.append(f"firmware get_throttled=0x{flags:x}")
        return r


class ThermalBackoff:
    """Lowers and restores an engine's active compute threads from `sensor` readings.

    `llm` is an edgellm.LLM or AsyncLLM (anything with n_threads, n_threads_active,
    set_n_threads, stats and closed). `step()` takes one reading and acts on it (the tests
    drive it); `start()` runs it every `interval` seconds in a daemon thread until `stop()` or
    the engine closes.
    """

    def __init__(self, llm, sensor: Optional[SysfsThermal] = None, *, hot_c: float = 80.0,
                 cool_c: float = 70.0, min_threads: int = 1, recover_after: int = 3,
                 interval: float = 2.0, on_change: Optional[Callable[[int, ThermalReading], None]] = None):
        if cool_c >= hot_c:
            raise ValueError(f"cool_c ({cool_c}) must be below hot_c ({hot_c})")
        if min_threads < 1 or recover_after < 1 or interval <= 0:
            raise ValueError("min_threads and recover_after must be >= 1 and interval > 0")
        self.llm = llm
        self.sensor = sensor or SysfsThermal()
        self.hot_c, self.cool_c = hot_c, cool_c
        self.max_threads = int(llm.n_threads)
        self.min_threads = min(min_threads, self.max_threads)
        self.recover_after = recover_after
        self.interval = interval
        self.on_change = on_change
        self.last: Optional[ThermalReading] = None
        self._cool_streak = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _busy(self) -> bool:
        try:
            s = self.llm.stats()
        except Exception:  # noqa: BLE001 - a closed engine: the loop ends on `closed`
            return False
        return bool(s.get("running", 0) or s.get("waiting", 0))

    def step(self) -> int:
        """One reading and its action; returns the active thread count afterwards."""
        r = self.sensor.read(busy=self._busy())
        self.last = r
        active = int(self.llm.n_threads_active)
        hot = r.throttled or (r.temp_c is not None and r.temp_c >= self.hot_c)
        cool = not r.throttled and (r.temp_c is None or r.temp_c <= self.cool_c)
        target = active
        if hot:
            self._cool_streak = 0
            target = max(self.min_threads, active - 1)
        elif cool:
            self._cool_streak += 1
            if self._cool_streak >= self.recover_after and active < self.max_threads:
                target = active + 1
                self._cool_streak = 0
        else:
            self._cool_streak = 0
        if target != active:
            self.llm.set_n_threads(target)
            why = ", ".join(r.reasons) or (f"{r.temp_c:.1f} °C" if r.temp_c is not None else "")
            log.warning("thermal back-off: %d -> %d compute threads (%s)", active, target,
                        why if hot else f"cool again, {why}")
            if self.on_change is not None:
                self.on_change(target, r)
        return target

    def start(self) -> "ThermalBackoff":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="edgellm-thermal", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if getattr(self.llm, "closed", False):
                return
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - closed under us, or a sensor vanished
                if getattr(self.llm, "closed", False):
                    return
                log.warning("thermal back-off reading failed: %s", e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None


def backoff_default(root: str = "/") -> bool:
    """`--thermal-backoff auto`: on for ARM Linux boards (the Raspberry Pi and kin, whose SoC
    throttles under sustained load) that expose sensors; off elsewhere, where desktop and
    server CPUs report turbo clocks that would read as throttling."""
    import platform

    return (platform.system() == "Linux" and platform.machine().lower() in ("aarch64", "arm64")
            and SysfsThermal(root).available())
