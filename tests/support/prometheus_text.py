"""Reading a Prometheus text exposition in tests: the samples of one series, and their sum.

Why a module of its own: the run test and the counter unit tests both read scrapes, and a helper
imported from another test file would drag that file's tests along.
"""

from __future__ import annotations

import re
import urllib.request

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(address: str) -> str:
    """The text ``http://<address>/metrics`` serves."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return response.read().decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of series ``name``, with their labels."""
    found = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match["name"] == name:
            found.append((dict(LABEL.findall(match["labels"] or "")), float(match["value"])))
    return found


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(value for found, value in samples(text, name) if labels.items() <= found.items())
