"""The step agents, scripted: the researcher (search, then crawl loopback pages, then a cited
answer), the coder (statistics in the Python sandbox) and the analyst (reasoning over findings).

Each answers under the same section headings (:data:`offline.agent_text.SECTIONS`), in the step's
language, and cites only what the tools returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from offline.agent_text import (
    BULLET_TITLE_RE,
    ScriptedReply,
    ScriptedToolCall,
    first_sentence,
    heading,
    key_point,
    locale_of,
    mid_sentence,
    next_call,
    offered_tools,
    plain,
    section,
    sentences,
    shorten,
    text_of,
    tool_outputs,
    user_messages,
    zh_wanted,
)
from offline.planning_agents import ANGLES
from offline.search_index import tokenize

FINDING_RE = re.compile(r"<finding>(.*?)</finding>", re.DOTALL)


@dataclass(frozen=True)
class StepInput:
    """DeerFlow's step input message, parsed."""

    topic: str
    completed: str
    title: str
    description: str
    locale: str


def parse_step_input(messages: list[dict[str, Any]]) -> StepInput:
    """Split the first user message into its sections; findings may contain ``##`` headings too,
    so the current step is located by its *last* ``# Current Step`` heading."""
    users = user_messages(messages)
    text = text_of(users[0].get("content")) if users else ""
    current_at = text.rfind("# Current Step")
    current = text[current_at:] if current_at >= 0 else text
    head = text[:current_at] if current_at >= 0 else ""
    completed_at = head.find("# Completed Steps")
    completed = head[completed_at + len("# Completed Steps"):].strip() if completed_at >= 0 else ""
    topic = section(head[:completed_at] if completed_at >= 0 else head, "Research Topic")
    title = section(current, "Title", "##") or first_sentence(text) or "the current step"
    locale = section(current, "Locale", "##").split()[:1]
    return StepInput(topic=topic, completed=completed, title=title,
                     description=section(current, "Description", "##"),
                     locale=locale[0] if locale else locale_of(messages, text))


def _results_of(content: str) -> list[dict[str, str]]:
    """Search/crawl results in whatever shape the tool message has (list, dict, or text)."""
    if NO_RESULTS_RE.match(content):
        return []
    try:
        data = json.loads(content)
    except ValueError:
        page = CRAWLED_RE.match(content)  # a crawled page, as workflows/research/search_format.py lays it out
        if page:
            return [{"title": page["title"], "url": page["url"], "content": content[page.end():]}]
        return [{"title": shorten(first_sentence(content), 80) or "Tool output", "url": "", "content": content}]
    if isinstance(data, dict):
        data = data.get("results", [data])
    if not isinstance(data, list):
        return [{"title": "Tool output", "url": "", "content": str(data)}]
    results = []
    for item in data:
        if isinstance(item, dict):
            body = str(item.get("content") or item.get("markdown") or item.get("snippet") or "")
            url = str(item.get("url") or item.get("link") or "")
            title = str(item.get("title") or url or "Untitled")
            results.append({"title": title, "url": url, "content": body})
        elif isinstance(item, str):
            results.append({"title": shorten(first_sentence(item), 80) or "Result", "url": "", "content": item})
    return results


# The statistics table's labels in Chinese (the code prints English labels, which the coder parses).
ZH_TABLE_LABELS = {"Metric": "指标", "Value": "数值", "Findings": "发现数", "Words": "词数",
                   "Distinct URLs": "不同来源数", "Top words": "高频词"}
CRAWLED_RE = re.compile(r"# (?P<title>[^\n]+)\n\nSource: (?P<url>\S+)\n\n")
NO_RESULTS_RE = re.compile(r"\s*No results found for ")  # workflows/research/search_format.py's words


def _is_error(content: str) -> bool:
    """Tool activities report failures as text starting with "Error", as DeerFlow's tools do."""
    return content.lstrip().lower().startswith("error")


def _answer(step: StepInput, zh: bool, *sections: tuple[str, str]) -> str:
    """A step agent's answer: the problem statement, then each ``(section key, body)`` under its
    heading in the step's language (the reporter reads the sections back by these headings)."""
    parts = [f"{heading('problem', zh)}\n\n{_problem(step)}"]
    parts += [f"{heading(key, zh)}\n\n{body}" for key, body in sections]
    return "\n\n".join(parts)


def _problem(step: StepInput) -> str:
    """The bolded step title opening every answer; the reporter reads it back as a heading."""
    return f"**{step.title}**" + (f" — {step.description}" if step.description else "")


LOOPBACK_URL_RE = re.compile(r"^https?://127\.\d+\.\d+\.\d+[:/]")


def _crawl_calls(messages: list[dict[str, Any]], results: list[dict[str, str]]) -> ScriptedReply | None:
    """Read in full every result served from this machine (the only pages the demo may fetch).

    Results from the bundled corpus point at a domain that is never fetched; benchmarks and
    tests serve pages on loopback, so crawling those exercises the real crawler end to end.
    """
    if any(call.get("function", {}).get("name") == "crawl_tool"
           for m in messages if m.get("role") == "assistant" for call in m.get("tool_calls") or []):
        return None
    urls = list(dict.fromkeys(r["url"] for r in results if LOOPBACK_URL_RE.match(r["url"])))
    if not urls:
        return None
    earlier = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    return ScriptedReply(tool_calls=tuple(
        ScriptedToolCall(id=f"call_{earlier + n}", name="crawl_tool", arguments={"url": url})
        for n, url in enumerate(urls, start=1)
    ))


def _mcp_calls(tools: dict[str, dict[str, Any]], topic: str, start: int) -> tuple[ScriptedToolCall, ...]:
    """Also try each MCP tool once, alongside the search, with arguments made from its schema."""
    calls = []
    for name, spec in tools.items():
        if not name.startswith("mcp_"):
            continue
        schema = spec.get("parameters") or {}
        kinds = {"integer": 2, "number": 2, "boolean": True}
        arguments = {key: kinds.get(str(prop.get("type")), topic)
                     for key, prop in (schema.get("properties") or {}).items() if key in schema.get("required", [])}
        calls.append(ScriptedToolCall(id=f"call_{start + len(calls)}", name=name, arguments=arguments))
    return tuple(calls)


def _angle_and_query(title: str) -> tuple[tuple[str, ...], str]:
    """The cue words of a step's angle, and what to search for: the subject after a known angle,
    the whole title otherwise (an edit's focus, such as "Running costs: heat pumps", is searched)."""
    for english, chinese, cues in ANGLES:
        for prefix in (f"{english}: ", f"{chinese}："):
            if title.startswith(prefix):
                return cues, title[len(prefix):]
    return tuple(tokenize(title.split(":")[0])), title.replace("：", " ").replace(":", " ")


def _pick(text: str, cues: tuple[str, ...], already: str, count: int = 2) -> list[str]:
    """Up to ``count`` whole sentences of ``text`` that speak to the angle's cue words, in their
    order, skipping sentences an earlier step already reported (so findings do not repeat)."""
    candidates = [(i, sentence) for i, sentence in enumerate(sentences(text)) if sentence not in already]
    lowered = [(i, sentence, sentence.lower()) for i, sentence in candidates]
    ranked = sorted(lowered, key=lambda c: (-sum(cue.lower() in c[2] for cue in cues), c[0]))
    return [sentence for _, sentence, _ in sorted(ranked[:count])]


def _nothing_found(step: StepInput, query: str, zh: bool) -> str:
    """The honest answer when the offline corpus has nothing on the step: no unrelated sources."""
    if zh:
        note = f"离线语料库中没有关于“{query}”的资料，因此本步骤没有可引用的来源。"
        conclusion = "离线演示语料库没有涉及这一主题；使用真实搜索服务（设置 TAVILY_API_KEY）才能研究它。"
    else:
        note = f'The offline corpus has nothing on "{query}", so this step cites no sources.'
        conclusion = ("The bundled offline corpus does not cover this subject; real search (TAVILY_API_KEY) "
                      "is needed to research it.")
    return _answer(step, zh, ("findings", note), ("conclusion", conclusion), ("references", "无" if zh else "None."))


def researcher(body: dict[str, Any]) -> ScriptedReply:
    """Search once for the step's subject, read loopback pages in full, then write a cited answer."""
    messages = body.get("messages") or []
    step = parse_step_input(messages)
    tools, outputs = offered_tools(body), tool_outputs(messages)
    cues, query = _angle_and_query(step.title)
    if not outputs:
        for name in ("local_search_tool", "web_search", "web_search_tool", "tavily_search"):
            if name in tools:
                properties = (tools[name].get("parameters") or {}).get("properties") or {}
                argument = "query" if "query" in properties or not properties else next(iter(properties))
                first = next_call(messages, name, {argument: query})
                return ScriptedReply(tool_calls=(first, *_mcp_calls(tools, query, start=2)))
    zh = zh_wanted(step.locale)
    errors = [o.strip() for o in outputs if _is_error(o)]
    results = [r for o in outputs if not _is_error(o) for r in _results_of(o)]
    if "crawl_tool" in tools:
        crawls = _crawl_calls(messages, results)
        if crawls is not None:
            return crawls
    seen: set[str] = set()
    refs = [r for r in results if r["url"] and not (r["url"] in seen or seen.add(r["url"]))]
    if outputs and not results and not errors:
        return ScriptedReply(content=_nothing_found(step, query, zh))
    if not results:
        if errors:
            note = (f"搜索工具调用失败：\n\n> {errors[0]}\n\n因此未能收集到任何资料。" if zh else
                    f"The search tool failed:\n\n> {errors[0]}\n\n"
                    "No sources could be gathered for this step.")
        else:
            note = ("在步骤结束前没有得到任何工具结果，因此未能收集到资料。" if zh else
                    "No tool results arrived before the step had to finish, so no sources could be gathered.")
        conclusion = ("由于搜索失败，本步骤没有可靠的发现。" if zh else
                      "Because the search failed, this step has no sourced findings; treat it as a gap.")
        return ScriptedReply(content=_answer(step, zh, ("findings", note), ("conclusion", conclusion),
                                             ("references", "无" if zh else "No sources could be gathered.")))
    by_url = {r["url"]: r for r in results if r["url"]}  # a crawled page replaces its search snippet
    bullets = []
    for r in list(by_url.values()) or results:
        picked = _pick(r["content"], cues, step.completed) or _pick(r["content"], cues, "")
        if picked:
            bullets.append(f"- **{plain(r['title'])}**{'：' if zh else ': '}{('' if zh else ' ').join(picked)}")
    if errors:
        note = "- 注意：部分工具调用失败：" if zh else "- Note: some tool calls failed: "
        bullets.append(note + errors[0])
    best = first_sentence(BULLET_TITLE_RE.sub("", bullets[0])) if bullets else ""
    conclusion = (f"共有 {len(refs)} 条资料涉及“{step.title}”。{best}" if zh else
                  f"{len(refs)} source(s) address {mid_sentence(step.title)}. {best}").strip()
    references = "\n\n".join(f"- [{plain(r['title'])}]({r['url']})" for r in refs) or (
        "无" if zh else "No linkable sources.")
    return ScriptedReply(content=_answer(step, zh, ("findings", "\n".join(bullets)), ("conclusion", conclusion),
                                         ("references", references)))


STATS_CODE = '''import re
from collections import Counter

text = {text}
findings = re.findall(r"<finding>(.*?)</finding>", text, re.S)
urls = set(re.findall(r"https?://[^\\s)\\]>\\"']+", text))
prose = re.sub(r"(?m)^#+ .*$|</?finding>|https?://\\S+", " ", text)
words = re.findall(r"[^\\W\\d_]+", prose)
stop = {{"about", "after", "their", "there", "these", "those", "which", "while", "would", "could",
        "should", "where", "other", "being", "source", "sources", "reviewed", "summarised"}}
common = Counter(w.lower() for w in words if len(w) > 4 and w.lower() not in stop).most_common(5)
top = ", ".join(f"{{w}} ({{c}})" for w, c in common) or "n/a"
print("| Metric | Value |")
print("|---|---|")
print(f"| Findings | {{len(findings)}} |")
print(f"| Words | {{len(words)}} |")
print(f"| Distinct URLs | {{len(urls)}} |")
print(f"| Top words | {{top}} |")
'''


def _string_literal(text: str) -> str:
    """``text`` as Python source: short literals in parentheses rather than one long line.

    DeerFlow's activity panel widens to a code card's longest line: one literal holding every
    finding made that whole panel scroll sideways and cut off the text of every other card.
    """
    if not text:
        return "''"
    pieces = (line[start:start + 60] for line in text.splitlines(keepends=True) for start in range(0, len(line), 60))
    return "(\n" + "".join(f"    {piece!r}\n" for piece in pieces) + ")"


def _python_output(content: str) -> tuple[str, bool]:
    """(output text, failed) from a python_repl_tool message: JSON PythonResult or DeerFlow text."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict) and ("stdout" in data or "stderr" in data):
        failed = bool(data.get("stopped")) or data.get("exit_code") not in (0, None)
        out = str(data.get("stdout") or "")
        if failed:
            out = (out + "\n" + str(data.get("stderr") or "") + (f"\n(stopped: {data['stopped']})"
                                                                 if data.get("stopped") else "")).strip()
        return out, failed
    failed = _is_error(content) or "Traceback (most recent call last)" in content
    match = re.search(r"Stdout:\s*(.*)", content, re.DOTALL)
    return (match.group(1).strip() if match and not failed else content.strip()), failed


def coder(body: dict[str, Any]) -> ScriptedReply:
    """Run safe statistics code over the earlier findings, then explain its output."""
    messages = body.get("messages") or []
    step = parse_step_input(messages)
    outputs = tool_outputs(messages)
    if not outputs and "python_repl_tool" in offered_tools(body):
        code = STATS_CODE.format(text=_string_literal(step.completed))
        return ScriptedReply(tool_calls=(next_call(messages, "python_repl_tool", {"code": code}),))
    zh = zh_wanted(step.locale)
    if not outputs:
        note = ("在步骤结束前没有运行任何代码，因此没有统计结果。" if zh else
                "No code was run before the step had to finish, so no statistics are available.")
        return ScriptedReply(content=_answer(step, zh, ("result", note)))
    output, failed = _python_output(outputs[-1])
    if failed:
        note = ("Python 代码执行失败，以下是错误输出，因此无法给出统计结果。" if zh else
                "The Python code failed, so no statistics could be computed. The error output was:")
        return ScriptedReply(content=_answer(step, zh, ("result", f"{note}\n\n```\n{output or 'no output'}\n```")))
    table = "\n".join(line for line in output.splitlines() if line.strip().startswith("|"))
    numbers = dict(re.findall(r"^\|\s*([A-Za-z ]+?)\s*\|\s*(\d+)\s*\|", table, re.MULTILINE))
    if zh:
        interpretation = (f"前面的步骤共产生 {numbers.get('Findings', '?')} 条发现，"
                          f"约 {numbers.get('Words', '?')} 个词，"
                          f"引用了 {numbers.get('Distinct URLs', '?')} 个不同来源。")
    else:
        interpretation = (f"The earlier steps produced {numbers.get('Findings', '?')} finding(s) with about "
                          f"{numbers.get('Words', '?')} words, citing {numbers.get('Distinct URLs', '?')} "
                          "distinct source(s); the most frequent terms show what the evidence focuses on.")
    if zh and table:
        table = re.sub(r"\| ([A-Za-z ]+?) (?=\|)", lambda m: f"| {ZH_TABLE_LABELS.get(m[1], m[1])} ", table)
    return ScriptedReply(content=_answer(step, zh, ("statistics", table or output), ("interpretation", interpretation)))


def analyst(body: dict[str, Any]) -> ScriptedReply:
    """Reason over the completed steps only (no tools): one bullet per finding."""
    messages = body.get("messages") or []
    step = parse_step_input(messages)
    blocks = [b.strip() for b in FINDING_RE.findall(step.completed) if b.strip()]
    if not blocks and step.completed:
        blocks = [step.completed]
    zh = zh_wanted(step.locale)
    none = "尚无已完成步骤的发现可供分析。" if zh else "No findings from completed steps are available yet."
    bullets = [f"- {key_point(b) or shorten(plain(b), 200)}" for b in blocks] or [f"- {none}"]
    conclusion = (f"综合 {len(blocks)} 条发现，以上要点回答了“{step.title}”。" if zh else
                  f"Taken together, the {len(blocks)} finding(s) above address \"{step.title}\".")
    return ScriptedReply(content=_answer(step, zh, ("analysis", "\n".join(bullets)), ("conclusion", conclusion)))
