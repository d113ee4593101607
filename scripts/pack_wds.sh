#!/usr/bin/env bash
# Run the whole offline pipeline on one config, in order, timing each stage:
#   scan -> bucket -> plan -> write -> verify -> stats
# Stops at the first failing stage (its exit code is returned) and prints a timing table.
#
#   bash scripts/pack_wds.sh [config.yaml] [--set section.key=value ...]
#
# The command it runs, first found of:
#   $VLMPACK                        e.g. VLMPACK="uv run vlmpack"
#   $PYTHON -m vlmpack_offline      e.g. PYTHON=.venv/bin/python
#   vlmpack                         the console script, when on PATH
#   python3 -m vlmpack_offline      when python3 can import the package
#
# Every stage is resumable and a finished stage is a no-op, so rerunning after a
# failure or a crash continues where it stopped.
set -euo pipefail

CONFIG="${1:-configs/demo.yaml}"
shift || true
STAGES=(scan bucket plan write verify stats)

if [[ ! -f "$CONFIG" ]]; then
    echo "pack_wds.sh: config file not found: $CONFIG" >&2
    exit 2
fi

if [[ -n "${VLMPACK:-}" ]]; then
    read -r -a RUN <<< "$VLMPACK"
elif [[ -n "${PYTHON:-}" ]]; then
    RUN=("$PYTHON" -m vlmpack_offline)
elif command -v vlmpack >/dev/null 2>&1; then
    RUN=(vlmpack)
else
    RUN=(python3 -m vlmpack_offline)
fi
if ! "${RUN[@]}" --version >/dev/null 2>&1; then
    echo "pack_wds.sh: cannot run '${RUN[*]}': install vlmpack (pip install -e .), activate its venv" \
        "(source .venv/bin/activate), or set PYTHON=/path/to/venv/bin/python" >&2
    exit 2
fi

declare -a NAMES=() SECONDS_TAKEN=()

print_table() {
    local total=0
    printf '\n%-8s %10s\n' "stage" "seconds"
    printf '%-8s %10s\n' "--------" "----------"
    for i in "${!NAMES[@]}"; do
        printf '%-8s %10s\n' "${NAMES[$i]}" "${SECONDS_TAKEN[$i]}"
        total=$(awk -v a="$total" -v b="${SECONDS_TAKEN[$i]}" 'BEGIN { printf "%.2f", a + b }')
    done
    printf '%-8s %10s\n' "total" "$total"
}

for stage in "${STAGES[@]}"; do
    echo "== ${RUN[*]} $stage --config $CONFIG $*"
    start=$(date +%s.%N)
    status=0
    "${RUN[@]}" "$stage" --config "$CONFIG" "$@" || status=$?
    end=$(date +%s.%N)
    NAMES+=("$stage")
    SECONDS_TAKEN+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')")
    if [[ $status -ne 0 ]]; then
        print_table
        echo "pack_wds.sh: stage '$stage' failed (exit $status); later stages were not run" >&2
        exit "$status"
    fi
done
print_table
