"""An offload loop with the copy habits memq exists to expose, through the HIP runtime.

Each step copies the same weights host->device again (a *repeat*), uploads a
new batch from a reused pageable buffer (*staged*, not redundant: the CPU wrote
new data into it), reads results back device->host and
sends them back up unchanged (a *round trip*), and touches a managed buffer
with an explicit copy (*managed endpoint*). On an APU (MI300A) every one of
those host<->device copies is avoidable (*unified*).

Options change the habits, for a before/after comparison (memq diff) or a report:
`--keep-weights` uploads the weights once before the loop instead of every step (the
fix for the repeat); `--fresh-batches` also stages a new batch every step through a
reused pinned buffer the CPU refills (new data each time: not redundant, however alike
its addresses look) and uploads it asynchronously.

Runs against the real libamdhip64 on a ROCm node, or against any library with
the same C API given by --hip-lib (the demo uses the test suite's fake runtime):
    memq record -o trace/ -- python3 examples/hip_offload.py --hip-lib /opt/rocm/lib/libamdhip64.so
"""
import argparse
import ctypes
import sys
import time

H2D, D2H = 1, 2
MiB = 1 << 20


def check(rc: int, what: str) -> None:
    if rc != 0:
        sys.exit(f"hip_offload: {what} failed with hipError {rc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hip-lib", default="libamdhip64.so", help="HIP runtime to load (default libamdhip64.so)")
    parser.add_argument("--steps", type=int, default=8, help="offload steps (default 8)")
    parser.add_argument("--seconds", type=float, help="run steps for this long instead (a steady loop)")
    parser.add_argument("--weights-mib", type=int, default=16, help="size of the weights (default 16 MiB)")
    parser.add_argument("--keep-weights", action="store_true",
                        help="upload the weights once before the loop and keep them on the device")
    parser.add_argument("--fresh-batches", action="store_true",
                        help="also fill a reused pinned staging buffer with new data every step and upload it "
                             "asynchronously")
    args = parser.parse_args()
    # Load the runtime, then look its functions up in the global scope, the way a
    # program or extension linked against libamdhip64 binds them: under
    # `memq record` that finds memq's wrappers first. (Looking them up on the
    # runtime's own handle would bypass LD_PRELOAD: see README "Limits".)
    ctypes.CDLL(args.hip_lib, mode=ctypes.RTLD_GLOBAL)
    hip = ctypes.CDLL(None)
    p = ctypes.c_void_p
    hip.hipMemcpy.argtypes = [p, p, ctypes.c_size_t, ctypes.c_int]
    hip.hipMalloc.argtypes = [ctypes.POINTER(p), ctypes.c_size_t]
    hip.hipHostMalloc.argtypes = [ctypes.POINTER(p), ctypes.c_size_t, ctypes.c_uint]
    hip.hipMallocManaged.argtypes = [ctypes.POINTER(p), ctypes.c_size_t, ctypes.c_uint]
    hip.hipFree.argtypes = hip.hipHostFree.argtypes = [p]
    hip.hipMemset.argtypes = [p, ctypes.c_int, ctypes.c_size_t]
    hip.hipMemcpyAsync.argtypes = [p, p, ctypes.c_size_t, ctypes.c_int, p]
    hip.hipStreamSynchronize.argtypes = [p]

    weights_size, batch_size = args.weights_mib * MiB, 4 * MiB
    weights = ctypes.create_string_buffer(weights_size)  # pageable host memory (malloc)
    ctypes.memset(weights, 0x3F, weights_size)  # trained values, not zeros (a memset would upload zeros)
    batch = ctypes.create_string_buffer(batch_size)
    pinned, d_weights, d_batch, d_out, managed, staging, d_fresh = p(), p(), p(), p(), p(), p(), p()
    check(hip.hipHostMalloc(ctypes.byref(pinned), batch_size, 0), "hipHostMalloc")
    if args.fresh_batches:
        check(hip.hipHostMalloc(ctypes.byref(staging), batch_size, 0), "hipHostMalloc")
        check(hip.hipMalloc(ctypes.byref(d_fresh), batch_size), "hipMalloc")
    check(hip.hipMalloc(ctypes.byref(d_weights), weights_size), "hipMalloc")
    check(hip.hipMalloc(ctypes.byref(d_batch), batch_size), "hipMalloc")
    check(hip.hipMalloc(ctypes.byref(d_out), batch_size), "hipMalloc")
    check(hip.hipMallocManaged(ctypes.byref(managed), batch_size, 1), "hipMallocManaged")
    check(hip.hipMemset(d_out, 0x5A, batch_size), "hipMemset")  # stands in for the kernel writing results
    if args.keep_weights:
        check(hip.hipMemcpy(d_weights, weights, weights_size, H2D), "weights upload")  # once: kept on the device
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    steps = 0
    while (steps < args.steps) if deadline is None else (time.monotonic() < deadline):
        steps += 1
        if not args.keep_weights:
            check(hip.hipMemcpy(d_weights, weights, weights_size, H2D), "weights upload")  # same bytes every step
        if args.fresh_batches:  # a data loader refilling its pinned staging buffer: new content every step
            ctypes.memset(staging, steps & 0xFF, batch_size)
            check(hip.hipMemcpyAsync(d_fresh, staging, batch_size, H2D, None), "fresh batch upload")
            check(hip.hipStreamSynchronize(None), "hipStreamSynchronize")
        ctypes.memset(batch, steps & 0xFF, batch_size)  # the next batch: new data in the same buffer
        check(hip.hipMemcpy(d_batch, batch, batch_size, H2D), "batch upload")  # from pageable memory
        check(hip.hipMemcpy(pinned, d_out, batch_size, D2H), "result download")
        check(hip.hipMemcpy(d_out, pinned, batch_size, H2D), "result re-upload")  # round trip
        check(hip.hipMemcpy(managed, pinned, batch_size, H2D), "managed staging")  # managed endpoint
    for ptr in (d_weights, d_batch, d_out, managed) + ((d_fresh,) if args.fresh_batches else ()):
        check(hip.hipFree(ptr), "hipFree")
    check(hip.hipHostFree(pinned), "hipHostFree")
    if args.fresh_batches:
        check(hip.hipHostFree(staging), "hipHostFree")
    print(f"offloaded {steps} steps of {args.weights_mib} MiB weights")


if __name__ == "__main__":
    main()
