"""Allocations at known wall-clock times, through the fake HIP runtime (ctypes, as a Python program loads it).

    python3 clock_marks.py FAKE_DIR OUT.json [N]

Before and after each of N hipMalloc calls (sizes 4096*(i+1)+17, freed at once) it reads CLOCK_REALTIME and
CLOCK_MONOTONIC; OUT.json lists {size, before, after, mono_before, mono_after}. A job test records this on
two "nodes" with different MONOTONIC clocks and checks where the merged trace puts each call.
"""
import ctypes
import json
import sys
import time

lib = ctypes.CDLL(f"{sys.argv[1]}/libamdhip64.so")
lib.hipMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
lib.hipFree.argtypes = [ctypes.c_void_p]
marks = []
ptr = ctypes.c_void_p()
for i in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
    size = 4096 * (i + 1) + 17
    mono_before, before = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_REALTIME)
    assert lib.hipMalloc(ctypes.byref(ptr), size) == 0
    after, mono_after = time.clock_gettime_ns(time.CLOCK_REALTIME), time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    assert lib.hipFree(ptr) == 0
    marks.append({"size": size, "before": before, "after": after, "mono_before": mono_before,
                  "mono_after": mono_after})
    time.sleep(0.02)
with open(sys.argv[2], "w") as out:
    json.dump(marks, out)
