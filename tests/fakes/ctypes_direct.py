"""Python workload (test only): a GPU runtime loaded with ctypes' default (RTLD_LOCAL) and its memory
functions called directly through ctypes, which looks them up with dlsym on the runtime's handle.
Logs each call as worklog.h does.

usage: python3 ctypes_direct.py LIBDIR LOG
"""
import ctypes
import json
import os
import sys
import threading

libdir, log_path = sys.argv[1:3]
DEVICE, H2D, D2H = 4, 1, 2
failures = 0


def log(out, event: str, api: str, **fields) -> None:
    head = {"pid": os.getpid(), "tid": threading.get_native_id(), "event": event, "api": api}
    out.write(json.dumps({**head, **fields}) + "\n")


def workload(out, prefix: str, soname: str) -> None:
    global failures
    rt = ctypes.CDLL(os.path.join(libdir, soname))  # mode defaults to RTLD_LOCAL
    host = ctypes.create_string_buffer(b"\x07" * 4096)
    back = ctypes.create_string_buffer(4096)
    ptr = ctypes.c_void_p()
    r = getattr(rt, f"{prefix}Malloc")(ctypes.byref(ptr), ctypes.c_size_t(4096))
    log(out, "alloc", f"{prefix}Malloc", ptr=ptr.value or 0, size=4096, mem_kind=DEVICE, stream=0, flags=0, width=0,
        height=0, device=0, result=r)
    copy = getattr(rt, f"{prefix}Memcpy")
    copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for dst, src, kind in ((ptr.value, ctypes.addressof(host), H2D), (ctypes.addressof(back), ptr.value, D2H)):
        r2 = copy(dst, src, 4096, kind)
        log(out, "copy", f"{prefix}Memcpy", dst=dst, src=src, bytes=4096, kind=kind, stream=0, src_device=-1,
            width=0, height=0, dpitch=0, spitch=0, device=0, result=r2)
        failures += r2 != 0
    free = getattr(rt, f"{prefix}Free")
    free.argtypes = [ctypes.c_void_p]
    r3 = free(ptr.value)
    log(out, "free", f"{prefix}Free", ptr=ptr.value, size=4096, mem_kind=DEVICE, stream=0, device=0, result=r3)
    failures += (r != 0) + (r3 != 0) + (back.raw != host.raw[:4096])


with open(log_path, "a") as out:
    workload(out, "hip", "libamdhip64.so")
    workload(out, "cuda", "libcudart.so.12")
sys.exit(failures)
