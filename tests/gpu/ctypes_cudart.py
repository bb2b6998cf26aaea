"""The real CUDA runtime loaded with ctypes' default (RTLD_LOCAL), its memory calls made through
ctypes (dlsym on the runtime's handle): what memq must see without the dynamic linker's help.
Real GPU only (scripts/gpu-reach.sh); logs each call as tests/fakes/worklog.h does.

    python3 tests/gpu/ctypes_cudart.py LOG.jsonl
"""
import ctypes
import ctypes.util
import glob
import json
import os
import sys
import threading

H2D, D2H, DEVICE = 1, 2, 4


def find_cudart() -> str:
    """The runtime PyTorch ships (pip nvidia-cuda-runtime) or the toolkit's."""
    pats = ["/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda/targets/*/lib/libcudart.so*"]
    try:
        import nvidia  # namespace package of the pip CUDA wheels
        pats = [os.path.join(p, "**", "libcudart.so*") for p in nvidia.__path__] + pats
    except ImportError:
        pass
    for pat in pats:
        hits = sorted(glob.glob(pat, recursive=True))
        if hits:
            return hits[-1]
    return ctypes.util.find_library("cudart") or "libcudart.so"


def main() -> int:
    path, log_path = find_cudart(), sys.argv[1]
    rt = ctypes.CDLL(path)  # RTLD_LOCAL
    size = 1 << 20
    host = ctypes.create_string_buffer(b"\x07" * size, size)
    back = ctypes.create_string_buffer(size)
    ptr = ctypes.c_void_p()
    fails = 0
    with open(log_path, "w") as out:
        def log(event, api, **f):
            out.write(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "event": event,
                                  "api": api, "lib": path, **f}) + "\n")
        r = rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size))
        log("alloc", "cudaMalloc", ptr=ptr.value or 0, size=size, mem_kind=DEVICE, result=r)
        rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        for dst, src, kind in ((ptr.value, ctypes.addressof(host), H2D), (ctypes.addressof(back), ptr.value, D2H)):
            r2 = rt.cudaMemcpy(dst, src, size, kind)
            log("copy", "cudaMemcpy", dst=dst, src=src, bytes=size, kind=kind, result=r2)
            fails += r2 != 0
        rt.cudaFree.argtypes = [ctypes.c_void_p]
        r3 = rt.cudaFree(ptr.value)
        log("free", "cudaFree", ptr=ptr.value, size=size, result=r3)
    fails += (r != 0) + (r3 != 0) + (back.raw != host.raw)
    print(f"ctypes_cudart: {path}: {fails} failures")
    return fails


if __name__ == "__main__":
    sys.exit(main())
