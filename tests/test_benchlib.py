"""bench/benchlib.py: the maintained benchmarks' shared options and their one result schema."""

from __future__ import annotations

import json

import torch

from conftest import bench_script


def test_a_result_file_holds_the_schema_with_the_machine_and_what_was_asked(tmp_path):
    benchlib = bench_script("benchlib")
    ap = benchlib.parser("demo", "Demo benchmark.\n\nLonger text.")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args(["--out", str(tmp_path / "sub" / "demo.json"), "--steps", "3"])
    assert ap.description == "Demo benchmark."
    written = benchlib.write_result(args.out, "demo", params=vars(args), metrics={"sec_per_step": 1.5},
                                    load_before=[0.5, 0.4, 0.3])
    on_disk = json.loads((tmp_path / "sub" / "demo.json").read_text())
    assert on_disk == json.loads(json.dumps(written))
    assert set(on_disk) == {"schema", "name", "commit", "machine", "params", "metrics"}
    assert on_disk["schema"] == benchlib.SCHEMA and on_disk["name"] == "demo"
    assert on_disk["params"] == {"out": str(tmp_path / "sub" / "demo.json"), "threads": None, "steps": 3}
    assert on_disk["metrics"] == {"sec_per_step": 1.5}
    machine = on_disk["machine"]
    assert machine["cpu"]["cpu_count"] >= 1 and machine["loadavg_before"] == [0.5, 0.4, 0.3]
    assert len(machine["loadavg_after"]) == 3 and "torch" in machine["libraries"]
    # this checkout is a git work tree: the commit is its HEAD
    assert on_disk["commit"] is None or len(on_disk["commit"]) == 40


def test_default_out_is_the_benchmarks_own_file_and_threads_are_applied():
    benchlib = bench_script("benchlib")
    args = benchlib.parser("training", None).parse_args([])
    assert args.out == benchlib.RESULTS / "training.json" and args.threads is None
    before = torch.get_num_threads()
    try:
        benchlib.apply_threads(benchlib.parser("x", None).parse_args(["--threads", "1"]))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
