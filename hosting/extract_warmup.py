"""Imported only by the extraction fork server (``activities.support.isolated.PRELOAD``): one small
extraction, so that what trafilatura loads lazily on first use (stop lists and the like, about
300 ms) is loaded once in the server and shared by every forked child, instead of per page.
"""

from __future__ import annotations

import gc

from activities.web.page_text import page_job

_SAMPLE = b"<html><head><title>Warm-up</title></head><body><p>A short page to warm the extractors.</p></body></html>"

try:
    for _ in page_job(_SAMPLE, "utf-8", "html", "http://127.0.0.1/", 1000):
        pass
except Exception:  # best effort: the fork server must start even if the warm-up cannot run
    pass

# Everything the server holds now is shared with the children copy-on-write; frozen, it is never
# walked by their garbage collector, which would otherwise write to (and so copy) its pages.
gc.freeze()
