"""The GPU presets (gpu-paper, gpu-small): they validate on a CPU machine, sit in the regime the CPU studies measured,
and every data source they name loads from small local files in the hub's own formats (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from leakaudit.config import load_config
from leakaudit.data.sources import check_source_options, load_source

DATA = Path(__file__).parent / "data"
GPU_PRESETS = ("gpu-paper", "gpu-small")

# The hub's parquet schemas (the column layout datasets serves for openai/gsm8k main, qiaojin/PubMedQA pqa_labeled,
# GBaker/MedQA-USMLE-4-options and google-research-datasets/mbpp full), so a local copy reads as the hub's does.
HUB_SCHEMAS = {
    "gsm8k": pa.schema([("question", pa.string()), ("answer", pa.string())]),
    "pubmedqa": pa.schema([
        ("pubid", pa.int32()), ("question", pa.string()),
        ("context", pa.struct([("contexts", pa.list_(pa.string())), ("labels", pa.list_(pa.string())),
                               ("meshes", pa.list_(pa.string()))])),
        ("long_answer", pa.string()), ("final_decision", pa.string())]),
    "medqa": pa.schema([("question", pa.string()), ("answer", pa.string()),
                        ("options", pa.struct([(k, pa.string()) for k in "ABCD"])), ("meta_info", pa.string()),
                        ("answer_idx", pa.string())]),
    "mbpp": pa.schema([("task_id", pa.int32()), ("text", pa.string()), ("code", pa.string()),
                       ("test_list", pa.list_(pa.string())), ("test_setup_code", pa.string()),
                       ("challenge_test_list", pa.list_(pa.string()))]),
}


def _hub_parquet(source: str, out: Path) -> Path:
    """tests/data/hub_<source>.jsonl written as parquet with the hub's schema."""
    rows = [json.loads(line) for line in (DATA / f"hub_{source}.jsonl").read_text().splitlines() if line.strip()]
    schema = HUB_SCHEMAS[source]
    table = pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)
    path = out / f"{source}.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_gpu_preset_is_in_the_measured_regime(preset):
    """Offline references as the primary design, a background shared by all, full-vocabulary reverse KL, the balanced
    keep matrix, >= 24 members per target, 8 passes, the trajectories as long as the rollouts, three hub domains and
    a Qwen2.5 student: each a finding of the CPU studies (default.yaml, README)."""
    cfg = load_config(preset=preset)
    data, plan, train = cfg.data, cfg.plan, cfg.training
    assert plan.n_offline_references >= 8 and data.n_reference_records >= data.n_candidates // 2
    assert data.n_background > data.n_candidates // 2  # members a minority of what a student trains on
    assert train.loss == "full_rkl" and plan.keep_design == "balanced_subsets" and cfg.teacher.kind == "prepared"
    assert data.n_candidates >= 48 and train.epochs >= 8
    assert cfg.signals.sampling.max_new_tokens == train.max_new_tokens >= 256
    assert train.rollout_seeding == "record"  # what training one student on several GPUs needs
    sources = {d: s.source for d, s in data.domains.items()}
    assert sources["math"] in ("gsm8k", "math") and sources["medical"] in ("medqa", "pubmedqa", "medmcqa")
    assert sources["code"] == "mbpp"
    assert cfg.base_model.startswith("Qwen/Qwen2.5-") and not cfg.trust_remote_code
    needed = data.n_candidates + data.n_population + data.n_teacher_records + data.n_background + \
        data.n_reference_records
    assert needed <= 874  # MBPP full train + test: the smallest pool the presets draw from


def test_gpu_presets_scale_with_the_student():
    paper, small = load_config(preset="gpu-paper"), load_config(preset="gpu-small")
    assert paper.base_model == "Qwen/Qwen2.5-1.5B-Instruct" and small.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert paper.training.learning_rate < small.training.learning_rate


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_every_source_of_a_gpu_preset_loads_a_local_copy_in_the_hub_format(preset, tmp_path):
    """Each domain's source, with the preset's own options plus data_files= a parquet in the hub's schema, loads
    records of that domain (what an air-gapped GPU machine does with a copy of the hub files)."""
    cfg = load_config(preset=preset)
    for domain, spec in cfg.data.domains.items():
        options = {**spec.options, "data_files": str(_hub_parquet(spec.source, tmp_path))}
        check_source_options(spec.source, options)
        records = load_source(spec.source, cache_dir=str(tmp_path / "hf"), **options)
        assert len(records) == 3 and {r.domain for r in records} == {domain}
        assert all(r.privileged.strip() and r.source == spec.source for r in records)


def test_hub_parquet_copies_read_as_their_jsonl(tmp_path):
    """The parquet layout (nested context struct, list columns) gives the same records as the JSONL rows."""
    for source in HUB_SCHEMAS:
        from_parquet = load_source(source, data_files=str(_hub_parquet(source, tmp_path)), cache_dir=str(tmp_path))
        from_jsonl = load_source(source, data_files=str(DATA / f"hub_{source}.jsonl"), cache_dir=str(tmp_path))
        assert [r.to_dict() for r in from_parquet] == [r.to_dict() for r in from_jsonl], source
