#!/usr/bin/env bash
# The whole GPU suite on the device machine, in one command (docs/performance.md, "GPU figures"):
#
#   make gpu-prep                            # here, once: .gpu-suite/{data,wheels}, size checked
#   bash benchmarks/gpu_suite.sh "$OUT"      # there, with carry [".gpu-suite"], timeout_s 600
#
# Installs the carried wheels (the packages the device's image lacks) into a scratch folder on
# PYTHONPATH, records the card, runs benchmarks/gpu_suite.py on the carried data with its time budget,
# and leaves gpu_suite.json, gpu_suite.txt, gpu_suite.log and nvidia-smi.txt in OUT (4 files: what
# comes back). Exits with the suite's code: 0 only when no part failed.
set -euo pipefail

out=${1:?usage: bash benchmarks/gpu_suite.sh OUT_DIR [gpu_suite.py options, e.g. --parts cost_model]}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carried=${GPU_SUITE_DIR:-$root/.gpu-suite}
budget=${GPU_SUITE_BUDGET_S:-450}  # seconds of parts; the rest of the 600 s call is start-up and the report
mkdir -p "$out"

if [[ ! -f $carried/data/layout.json ]]; then
    echo "gpu_suite.sh: $carried/data/layout.json is missing: run 'make gpu-prep' on the CPU machine and name" \
        ".gpu-suite in the device call's carry" >&2
    exit 2
fi
shopt -s nullglob
wheels=("$carried"/wheels/*.whl)
if ((${#wheels[@]})); then
    site=${TMPDIR:-/tmp}/gpu-suite-site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
    echo "gpu_suite.sh: no wheels in $carried/wheels: the parts that import megatron-energon will fail" >&2
fi
export PYTHONUNBUFFERED=1
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (exit $?)" >>"$out/nvidia-smi.txt"

timeout --kill-after 10 $((${budget%.*} + 120)) \
    python3 "$root/benchmarks/gpu_suite.py" --data "$carried/data" --out "$out" --budget-s "$budget" "$@" 2>&1 |
    tee "$out/gpu_suite.log"
