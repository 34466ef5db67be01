"""The offline model server, exercised through the real ``langchain_openai.ChatOpenAI`` client.

Going through the production client (not raw HTTP) is the point: it proves the server's wire
format is what LangChain and the OpenAI SDK accept, and that each injected fault surfaces as the
exception type the workflow's retry policy is written against.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import json_repair
import openai
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI

from activities.model.prompts import PROMPTS_DIR, render_prompt
from offline.model_server import MODEL_NAME, FakeModelServer, Fault
from offline.scripted_agents import detect_agent
from workflows.contracts.chat import ToolSpec
from workflows.contracts.plan import Plan, StepType
from workflows.research.agents import ANALYST, CODER, RESEARCHER, agent_for
from workflows.research.tools import ASK_CLARIFICATION, HANDOFF_TO_PLANNER, tool_specs

ROOT = Path(__file__).resolve().parent.parent
PROMPT_VARS = {"CURRENT_TIME": "now", "locale": "en-US", "max_step_num": "3", "report_style": "academic",
               "tool_guidance": "-"}
QUESTION = "What are the health effects of intermittent fasting?"
RESULTS = [
    {"title": "Intermittent fasting and metabolic health", "url": "https://example.org/if-metabolic",
     "content": "Intermittent fasting lowers fasting insulin in most trials. Effects on weight match "
                "ordinary calorie restriction."},
    {"title": "Risks of time-restricted eating", "url": "https://example.com/tre-risks",
     "content": "Some studies report muscle loss in older adults. Evidence is still limited."},
]


def offered(*specs: ToolSpec) -> list[dict[str, Any]]:
    """Tools as the ``chat`` activity offers them: the production schemas, in OpenAI's shape."""
    return [{"type": "function", "function": spec.model_dump()} for spec in specs]


def tools(*names: str) -> list[dict[str, Any]]:
    """The step agents' production tools, by name."""
    return offered(*tool_specs(names))


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _no_leftover_faults(server: FakeModelServer) -> Iterator[None]:
    """A fault left unconsumed by one test must not break the next one."""
    yield
    server.clear_faults()


def llm(server: FakeModelServer, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.base_url, api_key="offline", model="offline", max_retries=0, **kwargs)


def system(agent: str, **variables: str) -> SystemMessage:
    """The agent's production prompt, rendered as the ``chat`` activity renders it."""
    return SystemMessage(render_prompt(agent, {**PROMPT_VARS, **variables}))


def step_input(title: str, completed: list[str] | None = None, locale: str = "en-US") -> HumanMessage:
    """DeerFlow's step input, laid out exactly as the workflow builds it."""
    parts = [f"# Research Topic\n\n{QUESTION}"]
    if completed:
        parts.append("# Completed Steps\n\n" + "\n\n".join(f"<finding>\n{c}\n</finding>" for c in completed))
    parts.append(f"# Current Step\n\n## Title\n\n{title}\n\n## Description\n\nLook into it.\n\n"
                 f"## Locale\n\n{locale}")
    return HumanMessage("\n\n".join(parts))


def plan_llm(server: FakeModelServer) -> Any:
    return llm(server).bind(response_format={"type": "json_object"})


def planner_messages(max_steps: int = 3, locale: str = "en-US") -> list[BaseMessage]:
    return [system("planner", max_step_num=str(max_steps), locale=locale),
            HumanMessage(QUESTION)]


# ---------------------------------------------------------------- recognising the agent


def wire_body(prompt: str, specs: list[ToolSpec], json_mode: bool = False) -> dict[str, Any]:
    """A chat request as the ``chat`` activity sends it: the rendered prompt, the tools, JSON mode."""
    body: dict[str, Any] = {"messages": [{"role": "system", "content": render_prompt(prompt, PROMPT_VARS)},
                                         {"role": "user", "content": QUESTION}]}
    if specs:
        body["tools"] = offered(*specs)
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    return body


RESEARCHER_WITH_DOCUMENTS = agent_for(StepType.RESEARCH, has_resources=True)[0]


@pytest.mark.parametrize(("body", "agent"), [
    (wire_body("coordinator", [HANDOFF_TO_PLANNER]), "coordinator"),
    (wire_body("coordinator", [HANDOFF_TO_PLANNER, ASK_CLARIFICATION]), "coordinator"),
    (wire_body("planner", [], json_mode=True), "planner"),
    (wire_body("researcher", tool_specs(RESEARCHER.tools)), "researcher"),
    (wire_body("researcher", tool_specs(RESEARCHER_WITH_DOCUMENTS.tools)), "researcher"),
    (wire_body("coder", tool_specs(CODER.tools)), "coder"),
    (wire_body("analyst", tool_specs(ANALYST.tools)), "analyst"),
    (wire_body("reporter", []), "reporter"),
    # An agent's final turn at the recursion limit offers no tools.
    (wire_body("researcher", []), "researcher"),
    (wire_body("coder", []), "coder"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_each_production_request_is_recognised_by_what_it_offers(body: dict[str, Any], agent: str) -> None:
    assert detect_agent(body) == agent


def test_prompts_carry_no_marker_for_the_fake() -> None:
    """What a real provider receives is the prompt alone: nothing written for the offline fake."""
    prompts = sorted(PROMPTS_DIR.glob("*.md"))
    assert len(prompts) >= 6
    for path in prompts:
        assert "deerflow-agent" not in path.read_text(encoding="utf-8"), path.name
    assert detect_agent({"messages": [{"role": "system", "content": "You are a helpful assistant."}]}) is None


# ---------------------------------------------------------------- coordinator


def test_coordinator_hands_off_research_questions_with_locale(server: FakeModelServer) -> None:
    model = llm(server).bind_tools(offered(HANDOFF_TO_PLANNER))
    english = model.invoke([system("coordinator"), HumanMessage(QUESTION)])
    assert english.tool_calls[0]["name"] == "handoff_to_planner"
    assert english.tool_calls[0]["args"] == {"research_topic": QUESTION, "locale": "en-US"}
    assert english.tool_calls[0]["id"] == "call_1"
    assert english.response_metadata["finish_reason"] == "tool_calls"

    chinese = model.invoke([system("coordinator"), HumanMessage("固态电池的最新进展是什么？")])
    assert chinese.tool_calls[0]["args"]["locale"] == "zh-CN"


def test_coordinator_answers_small_talk_directly(server: FakeModelServer) -> None:
    model = llm(server).bind_tools(offered(HANDOFF_TO_PLANNER))
    hello = model.invoke([system("coordinator"), HumanMessage("hello")])
    assert not hello.tool_calls
    assert "DeerFlow" in hello.content
    nihao = model.invoke([system("coordinator"), HumanMessage("你好！")])
    assert not nihao.tool_calls
    assert "你好" in nihao.content
    # A greeting followed by a real question is research, not small talk.
    mixed = model.invoke([system("coordinator"), HumanMessage("hi, what is quantum error correction?")])
    assert mixed.tool_calls


# ---------------------------------------------------------------- planner


def test_planner_returns_a_valid_plan_within_the_step_limit(server: FakeModelServer) -> None:
    reply = plan_llm(server).invoke(planner_messages(max_steps=3))
    plan = Plan.model_validate_json(reply.content)
    assert plan.locale == "en-US" and not plan.has_enough_context
    assert "intermittent fasting" in plan.title.lower()
    assert [s.step_type for s in plan.steps] == [StepType.RESEARCH, StepType.RESEARCH, StepType.PROCESSING]
    assert [s.need_search for s in plan.steps] == [True, True, False]
    assert all("intermittent fasting" in s.title.lower() for s in plan.steps)
    assert plan.steps[2].depends_on == [0, 1]

    five = Plan.model_validate_json(plan_llm(server).invoke(planner_messages(max_steps=5)).content)
    assert [s.step_type for s in five.steps] == [StepType.RESEARCH] * 4 + [StepType.PROCESSING]
    assert len({s.title for s in five.steps}) == 5

    two = Plan.model_validate_json(plan_llm(server).invoke(planner_messages(max_steps=2)).content)
    assert [s.step_type for s in two.steps] == [StepType.RESEARCH, StepType.RESEARCH]
    one = Plan.model_validate_json(plan_llm(server).invoke(planner_messages(max_steps=1)).content)
    assert len(one.steps) == 1

    zh = Plan.model_validate_json(plan_llm(server).invoke(planner_messages(locale="zh-CN")).content)
    assert zh.locale == "zh-CN"


def test_planner_uses_background_feedback_and_observations(server: FakeModelServer) -> None:
    background = HumanMessage("background investigation results of user query:\n" + json.dumps(RESULTS),
                              name="background_investigation")
    messages = [*planner_messages(), background]
    first = plan_llm(server).invoke(messages)
    plan = Plan.model_validate_json(first.content)
    assert any(RESULTS[0]["title"] in s.description or RESULTS[-1]["title"] in s.title for s in plan.steps)
    assert plan_llm(server).invoke(messages).content == first.content  # deterministic

    feedback = "Add a step on effects in older adults"
    revised = Plan.model_validate_json(plan_llm(server).invoke(
        [*messages, AIMessage(first.content), HumanMessage(f"[EDIT_PLAN] {feedback}", name="feedback")]
    ).content)
    assert revised.title == plan.title  # the report's title: the revision is the thought's to say
    # The edit asks for a subject; its wording ("Add a step on") never becomes a step title.
    assert "Effects in older adults: Health effects of intermittent fasting" in [s.title for s in revised.steps]
    assert feedback in revised.thought
    assert len(revised.steps) <= 3 and revised.steps != plan.steps

    done = Plan.model_validate_json(plan_llm(server).invoke(
        [*messages, HumanMessage("## Step 1\n\nfindings", name="observation")]).content)
    assert done.has_enough_context and done.title == plan.title


# ---------------------------------------------------------------- researcher, coder, analyst


def test_researcher_searches_then_cites_the_results(server: FakeModelServer) -> None:
    model = llm(server).bind_tools(tools("web_search", "crawl_tool"))
    messages: list[BaseMessage] = [system("researcher"), step_input("Health effects")]
    call = model.invoke(messages)
    assert call.tool_calls[0]["name"] == "web_search"
    assert call.tool_calls[0]["args"] == {"query": "Health effects"}

    messages += [call, ToolMessage(json.dumps(RESULTS), tool_call_id=call.tool_calls[0]["id"])]
    answer = model.invoke(messages)
    assert not answer.tool_calls
    for heading in ("## Problem Statement", "## Findings", "## Conclusion", "## References"):
        assert heading in answer.content
    for result in RESULTS:
        assert f"- [{result['title']}]({result['url']})" in answer.content
    assert "muscle loss in older adults" in answer.content

    local = llm(server).bind_tools(tools("web_search", "local_search_tool")).invoke(messages[:2])
    assert local.tool_calls[0]["name"] == "local_search_tool"


def test_researcher_reports_a_failed_search_plainly(server: FakeModelServer) -> None:
    model = llm(server).bind_tools(tools("web_search"))
    messages: list[BaseMessage] = [system("researcher"), step_input("Health effects")]
    call = model.invoke(messages)
    error = "Error: search backend unavailable (HTTP 503)"
    answer = model.invoke([*messages, call, ToolMessage(error, tool_call_id=call.tool_calls[0]["id"])])
    assert "search tool failed" in answer.content
    assert error in answer.content
    assert "No sources could be gathered" in answer.content


def test_coder_runs_statistics_code_and_reports_its_output(server: FakeModelServer) -> None:
    finding = "## Findings\n\n- Fasting lowers insulin.\n\n## References\n\n- [A](https://example.org/a)"
    model = llm(server).bind_tools(tools("python_repl_tool"))
    messages: list[BaseMessage] = [system("coder"), step_input("Statistics", [finding, finding])]
    call = model.invoke(messages)
    code = call.tool_calls[0]["args"]["code"]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10, check=True)
    assert "| Findings | 2 |" in run.stdout and "| Distinct URLs | 1 |" in run.stdout

    answer = model.invoke([*messages, call, ToolMessage(f"Stdout: {run.stdout}",
                                                         tool_call_id=call.tool_calls[0]["id"])])
    assert "| Findings | 2 |" in answer.content and "2 finding(s)" in answer.content

    failed = model.invoke([*messages, call, ToolMessage("Error executing code: NameError('x')",
                                                        tool_call_id=call.tool_calls[0]["id"])])
    assert "failed" in failed.content and "NameError" in failed.content


def test_the_coders_program_keeps_its_lines_short(server: FakeModelServer) -> None:
    # DeerFlow's activity panel widens to the longest code line: the findings in one literal made
    # every card in the panel scroll sideways (seen in the real UI).
    finding = f"## Findings\n\n- {'Fasting lowers insulin. ' * 20}\n\n## References\n\n- [A](https://example.org/a)"
    model = llm(server).bind_tools(tools("python_repl_tool"))
    call = model.invoke([system("coder"), step_input("Statistics", [finding] * 10)])
    code = call.tool_calls[0]["args"]["code"]
    assert max(len(line) for line in code.splitlines()) < 100
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10, check=True)
    assert "| Findings | 10 |" in run.stdout


def test_analyst_and_summarizing_turn_answer_without_tools(server: FakeModelServer) -> None:
    analysis = llm(server).invoke([system("analyst"), step_input("Weigh it", ["## Findings\n\n- Alpha beta."])])
    assert "## Analysis" in analysis.content and "Alpha beta." in analysis.content

    # Recursion limit reached: no tools offered, asked for the final answer from what was found.
    search = llm(server).bind_tools(tools("web_search")).invoke([system("researcher"), step_input("Health")])
    final = llm(server).invoke([
        system("researcher"), step_input("Health"), search,
        ToolMessage(json.dumps(RESULTS), tool_call_id=search.tool_calls[0]["id"]),
        HumanMessage("You have reached the tool-call limit. Write your final answer now."),
    ])
    assert RESULTS[0]["url"] in final.content and "## References" in final.content


# ---------------------------------------------------------------- reporter


def test_reporter_includes_every_observation_and_citation(server: FakeModelServer) -> None:
    prefix = "Below are some observations for the research task:\n\n"
    observations = [
        "## Problem Statement\n\n**Step one**\n\n## Findings\n\n- Unique-marker-one: insulin falls.\n\n"
        "## References\n\n- [Source A](https://example.org/a)",
        "## Problem Statement\n\n**Step two**\n\n## Findings\n\n- Unique-marker-two: muscle loss.\n\n"
        "## References\n\n- [Source A](https://example.org/a)\n\n- [Source B](https://example.org/b)",
    ]

    def report(locale: str, style: str) -> str:
        messages = [system("reporter", locale=locale, report_style=style),
                    HumanMessage("# Research Requirements\n\n## Task\n\nFasting Report\n\n## Description\n\n"
                                 "Why fasting matters."),
                    HumanMessage("IMPORTANT: Structure your report in the required format."),
                    *[HumanMessage(prefix + o) for o in observations]]
        return str(llm(server).invoke(messages).content)

    text = report("en-US", "academic")
    assert text.startswith("# Fasting Report\n")
    for heading in ("## Key Points", "## Overview", "## Detailed Analysis", "## Key Citations"):
        assert heading in text
    assert "- Unique-marker-one: insulin falls." in text and "- Unique-marker-two: muscle loss." in text
    assert "| # | Finding | Sources |" in text
    citations = text.split("## Key Citations", 1)[1]
    assert citations.count("- [Source A](https://example.org/a)") == 1
    assert "- [Source B](https://example.org/b)" in citations

    # Another style is another structure, still with every finding and the citations.
    popular = report("en-US", "popular_science")
    assert "## The Short Answer" in popular and "## Why It Matters" in popular and "## Overview" not in popular
    assert "Unique-marker-two: muscle loss." in popular and "- [Source B](https://example.org/b)" in popular

    chinese = report("zh-CN", "news")
    for heading in ("## 要点", "## 已知情况", "## 尚待明确", "## 主要引用"):
        assert heading in chinese


# ---------------------------------------------------------------- wire format


def test_streaming_delivers_tool_call_deltas_and_usage(server: FakeModelServer) -> None:
    model = llm(server, stream_usage=True).bind_tools(tools("web_search"))
    chunks = list(model.stream([system("researcher"), step_input("Streaming topic")]))
    assert len(chunks) > 2
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.tool_calls[0]["args"] == {"query": "Streaming topic"}
    assert merged.usage_metadata and merged.usage_metadata["output_tokens"] > 0
    assert server.requests[-1]["stream"] is True

    coordinator = llm(server).bind_tools(offered(HANDOFF_TO_PLANNER))
    text = "".join(str(c.content) for c in coordinator.stream([system("coordinator"), HumanMessage("thanks")]))
    assert text.startswith("You're welcome")


def test_usage_is_about_a_quarter_of_the_characters(server: FakeModelServer) -> None:
    reply = llm(server).invoke([system("analyst"), step_input("Usage", ["x" * 4000])])
    usage = reply.usage_metadata
    assert usage is not None
    assert 1000 <= usage["input_tokens"] <= 1200
    assert usage["output_tokens"] == pytest.approx(len(reply.content) / 4, abs=1)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


# ---------------------------------------------------------------- faults


def test_http_status_faults_raise_the_matching_sdk_errors(server: FakeModelServer) -> None:
    messages = [system("coordinator"), HumanMessage(QUESTION)]
    server.inject(Fault.status(500), Fault.status(429, retry_after=2), Fault.status(401, "Incorrect API key"))
    with pytest.raises(openai.InternalServerError):
        llm(server).invoke(messages)
    with pytest.raises(openai.RateLimitError) as limited:
        llm(server).invoke(messages)
    assert limited.value.response.headers["retry-after"] == "2"
    with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
        llm(server).invoke(messages)
    assert llm(server).invoke(messages).content  # the queue is drained: back to normal


def test_timeout_and_truncated_body_faults(server: FakeModelServer) -> None:
    messages = [system("coordinator"), HumanMessage("hello")]
    server.inject(Fault.timeout(5))
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        llm(server, timeout=0.3).invoke(messages)
    assert time.monotonic() - started < 4  # gave up long before the server would answer
    server.inject(Fault.truncated())
    with pytest.raises(openai.APIConnectionError):
        llm(server).invoke(messages)


def test_bad_output_faults(server: FakeModelServer) -> None:
    server.inject(Fault.empty())
    empty = llm(server).bind_tools(tools("web_search")).invoke([system("researcher"), step_input("Empty")])
    assert empty.content == "" and not empty.tool_calls

    server.inject(Fault.invalid_tool_args())
    broken = llm(server).bind_tools(tools("web_search")).invoke([system("researcher"), step_input("Broken")])
    assert not broken.tool_calls
    assert broken.invalid_tool_calls[0]["name"] == "web_search"
    assert broken.invalid_tool_calls[0]["args"] == '{"query": "unterminated'


def test_plan_faults_are_targeted_at_the_planner(server: FakeModelServer) -> None:
    server.inject(Fault.non_json_plan(), Fault.malformed_plan())
    # Coordinator requests pass planner-targeted faults by.
    coordinator = llm(server).bind_tools(offered(HANDOFF_TO_PLANNER))
    assert coordinator.invoke([system("coordinator"), HumanMessage(QUESTION)]).tool_calls
    assert len(server.pending_faults) == 2

    prose = plan_llm(server).invoke(planner_messages()).content
    with pytest.raises(ValueError):
        json.loads(prose)
    repaired = json_repair.loads(prose)
    assert not (isinstance(repaired, dict) and "title" in repaired)

    malformed = str(plan_llm(server).invoke(planner_messages()).content)
    assert malformed.count("```") == 2
    with pytest.raises(ValueError):
        json.loads(malformed)
    plan = Plan.model_validate(json_repair.loads(malformed))
    assert len(plan.steps) == 3 and not server.pending_faults


def test_requests_are_recorded_and_latency_applies(server: FakeModelServer) -> None:
    before = len(server.requests)
    server.latency_seconds = 0.2
    try:
        started = time.monotonic()
        llm(server).invoke([system("coordinator"), HumanMessage("hi")])
        assert time.monotonic() - started >= 0.2
    finally:
        server.latency_seconds = 0.0
    assert len(server.requests) == before + 1
    assert server.requests[-1]["messages"][-1] == {"role": "user", "content": "hi"}


def test_the_reply_leaves_the_latency_after_the_request_came_however_slow_the_fake(
        server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/overhead.py divides a run by the model's latency alone: the fake's own work on a request
    (reading the prompt, scripting the reply) must fall inside that latency, not after it."""
    import offline.model_server as model_server

    scripted = model_server.respond

    def slow_respond(*args: Any) -> Any:
        time.sleep(0.4)  # the fake's own work, as on a long prompt on a loaded machine
        return scripted(*args)

    monkeypatch.setattr(model_server, "respond", slow_respond)
    server.latency_seconds = 0.5
    try:
        llm(server).invoke([system("coordinator"), HumanMessage("hi")])
    finally:
        server.latency_seconds = 0.0
    in_the_fake = server.replies[-1] - server.arrivals[-1]
    assert 0.5 <= in_the_fake < 0.8  # 0.9 or more when the fake works after the latency


def test_a_reply_the_client_has_is_recorded(server: FakeModelServer) -> None:
    """bench/overhead.py and the test above read ``replies`` as soon as a call returns: each reply's
    time is recorded before it leaves, never after the client may already have read it."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=5) as client:
        for _ in range(200):
            client.post(f"{server.base_url}/chat/completions", json=body).raise_for_status()
            assert len(server.replies) == len(server.arrivals)


def test_the_model_list_answers_after_its_own_latency(server: FakeModelServer) -> None:
    """A hosted provider's ``/v1/models`` is a round trip away, as its chat is: bench/overhead.py's
    ``--models-latency`` measures what a worker's first turn pays for it."""
    server.models_latency_seconds = 0.3
    try:
        started = time.monotonic()
        listing = httpx.get(f"{server.base_url}/models", timeout=5).json()
        assert time.monotonic() - started >= 0.3
    finally:
        server.models_latency_seconds = 0.0
    assert [model["id"] for model in listing["data"]] == [MODEL_NAME]


def test_module_runs_in_the_foreground() -> None:
    process = subprocess.Popen([sys.executable, "-m", "offline.model_server", "--port", "0"], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        models = httpx.get(f"{base_url}/models", timeout=5).json()
        assert models["data"][0]["id"] == "deerflow-offline"
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_a_server_with_a_key_refuses_requests_without_it() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    with FakeModelServer(api_key="right") as server:
        wrong = httpx.post(f"{server.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer wrong"})
        right = httpx.post(f"{server.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer right"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200 and len(server.requests) == 1
