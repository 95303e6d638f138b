#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the wheels that bench/gpu_check.sh installs on the GPU machine, which
# has no network. Its image (KINDS.md, 2026-11) has torch 2.11, transformers 5.17, accelerate 1.15, numpy, pandas,
# pyarrow, scipy, scikit-learn, seaborn, typer, pyyaml, but no pydantic, trl, datasets or champ-dataset; the
# transformers/tokenizers/peft/accelerate set is carried too, at the versions this project's .venv tests with, so
# that the GPU check runs the code on the library versions it was tested on (torch stays the image's CUDA build).
# huggingface_hub is NOT carried: 2.x needs httpx2, absent there; the image's 1.33 satisfies transformers 5.24
# and datasets 5.2 (>= 1.31). Pure-Python wheels except pydantic_core, tokenizers and safetensors (cp312 / abi3
# manylinux x86_64). About 30 MB in all (champ-dataset's wheel, the tiny study's data, is 7.6 MB of it).
#
#   bash bench/gpu_wheels.sh            # -> build/gpu_wheels/*.whl (build/ is git-ignored)
#   then run the check with carry ["build/gpu_wheels"] (see bench/gpu_check.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-build/gpu_wheels}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$DEST"
PKGS=(
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  champ-dataset==1.0.0 natsort==8.4.0
  transformers==5.24.0 tokenizers==0.23.3 peft==0.21.2 accelerate==1.15.0
  safetensors==0.8.0
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${PKGS[@]}"
ls -la "$DEST"
du -sh "$DEST"
