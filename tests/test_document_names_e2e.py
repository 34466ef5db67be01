"""A document uploaded through DeerFlow's UI is known by its file's name wherever people read the run
(issue #49 §1), on ``starter.py serve`` as its own process, a real worker and the dev server.

Seen before: the upload's answer and the resource list gave the server's path as the ``uri``
(DeerFlow's settings list shows it), the @ mention wrote it into the question, the researcher's task
listed it (a model copied it into plan and step titles) and each passage was cited as
``file:///…/.deerflow/resources/uploads/…``. Now the API names a document ``local://`` + its path
below the resource root, the worker finds it there, and the model, the report, the chat stream, the
API's run view, ``status`` and ``inspect`` say the file's name.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.support.history_checks import activity_types
from tests.support.processes import DevServer, ServeProcess, free_port, start_worker, starter

pytestmark = pytest.mark.timeout(240)

QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
NOTE = (b"# Supplier notes\n\nSolid-state batteries for electric vehicles: our supplier expects pilot "
        b"production of solid-state cells in 2028.\n")


async def test_an_uploaded_document_is_named_by_its_file_never_by_its_server_path(
    dev_server: DevServer, client: Client, tmp_path: Path,
) -> None:
    root, home = tmp_path / "resources", tmp_path / "home"
    root.mkdir()
    worker = await start_worker(dev_server, client, tmp_path / "worker.log", DEERFLOW_HOME=str(home),
                                DEERFLOW_RESOURCE_ROOTS=str(root))
    server = ServeProcess(dev_server.address, free_port(), tmp_path / "serve.log", home,
                          env={"DEERFLOW_RESOURCE_ROOTS": str(root)})
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=180) as http:
            uploaded = await http.post("/api/rag/upload", files={"file": ("supplier notes.md", NOTE, "text/markdown")})
            assert uploaded.status_code == 200, uploaded.text
            resource = uploaded.json()
            assert resource["uri"] == "local://uploads/local/supplier-notes.md"
            listed = (await http.get("/api/rag/resources")).text
            # DeerFlow's @ mention writes [title](uri) into the question and sends the resource along.
            mention = f"[{resource['title']}]({resource['uri']})"
            stream = await http.post("/api/chat/stream", json={
                "thread_id": "named-documents", "auto_accepted_plan": True, "max_step_num": 2,
                "messages": [{"role": "user", "content": f"{QUESTION} Use {mention}."}],
                "resources": [{"uri": resource["uri"], "title": resource["title"]}]})
            assert stream.status_code == 200, stream.text
            run_id = "deerflow-web-named-documents.1"
            run_view = (await http.get(f"/api/runs/{run_id}")).text
        handle = client.get_workflow_handle(run_id)
        result = await handle.result()
        assert "local_search_tool" in activity_types(await handle.fetch_history()).values()  # the worker found it
        assert "(document://supplier-notes.md#chunk-1)" in result["report"], result["report"][-800:]
        status = starter(dev_server, "status", run_id)
        inspection = starter(dev_server, "inspect", run_id, "--full")
        assert status.returncode == 0 and inspection.returncode == 0, status.stderr + inspection.stderr
        assert "supplier-notes.md" in inspection.stdout  # the local search names the document
        seen = {"upload": uploaded.text, "list": listed, "chat stream": stream.text, "run view": run_view,
                "result": json.dumps(result), "status": status.stdout, "inspect": inspection.stdout}
        for where, text in seen.items():
            assert str(root) not in text and str(tmp_path) not in text, (where, text[:2000])
    finally:
        server.kill()
        worker.stop()
