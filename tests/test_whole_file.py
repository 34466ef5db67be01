"""``replace_whole``: a small shared file is replaced whole and owner-only, and a failed write
leaves the old file and no temporary behind (runtime/whole_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.whole_file import replace_whole


def test_the_file_is_replaced_whole_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    replace_whole(path, '{"new": true}')
    assert path.read_text() == '{"new": true}' and path.stat().st_mode & 0o077 == 0
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        replace_whole(path, "new")
    assert path.is_dir() and [p.name for p in tmp_path.iterdir()] == ["state.json"]
