"""The offline demonstration, judged as a new user reads it: questions outside the demo set.

Each run plays the workflow's stages with the fake's agent functions and the bundled corpus, using
the workflow's own message builders, so it takes milliseconds and no server. Relevance is judged
by the corpus's own topic tags: every cited source must carry one of the question's topics, or the
report must say that the offline corpus has nothing on the subject.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from activities.model.prompts import render_prompt
from cli.runs import _write_report
from offline.agent_text import sentences
from offline.scripted_agents import respond
from offline.search_index import DEFAULT_CORPUS, SearchIndex
from workflows.contracts.chat import ChatMessage, ToolSpec
from workflows.contracts.plan import Plan, StepType
from workflows.contracts.research import ResearchResult
from workflows.contracts.status import Phase, RunStatus
from workflows.contracts.tool_activities import SearchResponse, SearchResult
from workflows.research.messages import background_message, clarified_task, reporter_messages, step_task
from workflows.research.progress import current_details
from workflows.research.search_format import format_search_response
from workflows.research.status_view import OFFLINE_NOTICE
from workflows.research.tools import HANDOFF_TO_PLANNER, tool_specs

INDEX = SearchIndex.from_file(DEFAULT_CORPUS)
TOPICS = {doc.url: set(doc.topics) for doc in INDEX.documents}
STYLES = ("academic", "popular_science", "news", "social_media", "strategic_investment")
NOTHING = ("offline corpus has nothing on", "离线语料库中没有关于")
CITATION_RE = re.compile(r"\]\((https?://[^)\s]+)\)")


@dataclass
class DemoRun:
    plan: Plan
    report: str

    @property
    def cited(self) -> set[str]:
        return set(CITATION_RE.findall(self.report))


def _wire(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages in OpenAI's wire shape, as ``langchain-openai`` sends them."""
    wired = []
    for m in messages:
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name:
            message["name"] = m.name
        if m.tool_call_id:
            message["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments)}} for c in m.tool_calls]
        wired.append(message)
    return wired


def _ask(agent: str, messages: list[ChatMessage], variables: dict[str, str], tools: list[ToolSpec] = (),
         json_mode: bool = False) -> Any:
    """One chat request as the ``chat`` activity sends it: rendered prompt, offered tools, JSON mode."""
    prompt = render_prompt(agent, {"CURRENT_TIME": "now", "tool_guidance": "-", **variables})
    body: dict[str, Any] = {"messages": [{"role": "system", "content": prompt}, *_wire(messages)]}
    if tools:
        body["tools"] = [{"type": "function", "function": spec.model_dump()} for spec in tools]
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    return respond(body)


def _search(query: str, limit: int = 3) -> SearchResponse:
    hits = INDEX.search(query, limit)
    return SearchResponse(query=query, results=[SearchResult(title=h.document.title, url=h.document.url,
                                                             content=h.document.content) for h in hits])


def _run_code(code: str) -> str:
    """The coder's statistics code is the fake's own: run it here, as the sandbox would."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})
    return f"Stdout: {out.getvalue()}"


def _step(plan: Plan, index: int, locale: str) -> str:
    step = plan.steps[index]
    task = ChatMessage(role="user", content=step_task(plan, step, locale))
    agent, names = ("researcher", ("web_search", "crawl_tool")) if step.step_type is StepType.RESEARCH else (
        "coder", ("python_repl_tool",))
    variables = {"locale": locale}
    tools = tool_specs(names)
    call = _ask(agent, [task], variables, tools).tool_calls[0]
    output = (format_search_response(_search(call.arguments["query"])) if agent == "researcher"
              else _run_code(call.arguments["code"]))
    turn = [task, ChatMessage(role="assistant", content="", tool_calls=[
        {"id": call.id, "name": call.name, "arguments": call.arguments}]),
        ChatMessage(role="tool", content=output, tool_call_id=call.id)]
    return _ask(agent, turn, variables, tools).content


def demo_run(question: str, style: str = "academic", feedback: str | None = None) -> DemoRun:
    """Coordinator, background search, planner (and an edit), every step, reporter."""
    handoff = _ask("coordinator", [ChatMessage(role="user", content=question)], {"locale": "en-US"},
                   [HANDOFF_TO_PLANNER]).tool_calls[0].arguments
    locale, topic = handoff["locale"], handoff["research_topic"]
    variables = {"locale": locale, "max_step_num": "3"}
    planner = [ChatMessage(role="user", content=topic), background_message(_search(topic))]
    if feedback:
        first = _ask("planner", planner, variables, json_mode=True).content
        planner += [ChatMessage(role="assistant", content=first),
                    ChatMessage(role="user", name="feedback", content=f"[EDIT_PLAN] {feedback}")]
    plan = Plan.model_validate_json(_ask("planner", planner, variables, json_mode=True).content)
    for index, step in enumerate(plan.steps):
        step.execution_res = _step(plan, index, locale)
    observations = [step.execution_res or "" for step in plan.steps]
    report = _ask("reporter", reporter_messages(plan, observations),
                  {"locale": locale, "report_style": style}).content
    return DemoRun(plan=plan, report=report)


# Ten questions outside the demo set, with the corpus topics a cited source must carry (None: the
# corpus does not cover the subject, and the report must say so instead of citing anything).
QUESTIONS = [
    ("How far back in time can the James Webb telescope see?", {"astronomy"}),
    ("How do heat pumps compare with gas boilers for heating a home?", {"home-heating"}),
    ("Is nuclear power safe?", {"nuclear-power"}),
    ("How do mRNA vaccines train the immune system?", {"vaccines"}),
    ("What causes inflation?", {"economics"}),
    ("How long do electric car batteries last?", {"batteries", "electric-vehicles"}),
    ("What is the history of the Roman Empire?", None),
    ("How do I bake sourdough bread at home?", None),
    ("詹姆斯·韦伯太空望远镜有什么发现？", {"astronomy"}),
    ("罗马帝国为什么灭亡？", None),
]


@pytest.mark.parametrize(("question", "topics"), QUESTIONS, ids=[q for q, _ in QUESTIONS])
def test_sources_are_relevant_or_the_report_says_nothing_was_found(question: str, topics: set[str] | None) -> None:
    run = demo_run(question)
    if topics is None:
        assert not run.cited, f"unrelated sources cited: {run.cited}"
        assert any(phrase in run.report for phrase in NOTHING)
        research = [s.execution_res or "" for s in run.plan.steps if s.step_type is StepType.RESEARCH]
        assert all(any(phrase in finding for phrase in NOTHING) for finding in research)
        return
    assert run.cited, "a covered question cites the corpus"
    for url in run.cited:
        assert TOPICS[url] & topics, f"{url} ({TOPICS[url]}) is not about {topics}"
    assert not any(phrase in run.report for phrase in NOTHING)


def _findings(observation: str) -> list[str]:
    body = re.search(r"## (?:Findings|发现)\n\n(.*?)\n\n## ", observation, re.DOTALL)
    return [line for line in (body.group(1) if body else "").splitlines() if line.startswith("- ")]


@pytest.mark.parametrize("question", [QUESTIONS[1][0], QUESTIONS[8][0]])
def test_steps_and_findings_are_whole_sentences_on_the_subject(question: str) -> None:
    run = demo_run(question)
    subject = run.plan.steps[0].title.split(":")[-1].split("：")[-1].strip()
    assert all(subject in step.title for step in run.plan.steps)
    seen: set[str] = set()
    for step in run.plan.steps[:-1]:
        findings = _findings(step.execution_res or "")
        assert findings
        for finding in findings:
            text = finding.split("**: ", 1)[-1]
            assert "#" not in text and "…" not in text
            assert text.endswith((".", "。", "!", "?", "！", "？")), text
            assert text not in seen, "a finding repeats an earlier step's"
            seen.add(text)
    points = run.report.split("## Key Points\n\n", 1)[-1].split("\n\n", 1)[0].splitlines()
    assert len(points) == len(set(points))


def test_pages_that_only_share_words_do_not_ride_along() -> None:
    """A solar page mentions "electric" and "batteries" but is far behind the pages about EV batteries."""
    hits = INDEX.search("How long do electric car batteries last?", 10)
    assert hits and all(set(hit.document.topics) & {"batteries", "electric-vehicles"} for hit in hits)


def test_key_points_do_not_repeat() -> None:
    observation = ("## Problem Statement\n\n**Step**\n\n## Findings\n\n- **Page**: Heat pumps move heat.\n\n"
                   "## References\n\n- [Page](https://offline.deerflow.example/heat-pumps)")
    messages = [ChatMessage(role="user", content="# Research Requirements\n\n## Task\n\nHeat pumps\n\n"
                                                 "## Description\n\nWhy."),
                *(ChatMessage(role="user", name="observation", content=observation) for _ in range(2))]
    report = _ask("reporter", messages, {"locale": "en-US", "report_style": "academic"}).content
    assert report.count("- Heat pumps move heat.") == 1


def test_sentences_keep_abbreviations_and_drop_markdown_headings() -> None:
    page = "# A page heading\n\nSource: https://x.example\n\nDr. Smith met Mr. Jones in the U.S. lab. It worked."
    assert sentences(page) == ["Dr. Smith met Mr. Jones in the U.S. lab.", "It worked."]


def test_an_edit_request_becomes_a_focused_step_not_a_pasted_title() -> None:
    run = demo_run(QUESTIONS[1][0], feedback="add a step on running costs")
    titles = [step.title for step in run.plan.steps]
    assert "Running costs: Heat pumps compare with gas boilers for heating a home" in titles or any(
        title.startswith("Running costs: ") for title in titles), titles
    assert not any("add a step" in title.lower() for title in titles)
    assert run.cited and all(TOPICS[url] & {"home-heating"} for url in run.cited)
    # The planner's notes to the reviewer stay in the plan: the report's title and overview are the subject's.
    assert "Revised the plan" in run.plan.thought and "(revised)" not in run.plan.title
    overview = run.report.split("## Overview", 1)[1].split("\n## ", 1)[0]
    assert run.report.startswith(f"# {run.plan.title}\n")
    notes = ("Revised", "feedback", "background investigation", "at most")
    assert not any(note in overview for note in notes), overview


ENGLISH_HEADINGS = re.compile(r"^#+ .*\b(Key Points|Overview|Detailed Analysis|Key Citations|Problem Statement|"
                              r"Findings|Conclusion|References|Statistical Summary|Interpretation|Summary Table)\b",
                              re.MULTILINE)


@pytest.mark.parametrize("style", STYLES)
def test_a_chinese_report_has_chinese_headings_in_every_style(style: str) -> None:
    run = demo_run(QUESTIONS[8][0], style=style)
    assert run.cited
    assert not ENGLISH_HEADINGS.search(run.report), ENGLISH_HEADINGS.findall(run.report)
    assert "| Metric |" not in run.report and "**: " not in run.report  # table labels, source titles


def test_each_report_style_has_its_own_structure_and_voice() -> None:
    reports = {style: demo_run(QUESTIONS[2][0], style=style).report for style in STYLES}
    outlines = {style: tuple(re.findall(r"(?m)^## .*$", report)) for style, report in reports.items()}
    openings = {style: report.split("\n\n")[1] for style, report in reports.items()}
    assert len(set(outlines.values())) == len(STYLES), outlines
    assert len(set(openings.values())) == len(STYLES), openings
    for report in reports.values():  # every style keeps the citations
        assert "## Key Citations" in report and "nuclear-fission-power" in report


def test_the_statistics_count_the_cited_sources() -> None:
    run = demo_run(QUESTIONS[5][0])
    stats = run.plan.steps[-1].execution_res or ""
    urls = int(re.search(r"\| Distinct URLs \| (\d+) \|", stats).group(1))  # type: ignore[union-attr]
    assert urls == len(run.cited) > 0


def test_saved_reports_and_web_ui_details_carry_the_offline_label(tmp_path: Path) -> None:
    offline, real = RunStatus(phase=Phase.COMPLETED, offline_demo=True), RunStatus(phase=Phase.COMPLETED)
    assert OFFLINE_NOTICE in current_details(offline) and OFFLINE_NOTICE not in current_details(real)

    saved = tmp_path / "report.md"
    _write_report(ResearchResult(report="# Heat pumps\n"), str(saved), notice=OFFLINE_NOTICE)
    assert saved.read_text().splitlines()[0] == f"> {OFFLINE_NOTICE}"
    _write_report(ResearchResult(report="# Heat pumps\n"), str(saved), notice=None)
    assert saved.read_text() == "# Heat pumps\n"


# ---------------------------------------------------------------- the questions people ask

REPO = Path(__file__).resolve().parent.parent
SUGGESTED_IN_README = re.compile(r"these are answered \(our page suggests them too\):\n\n((?:- .+\n)+)")
SUGGESTED_ON_PAGE = re.compile(r'<div id="suggestions" hidden>(.*?)</div>', re.DOTALL)


def suggested_questions() -> tuple[list[str], list[str]]:
    """(the quickstart's list, the page's buttons) of questions the bundled corpus answers."""
    readme = SUGGESTED_IN_README.search((REPO / "README.md").read_text(encoding="utf-8"))
    page = SUGGESTED_ON_PAGE.search((REPO / "server" / "static" / "index.html").read_text(encoding="utf-8"))
    assert readme and page, "the quickstart and the page each suggest questions"
    return ([line.removeprefix("- ") for line in readme.group(1).splitlines()],
            re.findall(r'<button type="button">([^<]+)</button>', page.group(1)))


def test_the_suggested_questions_are_ones_the_corpus_answers() -> None:
    in_readme, on_page = suggested_questions()
    assert len(on_page) >= 4 and set(on_page) <= set(in_readme)
    for question in in_readme:
        run = demo_run(question)
        assert run.cited, question
        assert not any(phrase in step.execution_res for step in run.plan.steps for phrase in NOTHING), question


def _plan(topic: str, feedback: list[str] = (), max_steps: int = 3) -> Plan:
    """The planner's plan for ``topic`` after each edit request in turn (an assistant plan between)."""
    messages = [ChatMessage(role="user", content=topic)]
    variables = {"locale": "en-US", "max_step_num": str(max_steps)}
    for text in feedback:
        previous = _ask("planner", messages, variables, json_mode=True).content
        messages += [ChatMessage(role="assistant", content=previous),
                     ChatMessage(role="user", name="feedback", content=f"[EDIT_PLAN] {text}")]
    return Plan.model_validate_json(_ask("planner", messages, variables, json_mode=True).content)


LONG_QUESTION = ("How do heat pumps compare with gas boilers for heating a home, and what do they cost to run "
                 "in a cold climate compared with a modern condensing boiler?")


def test_step_titles_and_searches_keep_the_whole_question() -> None:
    whole = LONG_QUESTION.rstrip("?")
    plan = _plan(LONG_QUESTION)
    assert plan.title == LONG_QUESTION
    assert all(step.title.endswith(f": {whole}") for step in plan.steps), [s.title for s in plan.steps]
    task = ChatMessage(role="user", content=step_task(plan, plan.steps[0], "en-US"))
    search = _ask("researcher", [task], {"locale": "en-US"}, tool_specs(("web_search",))).tool_calls[0]
    assert search.arguments["query"] == whole
    assert all(TOPICS[url] & {"home-heating"} for url in demo_run(LONG_QUESTION).cited)


def test_an_edit_beyond_the_step_limit_says_what_made_room() -> None:
    question = QUESTIONS[2][0]
    planned = _plan(question)
    revised = _plan(question, ["add a step on waste storage"])
    assert [s.title.split(":")[0] for s in revised.steps] == [
        "Background and key facts", "Waste storage", "Statistical summary of the findings"]
    # The planned step the request replaced is named, and so is the limit that forced it out.
    assert "at most 3 steps (Max steps on the page, --max-steps in the CLI" in revised.thought
    assert "max_step_num" not in revised.thought and revised.title == planned.title
    assert f'"{planned.steps[1].title.split(":")[0].lower()}" was dropped' in revised.thought
    # A longer plan gives up its last planned step, not the one before the request.
    longer = _plan(question, ["add a step on waste storage"], max_steps=4)
    assert [s.title.split(":")[0] for s in longer.steps][:3] == [
        "Background and key facts", "Evidence, data and expert perspectives", "Waste storage"]
    assert 'in DeerFlow\'s settings), so the planned step on "costs, economics' in longer.thought
    # A later edit keeps the earlier request when there is room, and says which one did not fit.
    twice = _plan(question, ["add a step on waste storage", "add a step on running costs and another on jobs"])
    assert [s.title.split(":")[0] for s in twice.steps][:2] == ["Running costs", "Jobs"]
    assert 'the request for "waste storage" did not fit' in twice.thought


def test_clarification_answers_qualify_the_question_in_step_titles() -> None:
    exchange = [ChatMessage(role="user", content="What is the impact of AI on jobs?"),
                ChatMessage(role="assistant", content="Which region (e.g. the EU) and time frame?"),
                ChatMessage(role="user", content="The EU, next five years.")]
    plan = Plan.model_validate_json(_ask("planner", [clarified_task(exchange)], {
        "locale": "en-US", "max_step_num": "3"}, json_mode=True).content)
    subject = "Impact of AI on jobs (The EU, next five years)"
    assert [step.title.split(": ", 1)[1] for step in plan.steps] == [subject] * 3
    handoff = _ask("coordinator", exchange, {"locale": "en-US"}, [HANDOFF_TO_PLANNER]).tool_calls[0]
    assert handoff.arguments["research_topic"] == "What is the impact of AI on jobs? (The EU, next five years.)"
