"""A refactor changes no result: the tiny study's and tiny audit's scores.parquet and metrics.json hold exactly the
values recorded before it (digests in tests/golden/tiny_run_digests.json, per numeric platform: torch version, CPU
capability, CPU model and bf16 ISA, thread count; see behaviour_digests.py for what is left out). Record a new platform
with `python tests/behaviour_digests.py --record`."""

from __future__ import annotations

import pytest
import torch

from behaviour_digests import platform_key, recorded, tiny_digests


@pytest.mark.heavy
@pytest.mark.current_deps
def test_tiny_study_and_audit_outputs_match_the_recorded_digests(tmp_path):
    threads = torch.get_num_threads()
    golden = recorded().get(platform_key(threads))
    if golden is None:
        pytest.skip(f"no digests recorded for {platform_key(threads)!r}; floats are only byte-stable on one platform")
    assert tiny_digests(tmp_path, threads) == golden
