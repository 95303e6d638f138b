"""The behaviour digests see what the code computed and nothing a library stamps on a file: a new pandas or pyarrow
release with every value the same leaves them alone, and one float moved by one ulp changes them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from behaviour_digests import _metrics_digest, _parquet_digest


def _scores() -> pd.DataFrame:
    return pd.DataFrame({"record_id": ["a", "b"], "is_member": [True, False], "leaky": [0.125, -1.5]})


def _write(df: pd.DataFrame, path, pandas_version: str):
    """Write df as pandas does, with `pandas_version` in the schema metadata as pandas writes it."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = json.loads(table.schema.metadata[b"pandas"])
    meta["pandas_version"] = pandas_version
    table = table.replace_schema_metadata({b"pandas": json.dumps(meta).encode()})
    pq.write_table(table, path)
    return path


def test_a_new_pandas_release_with_the_same_values_keeps_the_parquet_digest(tmp_path):
    old = _write(_scores(), tmp_path / "old.parquet", "3.1.1")
    new = _write(_scores(), tmp_path / "new.parquet", "3.1.2")
    assert old.read_bytes() != new.read_bytes()  # what made the byte digest fail on a fresh install
    assert _parquet_digest(old) == _parquet_digest(new)


def test_one_ulp_or_a_renamed_column_changes_the_parquet_digest(tmp_path):
    base = _parquet_digest(_write(_scores(), tmp_path / "base.parquet", "3.1.1"))
    moved = _scores()
    moved.loc[1, "leaky"] = np.nextafter(-1.5, 0.0)
    assert _parquet_digest(_write(moved, tmp_path / "moved.parquet", "3.1.1")) != base
    renamed = _scores().rename(columns={"leaky": "loss"})
    assert _parquet_digest(_write(renamed, tmp_path / "renamed.parquet", "3.1.1")) != base
    retyped = _scores().astype({"leaky": "float32"})
    assert _parquet_digest(_write(retyped, tmp_path / "retyped.parquet", "3.1.1")) != base


def test_the_metrics_digest_skips_versions_and_input_hashes_but_not_results(tmp_path):
    def metrics(pandas: str, sha: str, auroc: float) -> dict:
        return {"date": "2026-12-07", "versions": {"pandas": pandas}, "env": {"libraries": {"pandas": pandas}},
                "inputs": {"scores.parquet": {"sha256": sha, "rows": 2}}, "out": str(tmp_path / "run"),
                "results": {"leaky": {"auroc": auroc}}}

    def digest(m: dict) -> str:
        path = tmp_path / "metrics.json"
        path.write_text(json.dumps(m))
        return _metrics_digest(path, tmp_path)

    base = digest(metrics("3.1.1", "sha256:aa", 0.75))
    assert digest(metrics("3.1.2", "sha256:bb", 0.75)) == base
    assert digest(metrics("3.1.1", "sha256:aa", 0.7500000000000001)) != base
