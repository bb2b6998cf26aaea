"""Python workload (test only): runs the HIP or CUDA workload library through
ctypes loaded with RTLD_LOCAL, the way Python extensions bring GPU runtimes
in. The runtime then sits in a local scope only, where dlsym(RTLD_NEXT)
cannot see it: the preload library must find it by other means.

usage: python3 work_local.py LIBDIR hip|cuda LOG
"""
import ctypes
import os
import sys

libdir, runtime, log = sys.argv[1:4]
lib = ctypes.CDLL(os.path.join(libdir, f"lib{runtime}work.so"), mode=os.RTLD_LOCAL | os.RTLD_NOW)
entry = getattr(lib, f"memq_{runtime}_workload")
entry.argtypes = [ctypes.c_char_p]
sys.exit(entry(log.encode()))
