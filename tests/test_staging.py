"""leakaudit.io.staging_dir replacing a finished directory: a stop at any instant leaves one complete version."""

import os
import shutil

import pytest

from leakaudit import io
from leakaudit.io import complete_version, is_done, mark_done, previous_dir, restore_previous, staging_dir


class Stop(BaseException):
    """A stop (SIGKILL, power) at a chosen instant; BaseException, so no handler in the code under test eats it."""


def _finished(path, text):
    with staging_dir(path) as tmp:
        (tmp / "weights").write_text(text)
        mark_done(tmp)


def test_a_stop_while_the_old_version_is_deleted_keeps_a_complete_version(tmp_path, monkeypatch):
    """The delete of the old version stops half-way (its DONE marker gone, the rest not yet): the new version is
    already in place. It used to delete the old version before renaming the new one in, so this stop left no
    complete version at all: a resumable checkpoint lost."""
    final, real_rmtree = tmp_path / "m.ckpt", shutil.rmtree
    _finished(final, "step 10")

    def half_delete(path, *args, **kwargs):
        os.remove(os.path.join(path, "DONE"))
        raise Stop

    monkeypatch.setattr(io.shutil, "rmtree", half_delete)
    with pytest.raises(Stop):
        _finished(final, "step 20")
    monkeypatch.setattr(io.shutil, "rmtree", real_rmtree)
    assert complete_version(final) == final and (final / "weights").read_text() == "step 20"
    _finished(final, "step 30")  # the next save clears what the stop left
    assert (final / "weights").read_text() == "step 30" and not previous_dir(final).exists()


def test_a_stop_between_the_two_renames_leaves_the_old_version_found_and_restored(tmp_path, monkeypatch):
    final = tmp_path / "m.ckpt"
    _finished(final, "step 10")
    real_replace = os.replace

    def stop_on_the_second(src, dst):
        if str(dst) == str(final):  # the new version's rename: the old one is already aside
            raise Stop
        real_replace(src, dst)

    monkeypatch.setattr(io.os, "replace", stop_on_the_second)
    with pytest.raises(Stop):
        _finished(final, "step 20")
    monkeypatch.setattr(io.os, "replace", real_replace)
    assert not final.exists()
    found = complete_version(final)
    assert found == previous_dir(final) and (found / "weights").read_text() == "step 10"
    restore_previous(final)
    assert is_done(final) and (final / "weights").read_text() == "step 10" and not previous_dir(final).exists()


def test_a_half_deleted_previous_beside_a_complete_final_is_removed_not_restored(tmp_path):
    final = tmp_path / "m"
    _finished(final, "new")
    previous_dir(final).mkdir()
    (previous_dir(final) / "weights").write_text("old, half deleted")
    assert complete_version(final) == final
    restore_previous(final)
    assert not previous_dir(final).exists() and (final / "weights").read_text() == "new"
    assert complete_version(tmp_path / "never") is None


def test_the_previous_version_is_a_work_folder():
    assert io.is_work_folder("models/math-s0.previous") and not io.is_work_folder("models/math-s0")


def test_a_checkpoint_left_aside_by_a_stop_is_still_resumed(tmp_path):
    from leakaudit.io import write_json
    from shadow_models.checkpoint import resumable_step

    ckpt, fingerprint = tmp_path / "m.ckpt", {"config": "abc", "records": ["r1", "r2"], "num_processes": 1}
    previous_dir(ckpt).mkdir()
    write_json(previous_dir(ckpt) / "state.json", {"next_step": 20, "fingerprint": fingerprint})
    mark_done(previous_dir(ckpt))
    assert resumable_step(ckpt, fingerprint) == 20
    assert resumable_step(ckpt, {**fingerprint, "num_processes": 2}) == 0
    assert resumable_step(ckpt, {**fingerprint, "num_processes": 2}, ignore=("num_processes",)) == 20
