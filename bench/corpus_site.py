"""The bundled search corpus as a web site on loopback, so a bench's crawls of found URLs succeed.

The corpus's URLs (``https://offline.deerflow.example/...``) are served nowhere: on a real model
(docs/local-models.md, run D) the researcher found one, asked to crawl it, and the crawl failed as
an unknown host. Here each corpus page is served as HTML on 127.0.0.1, and the search index the
bench serves names it ``http://offline.deerflow.example:<port>/<path>``; the bench's worker
resolves that one name to 127.0.0.1 (``bench/loopback_only/sitecustomize.py``, told by
:data:`LOOPBACK_NAMES_ENV`) and its crawler admits it by the operator's explicit setting
(``DEERFLOW_CRAWL_ALLOW_HOSTS``), the only way the address guard lets a crawl reach loopback. Nothing
resolves or connects outside 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import urlsplit

from bench.harness import serve_pages
from offline.search_index import DEFAULT_CORPUS, SearchIndex

CORPUS_HOST = "offline.deerflow.example"
# Names the bench's loopback-only resolver answers with 127.0.0.1 (comma-separated), in the worker's env.
LOOPBACK_NAMES_ENV = "BENCH_LOOPBACK_NAMES"


def page(title: str, content: str) -> bytes:
    """A corpus entry as the article page it stands for."""
    title, content = html.escape(title), html.escape(content)
    return (f"<!doctype html><html><head><title>{title}</title></head><body><article><h1>{title}</h1>"
            f"<p>{content}</p></article></body></html>").encode()


@contextlib.contextmanager
def corpus_site() -> Iterator[tuple[SearchIndex, dict[str, str]]]:
    """Serve the corpus's pages on 127.0.0.1; yields the index naming them and the worker's env."""
    corpus = SearchIndex.from_file(DEFAULT_CORPUS)
    pages = {urlsplit(document.url).path: page(document.title, document.content) for document in corpus.documents}
    with serve_pages(pages) as base_url:
        site = f"http://{CORPUS_HOST}:{urlsplit(base_url).port}"
        index = SearchIndex([replace(document, url=site + urlsplit(document.url).path)
                             for document in corpus.documents])
        yield index, {LOOPBACK_NAMES_ENV: CORPUS_HOST, "DEERFLOW_CRAWL_ALLOW_HOSTS": CORPUS_HOST}
