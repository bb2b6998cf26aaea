"""JAX (XLA links the CUDA runtime statically and reaches the driver through cuGetProcAddress):
a host->device upload, a computation and a read-back, repeated. Real GPU only (scripts/gpu-reach.sh).

    python3 tests/gpu/jax_step.py LOG.json
"""
import json
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # allocations as they happen
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

host = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
steps = 5
for _ in range(steps):
    x = jax.device_put(host)
    y = np.asarray(jnp.sin(x) * 2)
json.dump({"devices": [str(d) for d in jax.devices()], "steps": steps, "bytes_each_way": host.nbytes,
           "sum": float(y.sum())}, open(sys.argv[1], "w"))
