"""The local-model bench serves its search corpus's pages on loopback (bench/corpus_site.py), so a
crawl of a found URL reads the page (issue #24: on llama-server every such crawl failed as an unknown
host), while its worker still resolves nothing but loopback and its crawler reaches loopback only by
the operator's setting.

The crawls run in a child process started as the bench starts its worker (``PYTHONPATH`` with
``bench/loopback_only``), so the resolver under test is the one the worker uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.corpus_site import corpus_site

REPO = Path(__file__).resolve().parent.parent
CRAWL = """
import asyncio, json, os, sys
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from activities.web.crawl import CrawlActivities
from config.settings import load_settings
from workflows.contracts.tool_activities import CrawlRequest

async def crawl(url, allow_hosts):
    activities = CrawlActivities(load_settings({**os.environ, "DEERFLOW_CRAWL_ALLOW_HOSTS": allow_hosts}))
    try:
        result = await ActivityEnvironment().run(activities.crawl_tool, CrawlRequest(url=url))
        return {"markdown": result.markdown}
    except ApplicationError as error:
        return {"error": error.type, "message": error.message}

print(json.dumps([asyncio.run(crawl(url, allow_hosts)) for url, allow_hosts in json.loads(sys.argv[1])]))
"""


def crawled(env: dict[str, str], *crawls: tuple[str, str]) -> list[dict[str, str]]:
    """What a bench worker's crawler, started with ``env``, makes of each (URL, crawl allow-list)."""
    environment = {**os.environ, **env, "PYTHONPATH": f"{REPO / 'bench' / 'loopback_only'}{os.pathsep}{REPO}"}
    done = subprocess.run([sys.executable, "-c", CRAWL, json.dumps(crawls)], env=environment, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_found_corpus_url_is_crawled_on_loopback_and_nothing_else_resolves() -> None:
    with corpus_site() as (index, env):
        found = next(document for document in index.documents if "heat pump" in document.title.lower())
        allowed = env["DEERFLOW_CRAWL_ALLOW_HOSTS"]
        page, made_up, refused = crawled(env, (found.url, allowed), ("https://example.com/heat-pumps", allowed),
                                         (found.url, ""))  # the last without the operator's setting
    assert found.content[:80] in page["markdown"]
    assert made_up["error"] == "CrawlFailed" and "could not resolve host 'example.com'" in made_up["message"]
    assert refused["error"] == "CrawlRefused" and "loopback" in refused["message"]
