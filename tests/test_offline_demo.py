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
from typing import Any

from activities.prompts import render_prompt
from offline.scripted_agents import respond
from offline.search_server import DEFAULT_CORPUS, SearchIndex
from workflows.messages import background_message, reporter_messages, step_task
from workflows.models import ChatMessage, Plan, SearchResponse, SearchResult, StepType, ToolSpec
from workflows.search_format import format_search_response
from workflows.tools import HANDOFF_TO_PLANNER, tool_specs

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
