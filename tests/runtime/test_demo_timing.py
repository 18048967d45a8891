"""tcjit.demo_timing: when ``tcjit demo`` flags a timing as busy, noisy or cold.

The flags are decided from values (a timing's call times and the other processes' CPU share);
the busy check is also run against real load: processes that burn every core while a call is
timed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tcjit.demo_timing import BUSY_FRACTION, Timed, demo_flags, time_calls

STEADY = (1e-3,) * 8


def test_a_steady_timing_on_a_quiet_machine_has_no_flag():
    assert Timed(STEADY, 0.0).flags() == []
    assert Timed(STEADY, None).flags() == []  # the machine's load unknown: not claimed busy


def test_other_processes_cpu_share_makes_a_timing_busy():
    assert Timed(STEADY, BUSY_FRACTION).flags() == ["busy"]
    assert Timed(STEADY, BUSY_FRACTION - 0.01).flags() == []


def test_a_median_far_above_the_fastest_call_is_noisy():
    # A 3 µs kernel whose typical call lost an 8 ms time slice (the demo's kronecker3 and tbmm rows).
    assert Timed((3e-6, 8e-3, 8e-3, 8e-3, 3e-6), 0.0).flags() == ["noisy"]
    assert Timed((1.0e-3, 1.4e-3, 1.4e-3, 1.0e-3, 1.4e-3), 0.0).flags() == []


def test_a_timing_still_warming_up_is_cold_but_one_slow_first_call_is_not():
    assert Timed((9e-3, 7e-3, 1e-3, 1e-3, 1e-3), 0.0).flags() == ["cold"]
    assert Timed((9e-3, *STEADY), 0.0).flags() == []


def test_a_rows_flags_name_the_side_unless_both_have_it():
    clean, busy, cold = Timed(STEADY, 0.0), Timed(STEADY, 0.9), Timed((5e-3, 5e-3, 1e-3, 1e-3, 1e-3), 0.0)
    assert demo_flags(tcjit=clean, torch=clean) == ""
    assert demo_flags(tcjit=busy, torch=busy) == "busy"
    assert demo_flags(tcjit=cold, torch=busy) == "busy (torch), cold (tcjit)"


def test_cores_burnt_by_other_processes_while_a_call_is_timed_make_it_busy():
    burn = [sys.executable, "-c", "while True: pass"]
    burners = [subprocess.Popen(burn) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)  # running by now
        timed = time_calls(lambda: time.sleep(0.02), budget=0.3)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert len(timed.samples) >= 5 and 0.02 <= timed.median < 1.0
    assert timed.others_fraction is not None and timed.others_fraction >= 0.5, timed
    assert "busy" in timed.flags()
