#!/usr/bin/env bash
# The prepared GPU check: one script, one H200, no network, within a time budget.
#
# Prepare here (PyPI reachable), once per checkout:   bash bench/gpu_wheels.sh     # -> build/gpu_wheels, ~30 MB
# Run with the device tool (repository root, $OUT set, what lands in $OUT comes back):
#     run(command="bash bench/gpu_check.sh", carry=["build/gpu_wheels"], timeout_s=480)
# Budget: GPU_CHECK_BUDGET_S (default 420 s) for everything after nvidia-smi; a part that would overrun is cut at
# its own limit or skipped, and what it measured so far is kept. Brings along (besides the working tree, ~5 MB
# with bench/configs/smollm2_tokenizer) only build/gpu_wheels: the offline SmolLM2 model does not travel; the
# models are random (bench/configs/qwen2.5-0.5b.json and a tiny Llama) with the SmolLM2 tokenizer.
#
# With 2 or more GPUs visible the part opd_multi also trains one student on all of them (accelerate launch --multi_gpu)
# and compares it with the one-GPU student.
# Writes to $OUT (3 files): nvidia-smi.txt, gpu_check.json (every number), gpu_check.log (every part's output).
# Extra arguments go to bench/gpu_check.py (e.g. --parts env models opd).
# On a CPU-only machine the same Python runs as a smoke test:  python bench/gpu_check.py --cpu-smoke, or the whole
# script:  GPU_CHECK_WHEELS=none PYTHON=.venv/bin/python OUT=/tmp/gc bash bench/gpu_check.sh --cpu-smoke
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
BUDGET=${GPU_CHECK_BUDGET_S:-420}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export LEAKAUDIT_CACHE=${LEAKAUDIT_CACHE:-/tmp/gpu_check_cache}
SECONDS=0

echo "== gpu_check.sh $(date -u +%FT%TZ) on $(hostname), budget ${BUDGET} s"
{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; } \
  >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (rc $?)" >>"$OUT/nvidia-smi.txt"
cat "$OUT/nvidia-smi.txt"

# The GPU image lacks pydantic, trl, datasets and champ-dataset; the wheels also pin transformers/tokenizers/
# peft/accelerate to the versions the project is tested with (bench/gpu_wheels.sh says which and why).
WHEELS=${GPU_CHECK_WHEELS:-build/gpu_wheels}  # 'none': use the packages of $PY as they are (local runs)
if [ "$WHEELS" != none ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE=/tmp/gpu_check_site
  if timeout 180 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl; then
    export PYTHONPATH="$SITE"
  else
    echo "WARNING: installing $WHEELS failed; going on with the image's packages"
  fi
elif [ "$WHEELS" != none ]; then
  echo "WARNING: no build/gpu_wheels/*.whl (run 'bash bench/gpu_wheels.sh' here and carry build/gpu_wheels):"
  echo "         the GPU image has no pydantic, trl, datasets or champ-dataset, so most parts will fail"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== environment"
timeout 90 "$PY" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
try:
    import torch
    print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| available", torch.cuda.is_available(),
          "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
except Exception as e:  # noqa: BLE001
    print("torch import FAILED:", type(e).__name__, e)
for name in ("transformers", "tokenizers", "accelerate", "peft", "trl", "datasets", "pydantic", "champ_dataset",
             "huggingface_hub", "safetensors", "numpy", "pandas", "pyarrow", "scipy", "sklearn", "seaborn",
             "matplotlib", "typer", "yaml", "leakaudit", "shadow_models"):
    try:
        mod = importlib.import_module(name)
        print(f"  {name:16s} {getattr(mod, '__version__', '-'):12s} {getattr(mod, '__file__', '')}")
    except Exception as e:  # noqa: BLE001
        print(f"  {name:16s} MISSING or BROKEN: {type(e).__name__}: {str(e)[:200]}")
EOF

LEFT=$((BUDGET - SECONDS))
echo "== bench/gpu_check.py (budget ${LEFT} s)"
timeout --kill-after=15 $((LEFT + 30)) "$PY" bench/gpu_check.py --out "$OUT" --budget-s "$LEFT" "$@"
RC=$?
echo "== gpu_check.sh done in ${SECONDS} s, rc ${RC}; in ${OUT}: $(ls "$OUT" | tr '\n' ' ')"
exit $RC
