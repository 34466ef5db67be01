"""``POST /api/rag/upload`` (DeerFlow's Settings > RAG upload) on the real API server, on loopback.

The bytes and the file name are untrusted: these tests hold the server to storing them only in
the operator's upload folder (its caller's own folder there: ``local`` on a server without tokens),
under a name it chose, within the operator's caps. Whose uploads a token sees: test_api_tenancy.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from config.settings import load_settings
from tests.support.web_server import api_server

pytestmark = pytest.mark.timeout(60)

NOTE = b"# Fleet trial\n\nSodium-ion packs kept 91% capacity after 2,000 cycles.\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "resources"
    folder.mkdir()
    return folder


def serving(time_env: WorkflowEnvironment, root: Path, **changes: Any) -> Any:
    settings = load_settings({}).model_copy(update={"resource_roots": [root], "web_token": None, **changes})
    return api_server(time_env.client, settings)


async def upload(base: str, name: str, content: bytes, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{base}/api/rag/upload", files={"file": (name, content, "text/markdown")},
                               headers=headers)


@pytest.fixture
async def base(time_env: WorkflowEnvironment, root: Path) -> AsyncIterator[str]:
    async with serving(time_env, root) as url:
        yield url


async def test_an_upload_becomes_a_listed_resource_and_never_replaces_one(base: str, root: Path) -> None:
    first = await upload(base, "fleet trial.md", NOTE)
    assert first.status_code == 200, first.text
    resource = first.json()
    stored = root / "uploads" / "local" / "fleet-trial.md"
    # Named below the resource root, never by the server's path (DeerFlow's settings list shows the uri).
    assert resource == {"uri": "local://uploads/local/fleet-trial.md", "title": "fleet-trial.md",
                        "description": "uploads/local/fleet-trial.md"}
    assert stored.read_bytes() == NOTE
    second = await upload(base, "fleet trial.md", b"another text")
    assert second.json()["title"] == "fleet-trial-2.md"
    assert stored.read_bytes() == NOTE  # the first is intact
    async with httpx.AsyncClient(timeout=30) as http:
        listed = (await http.get(f"{base}/api/rag/resources", params={"query": "fleet"})).json()["resources"]
    assert {item["title"] for item in listed} == {"fleet-trial.md", "fleet-trial-2.md"}
    assert str(root) not in str(listed)
    assert sorted(path.name for path in root.rglob("*")) == ["fleet-trial-2.md", "fleet-trial.md", "local", "uploads"]


async def test_a_document_is_listed_by_the_name_the_worker_finds_it_by(time_env: WorkflowEnvironment, root: Path,
                                                                      tmp_path: Path) -> None:
    """``local://`` names a path below the first root that holds it: a second root's file of the same
    path is not listed (its uri would search the first root's), a file of its own is."""
    second = tmp_path / "second"
    second.mkdir()
    for folder, text in ((root, "first"), (second, "second")):
        (folder / "notes.md").write_text(f"# {text}\n")
    (second / "only-here.md").write_text("# only here\n")
    async with serving(time_env, root, resource_roots=[root, second]) as url, httpx.AsyncClient(timeout=30) as http:
        listed = (await http.get(f"{url}/api/rag/resources")).json()["resources"]
    assert [item["uri"] for item in listed] == ["local://notes.md", "local://only-here.md"]
    assert str(tmp_path) not in str(listed)

async def test_a_file_whose_name_is_not_utf_8_is_left_out_of_the_listing(time_env: WorkflowEnvironment,
                                                                        root: Path) -> None:
    """A Latin-1 name under a root (a lone surrogate to Python) made the listing's JSON fail: a 500
    for every listing (issue #42). It is left out; the others are listed."""
    (root / "fleet.md").write_bytes(NOTE)
    (root / os.fsdecode(b"caf\xe9.md")).write_bytes(NOTE)
    async with serving(time_env, root) as url, httpx.AsyncClient(timeout=30) as http:
        answer = await http.get(f"{url}/api/rag/resources")
    assert answer.status_code == 200, answer.text
    assert [item["uri"] for item in answer.json()["resources"]] == ["local://fleet.md"]


@pytest.mark.parametrize("name", ["../../outside.md", "/etc/cron.d/x.md", "..\\..\\outside.md", ".hidden.md"])
async def test_the_name_cannot_pick_the_folder(base: str, root: Path, name: str) -> None:
    response = await upload(base, name, NOTE)
    assert response.status_code == 200, response.text
    stored = root / response.json()["description"]  # the path below the root
    assert stored.parent == root / "uploads" / "local" and not stored.name.startswith(".")
    assert stored.read_bytes() == NOTE
    assert not (root.parent / "outside.md").exists()


@pytest.mark.parametrize(("name", "content", "status", "detail"), [
    ("report.pdf", b"%PDF-1.7", 415, "only .md and .txt"),
    ("run.sh", b"echo hi", 415, "only .md and .txt"),
    ("notes.txt", b"\xff\xfe\x00binary", 400, "not UTF-8"),
    ("empty.md", b"", 400, "empty"),
    ("big.md", b"x" * 3000, 413, "DEERFLOW_WEB_UPLOAD_MAX_BYTES"),
    ("huge.md", b"x" * 30_000, 413, "DEERFLOW_WEB_UPLOAD_MAX_BYTES"),  # refused before it is parsed
])
async def test_refused_files_are_not_stored(time_env: WorkflowEnvironment, root: Path, name: str, content: bytes,
                                            status: int, detail: str) -> None:
    async with serving(time_env, root, web_upload_max_bytes=2048) as url:
        response = await upload(url, name, content)
    assert response.status_code == status and detail in response.json()["detail"], response.text
    assert [path for path in root.rglob("*") if path.is_file()] == []


async def test_the_folder_has_a_cap(time_env: WorkflowEnvironment, root: Path) -> None:
    async with serving(time_env, root, web_upload_max_total_bytes=len(NOTE) + 10) as url:
        assert (await upload(url, "a.md", NOTE)).status_code == 200
        full = await upload(url, "b.md", NOTE)
    assert full.status_code == 507 and "DEERFLOW_WEB_UPLOAD_MAX_TOTAL_BYTES" in full.json()["detail"]
    assert [path.name for path in (root / "uploads" / "local").iterdir()] == ["a.md"]


async def test_a_folder_outside_the_roots_turns_uploads_off(time_env: WorkflowEnvironment, root: Path,
                                                            tmp_path: Path) -> None:
    async with serving(time_env, root, web_upload_dir=tmp_path / "elsewhere") as url:
        response = await upload(url, "a.md", NOTE)
    assert response.status_code == 403 and "DEERFLOW_RESOURCE_ROOTS" in response.json()["detail"]
    assert not (tmp_path / "elsewhere").exists()


async def test_a_page_of_another_origin_cannot_upload(base: str, root: Path) -> None:
    """A multipart POST needs no CORS preflight, so the Origin rule is what stops a foreign page."""
    response = await upload(base, "a.md", NOTE, Origin="http://evil.example")
    assert response.status_code == 403
    assert not (root / "uploads").exists()


async def test_a_form_without_a_file_is_a_clear_error(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{base}/api/rag/upload", data={"name": "x"}, files={"other": ("a.md", b"x")})
    assert response.status_code == 400 and "'file'" in response.json()["detail"]
