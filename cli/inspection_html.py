"""``starter.py inspect ID --html FILE``: the inspection as one self-contained page for a bug report.

It loads nothing: no script, font, image or stylesheet from anywhere, its one inline stylesheet
allowed by its hash in the page's own Content-Security-Policy, so opening the file tells no host
that, when or where it is read, and the run's text can run nothing. Everything the run wrote is
escaped (``html.escape``) and shown as text, never as markup or links; stages and calls fold
with ``<details>``, which needs no script. The headings are the terminal's (cli/inspection_text.py).
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from cli.inspection_text import call_line, message_line, run_lines, stage_line, wait_line
from runtime.inspection_model import Call, Part, RunInspection, Stage

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 72rem; padding: 1rem; color: #1d2330; }
h1 { font-size: 1.2rem; overflow-wrap: anywhere; }
.facts { color: #556; font-size: 0.9em; margin: 0.1rem 0; overflow-wrap: anywhere; }
.problem { color: #a00; }
details { border-left: 3px solid #cdd6ea; margin: 0.4rem 0; padding-left: 0.6rem; }
details.stage > summary { font-weight: bold; }
summary { cursor: pointer; overflow-wrap: anywhere; }
.part { margin: 0.3rem 0 0.3rem 0.8rem; }
.label { font-size: 0.85em; color: #445; font-weight: bold; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f7f9; padding: 0.4rem; margin: 0.1rem 0;
  font-size: 0.85em; }
.message { background: #fff3d6; padding: 0.2rem 0.4rem; overflow-wrap: anywhere; }
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
POLICY = f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; form-action 'none'"


def render_html(inspection: RunInspection) -> str:
    """The page: the run's facts, its request, each stage with its calls, waits and messages, its result."""
    body = [f"<h1>{escape(run_lines(inspection)[0])}</h1>",
            *[f'<p class="facts">{escape(line)}</p>' for line in run_lines(inspection)[1:]],
            *[f'<p class="facts problem">{escape(problem)}</p>' for problem in inspection.problems],
            _folded("Request", _parts(inspection.request), "stage"),
            *[_stage(stage) for stage in inspection.stages],
            _folded("Result", _parts(inspection.result), "stage", opened=True)]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{escape(POLICY)}">'
            '<meta name="referrer" content="no-referrer">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(f'Inspection of {inspection.workflow_id}')}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _stage(stage: Stage) -> str:
    inner = [f'<p class="facts">{escape(wait_line(wait))}</p>' for wait in stage.waits]
    inner += [f'<p class="message">{escape(message_line(message))}</p>' for message in stage.messages]
    inner += [_call(call) for call in stage.calls]
    return _folded(stage_line(stage), "".join(inner), "stage", opened=True)


def _call(call: Call) -> str:
    inner = [f'<p class="facts">{escape(call_line(call))}</p>']
    inner += [f'<p class="facts problem">{escape(f"attempt {f.attempt} failed: {f.message}")}</p>'
              for f in call.failures]
    if call.input:
        inner.append(_folded("input", _parts(call.input), "io"))
    if call.output:
        inner.append(_folded("output", _parts(call.output), "io"))
    return _folded(call.title, "".join(inner), "call")


def _folded(title: str, inner: str, kind: str, opened: bool = False) -> str:
    return f'<details class="{kind}"{" open" if opened else ""}><summary>{escape(title)}</summary>{inner}</details>'


def _parts(parts: list[Part]) -> str:
    return "".join(f'<div class="part"><div class="label">{escape(part.label)}</div>'
                   f"<pre>{escape(part.text)}</pre></div>" for part in parts)
