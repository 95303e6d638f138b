"""Paths inside a run directory (see docs/architecture.md, "A run directory"); one place that knows the layout,
which names may become paths in it, and which directories a run may write into."""

from __future__ import annotations

import os
import re
import unicodedata
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from leakaudit.errors import ConfigError, LeakauditError

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""Names that become file or directory names in a run (model ids, domains): letters, digits, '.', '_', '-', not
starting with a separator, so no name can climb out of the directory that holds it."""
MAX_NAME_BYTES = 200
"""A file name may be 255 bytes; model ids add a suffix (-s12, -null3, ...) and file names an extension."""
RUN_MARKER = ".leakaudit-run"
"""Written when leakaudit creates a run directory: a run writes only into a directory that is new or holds it."""
RUN_LOCK = ".leakaudit.lock"
NULL_SCORES_FILE = "null_scores.parquet"
"""An audit's null sample's rows of the attacks (scores.parquet's schema), beside scores.parquet, which holds the
candidates' rows only."""
"""The lock file of a run directory (leakaudit.locks); its presence also marks a run made by an earlier version."""


def check_safe_name(value: object, field: str) -> str:
    """`value` when it is a SAFE_NAME, else ConfigError naming `field`."""
    if not isinstance(value, str) or not SAFE_NAME.match(value) or len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(f"{field}: {value!r} is not a safe file name (letters, digits, '.', '_' and '-', "
                          f"starting with a letter or digit, at most {MAX_NAME_BYTES} bytes): it names files and "
                          "directories of the run")
    return value


def check_run_name(value: str, field: str = "name") -> str:
    """The run directory's name under out_root: one path component (no '/', '\\', '.' or '..', no control
    characters), so the run directory is always inside out_root. ConfigError naming `field` otherwise."""
    bad = (value.strip() in ("", ".", "..") or "/" in value or "\\" in value
           or any(unicodedata.category(c) == "Cc" for c in value) or len(value.encode("utf-8", "replace")) > 255)
    if bad:
        raise ConfigError(f"{field}: {value!r} is not a run directory name (one directory name under out_root: no "
                          "'/', '\\', '.' or '..', no control characters)")
    return value


def _made_by_leakaudit(root: Path) -> bool:
    """The directory holds the run marker, or is a run directory of an earlier version (which wrote no marker):
    it holds the run lock file, or a study.yaml with the `_meta.config_hash` run-study appends."""
    if (root / RUN_MARKER).is_file() or (root / RUN_LOCK).is_file():
        return True
    config = root / "study.yaml"
    if not config.is_file():
        return False
    from leakaudit.yamlio import read_yaml

    try:
        meta = (read_yaml(config) or {}).get("_meta")
    except (LeakauditError, AttributeError):
        return False
    return isinstance(meta, dict) and "config_hash" in meta


def check_run_root(root: Path) -> None:
    """LeakauditError (exit 2) naming the path unless a run may write into `root`: a new directory whose first
    existing ancestor is a writable directory, an empty directory, or one leakaudit made. Writes nothing."""
    root = Path(root)
    if root.exists() or root.is_symlink():
        if not root.is_dir():
            raise LeakauditError(f"{root}: the run directory is not a directory (a file is in the way); choose "
                                 "another name/--out")
        if any(root.iterdir()) and not _made_by_leakaudit(root):
            raise LeakauditError(f"{root}: the run directory holds files leakaudit did not make (no {RUN_MARKER}); "
                                 "a run writes only into a new or empty directory or one of its own runs: choose "
                                 "another name/--out")
        if not os.access(root, os.W_OK | os.X_OK):
            raise LeakauditError(f"{root}: the run directory is not writable")
        return
    ancestor = root.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise LeakauditError(f"{ancestor}: is not a directory, so the run directory {root} cannot be made there")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise LeakauditError(f"{ancestor}: is not writable, so the run directory {root} cannot be made there")


def claim_run_root(root: Path) -> None:
    """Check `root` (check_run_root) and create it if needed; an operating-system refusal (read-only or immutable
    directory, a pseudo file system such as /sys) is a LeakauditError naming the path."""
    root = Path(root)
    check_run_root(root)
    with _os_errors_named(root):
        root.mkdir(parents=True, exist_ok=True)


def write_run_marker(root: Path) -> None:
    """Mark `root` as a run directory leakaudit made (once; the caller holds the run's lock)."""
    marker = Path(root) / RUN_MARKER
    with _os_errors_named(Path(root)):
        if not marker.is_file():
            marker.write_text("made by leakaudit: a run directory (a run writes only into one of these)\n",
                              encoding="utf-8")


@contextmanager
def _os_errors_named(root: Path) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        raise LeakauditError(f"{e.filename or root}: cannot write the run directory there "
                             f"({e.strerror or type(e).__name__})") from None


@dataclass(frozen=True)
class RunDir:
    """A study or audit run directory. All paths are derived; nothing is created on construction."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def check_inside(self, path: Path, what: str) -> Path:
        """`path` when it resolves inside the run directory, else ConfigError naming `what` (the user input it
        was built from)."""
        if not Path(path).resolve().is_relative_to(self.root.resolve()):
            raise ConfigError(f"{what}: builds the path {path}, outside the run directory {self.root}")
        return Path(path)

    @property
    def config(self) -> Path:
        return self.root / "study.yaml"

    @property
    def env(self) -> Path:
        return self.root / "env.json"

    @property
    def records(self) -> Path:
        return self.root / "records.jsonl"

    @property
    def teacher_records(self) -> Path:
        """Records set aside for preparing the teacher only (written before records.jsonl)."""
        return self.root / "teacher_records.jsonl"

    @property
    def plan_dir(self) -> Path:
        """Holds membership.parquet and plan.json."""
        return self.root

    @property
    def membership(self) -> Path:
        return self.root / "membership.parquet"

    def model(self, model_id: str) -> Path:
        return self.root / "models" / model_id

    @property
    def teacher(self) -> Path:
        """A teacher prepared on population records (optional stage)."""
        return self.root / "models" / "_teacher"

    @property
    def teacher_literalness(self) -> Path:
        """Teacher stage: the teacher's log p of the privileged text with vs without context (leakaudit.literalness)."""
        return self.root / "teacher_literalness.json"

    @property
    def sample_literalness(self) -> Path:
        """Attacks stage: similarity of the targets' fresh samples to the privileged text (leakaudit.literalness)."""
        return self.root / "sample_literalness.json"

    def fresh(self, target: str) -> Path:
        return self.root / "signals" / "fresh" / target

    def fixed(self, model_id: str) -> Path:
        return self.root / "signals" / "fixed" / f"{model_id}.npz"

    @property
    def scores(self) -> Path:
        return self.root / "scores.parquet"

    @property
    def metrics_json(self) -> Path:
        return self.root / "metrics.json"

    @property
    def metrics_csv(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def blind_text_null(self) -> Path:
        """The blind text baseline's permutation null per level (csv; leakaudit.report.blind_null)."""
        return self.root / "blind_text_null.csv"

    @property
    def realism(self) -> Path:
        """Report stage: the targets' realism card (training-set size and passes, base -> target KL, task quality,
        sample entropy; leakaudit.realism)."""
        return self.root / "realism.json"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def candidates_csv(self) -> Path:
        """Audits: one row per candidate, one column per attack."""
        return self.root / "candidates.csv"

    @property
    def audit_json(self) -> Path:
        """Audits: what was audited, with which references and recipe."""
        return self.root / "audit.json"

    @property
    def leak_map(self) -> Path:
        """Per-token gaps of the fresh trajectories of one leaking record, for the token-level view (json)."""
        return self.root / "leak_map.json"
