"""The ``local_search_tool`` activity: the SQLite FTS5 document index and the RAGFlow retriever.

Why this way: the local tests run the real activity over a real folder of md, txt, html, pdf
and Chinese documents with ``DEERFLOW_HOME`` in a temp dir, so extraction, chunking, CJK
segmentation, BM25 and the incremental sync are exercised together. RAGFlow is driven over
loopback against a stdlib HTTP server that speaks its documented ``/api/v1/retrieval`` shape,
so the request we send and the error sorting are tested on the wire, not on mocks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.documents import extract as doc_extract
from activities.documents.chunk import chunk_text
from activities.documents.index import DB_FILENAME
from activities.documents.retrieval import (
    CONFIG_ERROR,
    RATE_LIMITED,
    RESOURCE_NOT_FOUND,
    RESOURCE_OUTSIDE_ROOTS,
    UNAVAILABLE,
    RetrievalActivities,
)
from config.settings import Settings
from offline.loopback_http import FakeServerHandler, send_body, serve_in_thread, shut_down
from workflows.contracts.tool_activities import LocalSearchRequest, SearchResponse

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

SOLAR_MD = """# Solar Panels

Photovoltaic cells turn sunlight into electricity. Photovoltaic panel efficiency depends on the
cell material, the temperature and the angle to the sun; modern photovoltaic modules reach 22 %.
"""
BREAD_TXT = (
    "Sourdough bread needs a starter, flour, water and salt. "
    "A baker once powered the oven with a photovoltaic roof, but that is another story.\n\n"
    + "Fold the dough every half hour and let it rise overnight in a cool place. "
    * 10
)
VOLCANO_HTML = """<!doctype html><html><head><title>Volcano Facts</title><style>.x{color:red}</style></head>
<body><nav>Home | About | Contact</nav><article><h1>How volcanoes erupt</h1>
<p>Magma chambers deep under a volcano fill with molten rock. When the pressure of dissolved gas
in the magma grows too large, the rock above gives way and the volcano erupts.</p>
<p>Basaltic magma is runny and erupts gently; rhyolitic magma is sticky and explodes.</p></article>
<script>var magma = "not content";</script></body></html>"""
QUANTUM_ZH = """# 量子计算简介

量子计算利用量子比特的叠加和纠缠来处理信息。与经典比特不同，量子比特可以同时处于多个状态。
量子计算机有望在密码学和材料模拟方面带来突破。
"""
PDF_TEXT = "Tidal turbines harness ocean currents to generate predictable renewable power."


def tiny_pdf(text: str, title: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica and ``title`` in its Info dictionary, xref exact."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (%s) >>" % title.encode(),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """DEERFLOW_HOME in a temp dir whose parent is the resource root (see ``local_settings``);
    no proxy may leak in from the machine (HTTP clients read those from the environment)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def local_settings(home: Path) -> Settings:
    """The local retriever, indexing into ``home``, with ``home``'s parent as the resource root."""
    return Settings(DEERFLOW_HOME=home, DEERFLOW_RESOURCE_ROOTS=str(home.parent), RAG_PROVIDER="local")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "zh").mkdir(parents=True)
    (docs / ".hidden").mkdir()
    (docs / "solar.md").write_text(SOLAR_MD, encoding="utf-8")
    (docs / "bread.txt").write_text(BREAD_TXT, encoding="utf-8")
    (docs / "volcano.html").write_text(VOLCANO_HTML, encoding="utf-8")
    (docs / "tidal.pdf").write_bytes(tiny_pdf(PDF_TEXT, "Tidal Energy Report"))
    (docs / "zh" / "quantum.md").write_text(QUANTUM_ZH, encoding="utf-8")
    (docs / "notes.docx").write_bytes(b"PK\x03\x04 sourdough photovoltaic")
    (docs / ".hidden" / "secret.md").write_text("# Secret\n\nphotovoltaic", encoding="utf-8")
    return docs


@pytest.fixture
def extractions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files extracted, in order (a spy around the real extraction)."""
    calls: list[str] = []
    real = doc_extract.extract_document

    def spy(path: Path, data: bytes, settings: Settings) -> doc_extract.ExtractedDocument:
        calls.append(path.name)
        return real(path, data, settings)

    monkeypatch.setattr(doc_extract, "extract_document", spy)
    return calls


async def local_search(home: Path, query: str, resources: list[Path | str], max_results: int = 5) -> SearchResponse:
    request = LocalSearchRequest(query=query, resources=[str(r) for r in resources], max_results=max_results)
    return await ActivityEnvironment().run(RetrievalActivities(local_settings(home)).local_search_tool, request)


def names(response: SearchResponse) -> list[str]:
    return [result.url.split("#")[0].rsplit("/", 1)[-1] for result in response.results]


def db_rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / DB_FILENAME) as conn:
        return conn.execute(sql).fetchall()


# ---------------------------------------------------------------- ranking and extraction


async def test_the_most_relevant_document_ranks_first(home: Path, corpus: Path) -> None:
    # bread.txt is indexed first and mentions "photovoltaic" once; only BM25 puts solar.md first.
    response = await local_search(home, "photovoltaic panel efficiency", [corpus])
    assert names(response)[:2] == ["solar.md", "bread.txt"]
    top = response.results[0]
    assert top.title == "Solar Panels"  # the first heading
    assert top.url == "document://solar.md#chunk-1"  # the file's name, not its folder on the worker (#49 §1)
    assert "22 %" in top.content
    assert top.score is not None and top.score > response.results[1].score


async def test_html_and_pdf_are_extracted(home: Path, corpus: Path) -> None:
    html = await local_search(home, "magma chambers", [corpus])
    assert names(html) == ["volcano.html"]
    assert html.results[0].title == "Volcano Facts"
    assert "not content" not in html.results[0].content  # scripts are not text
    pdf = await local_search(home, "tidal turbines", [corpus])
    assert names(pdf) == ["tidal.pdf"]
    assert pdf.results[0].title == "Tidal Energy Report"
    assert "ocean currents" in pdf.results[0].content


async def test_a_chinese_query_finds_the_chinese_document(home: Path, corpus: Path) -> None:
    for query in ("量子比特", "量子计算机有什么用？", "密码学"):
        response = await local_search(home, query, [corpus])
        assert names(response)[:1] == ["quantum.md"], query
    assert response.results[0].title == "量子计算简介"


async def test_unsupported_and_hidden_files_are_skipped(home: Path, corpus: Path, extractions: list[str]) -> None:
    response = await local_search(home, "photovoltaic", [corpus])
    assert sorted(extractions) == ["bread.txt", "quantum.md", "solar.md", "tidal.pdf", "volcano.html"]
    assert set(names(response)) == {"solar.md", "bread.txt"}


async def test_a_file_whose_name_is_not_utf_8_is_skipped_and_the_others_found(
    home: Path, corpus: Path, extractions: list[str]
) -> None:
    """A Latin-1 name ("caf\xe9.md") reaches Python as a lone surrogate, which SQLite's text and a
    payload refuse: the whole search failed with UnicodeEncodeError, on every attempt (issue #42)."""
    (corpus / os.fsdecode(b"caf\xe9 photovoltaic.md")).write_bytes(SOLAR_MD.encode())
    response = await local_search(home, "photovoltaic", [corpus])
    assert set(names(response)) == {"solar.md", "bread.txt"}
    assert not any(name.startswith("caf") for name in extractions)
    response.model_dump_json()


async def test_results_point_at_the_matching_chunk(home: Path, tmp_path: Path) -> None:
    filler = "\n\n".join(f"Paragraph {i} talks about nothing in particular, at some length. " * 4 for i in range(20))
    long = tmp_path / "long.md"
    long.write_text(f"# Long\n\n{filler}\n\nThe xylophone appears only here, at the very end.\n", encoding="utf-8")
    response = await local_search(home, "xylophone", [long])
    (result,) = response.results
    assert "xylophone" in result.content
    assert not result.url.endswith("#chunk-1")
    assert len(result.content) <= 2000


async def test_max_results_is_respected(home: Path, corpus: Path) -> None:
    assert len((await local_search(home, "photovoltaic", [corpus], max_results=1)).results) == 1
    assert (await local_search(home, "photovoltaic", [corpus], max_results=0)).results == []


# ---------------------------------------------------------------- scope


async def test_results_come_only_from_the_given_resources(home: Path, tmp_path: Path, corpus: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "panels.md").write_text("# Photovoltaic\n\n" + "photovoltaic efficiency " * 30, encoding="utf-8")
    assert names(await local_search(home, "photovoltaic", [other])) == ["panels.md"]  # now in the index
    assert "panels.md" not in names(await local_search(home, "photovoltaic", [corpus]))
    assert names(await local_search(home, "photovoltaic", [corpus / "bread.txt"])) == ["bread.txt"]
    assert names(await local_search(home, "photovoltaic", [(corpus / "bread.txt").as_uri()])) == ["bread.txt"]


async def test_a_local_uri_names_a_document_below_a_root_and_leaves_none(home: Path, corpus: Path) -> None:
    """What the API server lists (``local://`` + the path below the root, issue #49 §1) is searched as
    that document; a ``..`` in it is refused like the path it leads to, before anything is looked for."""
    assert names(await local_search(home, "photovoltaic", ["local://docs/bread.txt"])) == ["bread.txt"]
    assert names(await local_search(home, "photovoltaic", ["LOCAL://docs/solar%2Emd"])) == ["solar.md"]
    for escape in ("local://../../../etc/passwd", "local://docs/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
                   "local://docs/.hidden/secret.md"):
        with pytest.raises(ApplicationError) as caught:
            await local_search(home, "photovoltaic", [escape])
        assert caught.value.type == RESOURCE_OUTSIDE_ROOTS, escape
    for missing in ("local://", "local:///etc/passwd"):  # the latter is etc/passwd below the root
        with pytest.raises(ApplicationError) as caught:
            await local_search(home, "photovoltaic", [missing])
        assert caught.value.type == RESOURCE_NOT_FOUND
        assert str(home.parent) not in caught.value.message  # where the worker looked is not said


async def test_a_missing_path_is_a_non_retryable_resource_not_found(home: Path, corpus: Path) -> None:
    missing = corpus / "nope" / "gone.md"
    with pytest.raises(ApplicationError) as caught:
        await local_search(home, "photovoltaic", [corpus, missing])
    assert caught.value.type == RESOURCE_NOT_FOUND
    assert caught.value.non_retryable
    assert str(missing) in caught.value.message


async def test_a_rag_uri_needs_the_ragflow_provider(home: Path) -> None:
    with pytest.raises(ApplicationError) as caught:
        await local_search(home, "anything", ["rag://dataset/abc"])
    assert caught.value.type == CONFIG_ERROR and caught.value.non_retryable


# ---------------------------------------------------------------- incremental index


async def test_unchanged_files_are_not_extracted_again_and_changed_ones_are(
    home: Path, corpus: Path, extractions: list[str]
) -> None:
    await local_search(home, "photovoltaic", [corpus])
    assert len(extractions) == 5
    extractions.clear()

    await local_search(home, "photovoltaic", [corpus])
    assert extractions == []

    (corpus / "solar.md").write_text("# Wind\n\nA windmill turns wind into rotation.\n", encoding="utf-8")
    found = await local_search(home, "windmill", [corpus])
    assert extractions == ["solar.md"]
    assert names(found) == ["solar.md"] and found.results[0].title == "Wind"
    assert "solar.md" not in names(await local_search(home, "photovoltaic sunlight", [corpus]))
    assert db_rows(home, "SELECT count(*) FROM chunks WHERE content LIKE '%sunlight%'") == [(0,)]


async def test_a_deleted_file_is_dropped_when_its_folder_is_reindexed(home: Path, corpus: Path) -> None:
    await local_search(home, "sourdough", [corpus])
    bread = str((corpus / "bread.txt").resolve())
    assert db_rows(home, f"SELECT count(*) FROM documents WHERE path = '{bread}'") == [(1,)]

    (corpus / "bread.txt").unlink()
    assert (await local_search(home, "sourdough", [corpus])).results == []
    assert db_rows(home, f"SELECT count(*) FROM documents WHERE path = '{bread}'") == [(0,)]
    assert db_rows(home, "SELECT count(*) FROM chunk_fts WHERE chunk_fts MATCH 'sourdough'") == [(0,)]


async def test_concurrent_searches_index_each_file_once(home: Path, corpus: Path) -> None:
    responses = await asyncio.gather(*(local_search(home, "photovoltaic", [corpus]) for _ in range(6)))
    assert all(names(response)[:1] == ["solar.md"] for response in responses)
    assert db_rows(home, "SELECT count(*) FROM documents") == [(5,)]
    assert db_rows(home, "SELECT count(*) FROM chunks") == db_rows(home, "SELECT count(*) FROM chunk_fts")
    assert db_rows(home, "PRAGMA journal_mode") == [("wal",)]


# ---------------------------------------------------------------- hostile queries


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "AND OR NOT",
        "*",
        "(",
        "NEAR(",
        ")",
        "^",
        "-",
        "+",
        ":",
        "title:solar",
        '"unbalanced',
        "NEAR(a b, 3)",
        "a AND",
        "OR",
        "{title body}: x",
        "\x00",
        "🙂",
        "''",
        "\\",
        "solar*",
    ],
)
async def test_hostile_queries_do_not_raise(home: Path, corpus: Path, query: str) -> None:
    response = await local_search(home, query, [corpus])
    assert isinstance(response, SearchResponse)


async def test_query_syntax_is_treated_as_words(home: Path, corpus: Path) -> None:
    response = await local_search(home, '"magma" AND (NEAR( basaltic -', [corpus])
    assert names(response)[:1] == ["volcano.html"]


async def test_the_activity_heartbeats_while_indexing(home: Path, corpus: Path) -> None:
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    local_search_tool = RetrievalActivities(local_settings(home)).local_search_tool
    await env.run(local_search_tool, LocalSearchRequest(query="photovoltaic", resources=[str(corpus)]))
    assert beats


def test_chunks_are_bounded_cover_the_text_and_overlap() -> None:
    words = [f"w{i}" for i in range(3000)]
    text = "\n\n".join(" ".join(words[i : i + 60]) for i in range(0, 3000, 60))
    chunks = chunk_text(text, size=1500, overlap=200)
    assert len(chunks) > 5
    assert all(len(chunk) <= 1700 for chunk in chunks)
    assert {word for chunk in chunks for word in chunk.split()} == set(words)  # nothing lost, no word cut
    assert all(set(a.split()) & set(b.split()) for a, b in itertools.pairwise(chunks))  # neighbours overlap
    assert all(
        chunk.split("\n\n")[-1].split()[-1] in ("w2999", *[f"w{i - 1}" for i in range(60, 3000, 60)])
        for chunk in chunks
    )  # cuts fall at paragraph ends


# ---------------------------------------------------------------- RAGFlow


class FakeRAGFlow:
    """A loopback RAGFlow: records requests to ``/api/v1/retrieval`` and answers from a queue."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, dict[str, str], Any]] = []
        self.thread: threading.Thread | None = None
        fake = self

        class Handler(FakeServerHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as RAGFlow behind its nginx

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                      "client_port": self.client_address[1]})
                status, headers, reply = fake.replies.pop(0) if fake.replies else (200, {}, {"code": 0, "data": {}})
                payload = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                send_body(self, status, payload, {"Content-Type": "application/json", **headers})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeRAGFlow:
        self.thread = serve_in_thread(self.server, "fake-ragflow")
        return self

    def __exit__(self, *exc: object) -> None:
        shut_down(self.server, self.thread)


@pytest.fixture
def ragflow(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRAGFlow]:
    with FakeRAGFlow() as fake:
        for name in PROXY_VARS:
            monkeypatch.delenv(name, raising=False)
        yield fake


def ragflow_settings(fake: FakeRAGFlow) -> Settings:
    return Settings(RAG_PROVIDER="ragflow", RAGFLOW_API_URL=fake.base_url + "/", RAGFLOW_API_KEY="ragflow-test-key",
                    SEARCH_TIMEOUT_SECONDS=2)


async def rag_search(settings: Settings, resources: list[str], max_results: int = 3) -> SearchResponse:
    request = LocalSearchRequest(query="What is RAGFlow?", resources=resources, max_results=max_results)
    return await ActivityEnvironment().run(RetrievalActivities(settings).local_search_tool, request)


async def rag_error(ragflow: FakeRAGFlow, status: int, reply: Any, headers: dict[str, str] | None = None) -> Any:
    ragflow.replies.append((status, headers or {}, reply))
    with pytest.raises(ApplicationError) as caught:
        await rag_search(ragflow_settings(ragflow), ["rag://dataset/ds1"])
    return caught.value


async def test_ragflow_request_and_result_mapping(ragflow: FakeRAGFlow) -> None:
    ragflow.replies.append(
        (
            200,
            {},
            {
                "code": 0,
                "data": {
                    "chunks": [
                        {
                            "content": "RAGFlow is a RAG engine.",
                            "document_id": "doc1",
                            "document_keyword": "intro.pdf",
                            "dataset_id": "ds1",
                            "similarity": 0.91,
                            "id": "c1",
                        },
                        {
                            "content_with_weight": "Older field names.",
                            "doc_id": "doc9",
                            "kb_id": "ds2",
                            "similarity": 0.5,
                        },
                        {"content": "", "document_id": "doc1", "similarity": 0.4},
                    ],
                    "doc_aggs": [{"doc_id": "doc9", "doc_name": "legacy.txt", "count": 1}],
                    "total": 3,
                },
            },
        )
    )
    resources = ["rag://dataset/ds1", "rag://dataset/ds2#doc9", "rag://dataset/ds1"]
    response = await rag_search(ragflow_settings(ragflow), resources, max_results=2)

    (sent,) = ragflow.requests
    assert sent["path"] == "/api/v1/retrieval"
    assert sent["headers"]["Authorization"] == "Bearer ragflow-test-key"
    assert sent["body"] == {
        "question": "What is RAGFlow?",
        "dataset_ids": ["ds1", "ds2"],
        "document_ids": ["doc9"],
        "page": 1,
        "page_size": 2,
    }
    assert [(r.title, r.url, r.content, r.score) for r in response.results] == [
        ("intro.pdf", "rag://dataset/ds1#doc1", "RAGFlow is a RAG engine.", 0.91),
        ("legacy.txt", "rag://dataset/ds2#doc9", "Older field names.", 0.5),
    ]


async def test_ragflow_searches_reuse_the_connection(ragflow: FakeRAGFlow) -> None:
    """A client per retrieval opened a connection (to an https RAGFlow, a TLS handshake) per step."""
    for _ in range(3):
        await rag_search(ragflow_settings(ragflow), ["rag://dataset/ds-1"])

    assert len(ragflow.requests) == 3
    assert len({seen["client_port"] for seen in ragflow.requests}) == 1


async def test_ragflow_http_401_is_not_retryable(ragflow: FakeRAGFlow) -> None:
    error = await rag_error(ragflow, 401, {"code": 401, "message": "Unauthorized"})
    assert error.type == CONFIG_ERROR and error.non_retryable
    assert "rejected the API key (401)" in error.message and "Unauthorized" in error.message


async def test_ragflow_invalid_key_code_in_a_200_is_not_retryable(ragflow: FakeRAGFlow) -> None:
    error = await rag_error(ragflow, 200, {"code": 109, "message": "Authentication error: API key is invalid!"})
    assert error.type == CONFIG_ERROR and error.non_retryable
    assert "rejected the API key" in error.message and "API key is invalid" in error.message


async def test_ragflow_foreign_dataset_is_not_retryable(ragflow: FakeRAGFlow) -> None:
    error = await rag_error(ragflow, 200, {"code": 102, "message": "You don't own the dataset ds1."})
    assert error.type == CONFIG_ERROR and error.non_retryable


async def test_ragflow_429_is_retried_after_retry_after(ragflow: FakeRAGFlow) -> None:
    error = await rag_error(ragflow, 429, {"code": 429, "message": "slow down"}, {"Retry-After": "7"})
    assert error.type == RATE_LIMITED and not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=7)


async def test_ragflow_5xx_and_server_exceptions_are_retryable(ragflow: FakeRAGFlow) -> None:
    error = await rag_error(ragflow, 503, b"<html>bad gateway</html>")
    assert error.type == UNAVAILABLE and not error.non_retryable
    error = await rag_error(ragflow, 200, {"code": 100, "message": "ConnectionError('es down')"})
    assert error.type == UNAVAILABLE and not error.non_retryable


async def test_ragflow_needs_rag_uris(ragflow: FakeRAGFlow) -> None:
    with pytest.raises(ApplicationError) as caught:
        await rag_search(ragflow_settings(ragflow), ["/some/local/folder"])
    assert caught.value.type == CONFIG_ERROR and caught.value.non_retryable
    assert "rag://dataset/" in caught.value.message
    assert ragflow.requests == []


async def test_an_unknown_rag_provider_is_a_config_error(home: Path) -> None:
    with pytest.raises(ApplicationError) as caught:
        await rag_search(Settings(DEERFLOW_HOME=home, RAG_PROVIDER="milvus"), ["rag://dataset/ds1"])
    assert caught.value.type == CONFIG_ERROR and "ragflow" in caught.value.message
    assert "RAG_PROVIDER='milvus' is not a supported retriever" in caught.value.message
