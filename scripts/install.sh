#!/usr/bin/env bash
# Installs everything memq needs on Debian bookworm (run as root), idempotently:
# system packages (LTTng, babeltrace2 and its C library and Python bindings, gcc,
# Chromium for the UI tests), the Python package with its pinned dependencies
# (editable, with test extras), and the native libraries (make native).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  lttng-tools liblttng-ust-dev liblttng-ust1          # capture
  babeltrace2 libbabeltrace2-dev python3-bt2          # decode (C library + bindings for cross-checks)
  gcc make pkg-config                                 # native build
  libxxhash-dev                                       # content fingerprints (xxh3, header-only: no runtime dependency)
  binutils                                            # nm, addr2line: call-site mapping (--by callsite)
  chromium fonts-liberation                           # UI tests (headless browser)
  procps                                              # ps/pgrep for sessiond management
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "memq install: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pipflags=(-q)
# Debian's own python3 is "externally managed" (PEP 668); a pyenv/venv python is not.
if "$PY" -c 'import sys,sysconfig,os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"],"EXTERNALLY-MANAGED")) else 1)'; then
  pipflags+=(--break-system-packages)
fi
extras="test"
"$PY" -m pip install "${pipflags[@]}" -e ".[${extras}]"
# PyTorch (CPU) for the live-recording tests and the demo; the wheel for this
# version is available offline on the project's machines.
"$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install "${pipflags[@]}" torch==2.13.0

make -s native

# UI tests: playwright-core (pinned in tests/ui/package-lock.json) drives the system Chromium; no browser download.
command -v npm >/dev/null || { apt-get update -qq; apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error
echo "memq install: done ($("$PY" --version), $(lttng --version | head -1), $(babeltrace2 --version | head -1))"
