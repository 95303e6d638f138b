"""The suite's own settings: what a passing run leaves on disk.

Tests write real-shape checkpoints (a tiny study leaves ~0.5 GB in its tmp_path); with pytest's defaults
(`tmp_path_retention_policy = "all"`, 3 sessions kept) one `make test-floors` left 8.6 GB behind, and CI runs
`make test` and `make test-floors` back to back on one disk.
"""

import tomllib
from pathlib import Path

pytest_plugins = ["pytester"]

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_a_passing_test_leaves_no_tmp_path_behind_under_our_pytest_settings(pytester):
    ini = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]
    settings = {k: v for k, v in ini.items() if k.startswith("tmp_path_retention")}
    lines = [f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}" for key, value in settings.items()]
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + "\n".join(lines) + "\n")
    pytester.makepyfile(
        """
        from pathlib import Path

        def test_passes(tmp_path):
            (tmp_path / "checkpoint.bin").write_bytes(b"x" * 1024)
            Path("passed.where").write_text(str(tmp_path))

        def test_fails(tmp_path):
            (tmp_path / "checkpoint.bin").write_bytes(b"x" * 1024)
            Path("failed.where").write_text(str(tmp_path))
            assert False
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=1)
    passed_dir = Path((pytester.path / "passed.where").read_text())
    failed_dir = Path((pytester.path / "failed.where").read_text())
    assert not passed_dir.exists(), "a passing test's checkpoint stays on disk"
    assert (failed_dir / "checkpoint.bin").exists(), "a failing test's tmp_path is kept to debug it"
