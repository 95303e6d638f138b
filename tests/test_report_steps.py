"""What `leakaudit report` shows while it builds (leakaudit.report.steps): one clean line per step with its elapsed
time where stderr is not a terminal, a bar as well where it is; and the command's default relabellings."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from fake_run import write_fake_run
from leakaudit.report import build_report
from leakaudit.report.blind_null import ALPHA, REPORT_PERMUTATIONS, report_permutations
from leakaudit.report.steps import ReportSteps

STEP_NAMES = ["load scores", "metrics: 20 bootstrap resamples", "study verdict", "blind text null: 10 relabellings",
              "checks: design, training, teacher, realism", "plots", "write metrics and report.html"]
ESCAPES = re.compile(r"[\x1b\r]")
LINE = re.compile(r"^\[report\] (.+) done in \d+\.\d s$")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _step_names(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines and re.fullmatch(r"\[report\] built in \d+\.\d s", lines[-1]), text
    names = []
    for line in lines[:-1]:
        m = LINE.match(line)
        assert m, f"not a step line: {line!r}"
        names.append(m.group(1))
    return names


def test_off_a_terminal_one_plain_line_per_step():
    out = io.StringIO()
    steps = ReportSteps(out)
    steps.begin(2)
    with steps.step("first") as tick:
        tick()
        tick()
    with steps.step("second"):
        pass
    steps.end()
    text = out.getvalue()
    assert not ESCAPES.search(text)
    assert _step_names(text) == ["first", "second"] and set(steps.times) == {"first", "second"}


def test_on_a_terminal_a_bar_is_drawn_and_the_lines_kept():
    out = Terminal()
    steps = ReportSteps(out)
    steps.begin(1)
    with steps.step("only") as tick:
        tick()
    steps.end()
    text = out.getvalue()
    assert "\r" in text and "report" in text  # tqdm redraws its bar with carriage returns
    assert re.search(r"\[report\] only done in \d+\.\d s\n", text)  # written above the bar


def test_silent_shows_nothing_and_an_error_closes_the_bar():
    out = Terminal()
    quiet = ReportSteps(out, enabled=False)
    quiet.begin(1)
    with quiet.step("x"):
        pass
    quiet.end()
    assert out.getvalue() == ""
    steps = ReportSteps(Terminal())
    steps.begin(2)
    with pytest.raises(ValueError), steps.step("fails"):
        raise ValueError("boom")
    assert steps.bar is None and "fails" not in steps.times


def test_build_report_reports_each_of_its_steps(tmp_path):
    root = write_fake_run(tmp_path / "run")
    out = io.StringIO()
    build_report(root, n_boot=20, n_perm=10, steps=ReportSteps(out))
    assert _step_names(out.getvalue()) == STEP_NAMES
    assert not ESCAPES.search(out.getvalue())


def test_the_command_in_a_log_file_writes_one_line_per_step_and_no_escape_codes(tmp_path):
    root = write_fake_run(tmp_path / "run")
    res = subprocess.run([sys.executable, "-m", "leakaudit.cli", "report", str(root), "--n-boot", "20",
                          "--n-perm", "10"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert not ESCAPES.search(res.stderr) and not ESCAPES.search(res.stdout)
    assert _step_names(res.stderr) == STEP_NAMES
    assert f"report: {root / 'report.html'}" in res.stdout


def test_report_default_relabellings_can_reach_the_warning_level():
    assert report_permutations(1) == REPORT_PERMUTATIONS
    for k in range(1, 8):  # smallest sampled p-value 1/(n+1) below the Bonferroni level alpha/k
        assert 1 / (report_permutations(k) + 1) < ALPHA / k
    assert report_permutations(3) == 60
