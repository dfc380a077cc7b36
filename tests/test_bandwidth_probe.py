"""edgellm._core.BandwidthProbe, the bandwidth floor of bench/compare.py: each pass reads every
byte of every thread's buffer (its checksum is the fill pattern's), its rate agrees with its
time, it releases the GIL while it streams, and bad arguments are refused."""
import threading

import pytest

from edgellm import _core


@pytest.mark.parametrize("threads,nbytes", [(1, 4096), (2, 3 << 20), (3, (1 << 20) + 8)])
def test_pass_reads_every_byte(threads, nbytes):
    probe = _core.BandwidthProbe(threads, nbytes)
    assert probe.n_threads == threads
    assert probe.bytes_per_thread >= nbytes and probe.bytes_per_thread % 4096 == 0
    for _ in range(2):
        r = probe.run()
        assert r["checksum"] == probe.expected_checksum
        assert r["seconds"] > 0 and r["gb_per_s"] > 0
        assert r["gb_per_s"] * r["seconds"] == pytest.approx(threads * probe.bytes_per_thread / 1e9, rel=1e-6)


def test_releases_the_gil():
    probe = _core.BandwidthProbe(1, 64 << 20)
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks
        for _ in range(5):
            probe.run()
        during = ticks - before
    finally:
        stop.set()
        t.join()
    assert during > 0


@pytest.mark.parametrize("threads,nbytes", [(0, 1 << 20), (1, 100)])
def test_bad_arguments(threads, nbytes):
    with pytest.raises(ValueError):
        _core.BandwidthProbe(threads, nbytes)
