"""Small and local models run the whole pipeline (issue #24): JSON tool mode, a probe that tells
the truth, bounded schemas and honest accounting, on fakes that behave like llama.cpp.

The fakes: ``FakeModelServer(ignore_tools=True)`` drops ``tools`` (a chat template without tool
support) but enforces ``json_schema``; ``tool_text="instead"`` honours tools with a grammar that
lets the model write text first, and the model never reaches the call (finish_reason "length").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model import json_tools
from activities.model.llm import ModelActivities
from activities.model.plan_schema import plan_json_schema
from activities.model.tool_support import ToolSupport, Verdict, template_description
from cli.render import status_text
from config.settings import Settings
from offline.json_tool_mode import GIVEN_UP
from offline.model_server import FakeModelServer, Fault
from offline.search_server import FakeSearchServer
from tests.support.history_checks import HISTORIES, load
from tests.support.runs import QUESTION, start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolCall, ToolSpec
from workflows.contracts.research import Outcome
from workflows.contracts.run_config import RunConfig
from workflows.contracts.status import RunStatus
from workflows.research.agent_loop import FINAL_ANSWER_REQUEST
from workflows.research.found_urls import FoundUrls
from workflows.research.step_loop import NO_SEARCH_PATCH
from workflows.research.tools import HANDOFF_TO_PLANNER, TOOLS

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}")
VARS = {"CURRENT_TIME": "now", "locale": "en-US"}
COORDINATOR = ChatRequest(prompt="coordinator", prompt_vars=VARS, tools=[HANDOFF_TO_PLANNER],
                          messages=[ChatMessage(role="user", content=QUESTION)])
TOOL_RESULT = ChatMessage(role="tool", tool_call_id="call_1", name="web_search", content="[]")
STEP = "# Current Step\n\n## Title\n\nTides\n\n## Description\n\nHow tides work\n\n## Locale\n\nen-US"


def researcher(*messages: ChatMessage) -> ChatRequest:
    return ChatRequest(prompt="researcher", prompt_vars={**VARS, "tool_guidance": "-"},
                       messages=[ChatMessage(role="user", content=STEP), *messages],
                       tools=[TOOLS["web_search"].spec, TOOLS["crawl_tool"].spec])


@pytest.fixture
def toolless() -> Iterator[FakeModelServer]:
    """llama-server with the model's own template: ``tools`` dropped, ``json_schema`` enforced."""
    with FakeModelServer(ignore_tools=True, chat_template=CHATML) as server:
        yield server


@pytest.fixture
def rambling() -> Iterator[FakeModelServer]:
    """llama-server with a tool template and a small model: text until the cap, never the call."""
    with FakeModelServer(tool_text="instead") as server:
        yield server


def pointed_at(provider_env: dict[str, str], server: FakeModelServer, mode: str = "auto") -> Settings:
    return settings_with(provider_env, OPENAI_BASE_URL=server.base_url, LLM_TOOL_MODE=mode)


async def chat(activities: ModelActivities, request: ChatRequest) -> ChatResponse:
    return await ActivityEnvironment().run(activities.chat, request)


def unbounded(schema: Any, where: str = "$") -> list[str]:
    """The paths of every string without ``maxLength`` and array without ``maxItems`` (enum and
    const values are bounded by themselves), or with one llama.cpp refuses in a grammar."""
    if isinstance(schema, list):
        return [path for index, item in enumerate(schema) for path in unbounded(item, f"{where}[{index}]")]
    if not isinstance(schema, dict):
        return []
    found = []
    kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    if "string" in kinds and "maxLength" not in schema and "enum" not in schema and "const" not in schema:
        found.append(where)
    if "array" in kinds and "maxItems" not in schema:
        found.append(where)
    if any(schema.get(bound, 0) >= json_tools.LLAMA_CPP_REPETITION_LIMIT for bound in ("maxLength", "maxItems")):
        found.append(f"{where} (over llama.cpp's limit)")
    return found + [path for key, value in schema.items() for path in unbounded(value, f"{where}.{key}")]


# ---------------------------------------------------------------- JSON mode in the chat activity


async def test_json_mode_asks_without_tools_for_a_schema_enforced_action_and_returns_a_native_call(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    response = await chat(ModelActivities(pointed_at(provider_env, model_server, "json")), COORDINATOR)
    (sent,) = model_server.requests
    assert "tools" not in sent and "tool_choice" not in sent
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == json_tools.SCHEMA_NAME
    assert "handoff_to_planner" in sent["messages"][0]["content"]  # the tools, described in the prompt
    (call,) = response.message.tool_calls
    assert call.name == "handoff_to_planner" and call.arguments["research_topic"] and call.id == "call_1"
    assert response.usage.llm_calls == 1 and response.usage.json_tool_calls == 1


async def test_json_mode_sends_earlier_calls_and_outputs_as_plain_text_and_reads_the_final_answer(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    call = ToolCall(id="call_1", name="web_search", arguments={"query": "tides"})
    output = '[{"title": "Tides", "url": "https://t.example/tides", "content": "The Moon pulls the sea."}]'
    request = researcher(ChatMessage(role="assistant", tool_calls=[call]),
                         ChatMessage(role="tool", tool_call_id="call_1", name="web_search", content=output))
    response = await chat(ModelActivities(pointed_at(provider_env, model_server, "json")), request)
    sent = model_server.requests[-1]["messages"]
    assert [message["role"] for message in sent] == ["system", "user", "assistant", "user"]
    assert json.loads(sent[2]["content"]) == {"action": "web_search", "arguments": {"query": "tides"}}
    assert sent[3]["content"] == "Result of web_search (call_1):\n" + output
    assert not response.message.tool_calls and "https://t.example/tides" in response.message.content


def test_a_reply_that_is_no_action_object_is_content_and_bad_arguments_are_an_invalid_call() -> None:
    assert json_tools.parse_action("Plain prose.", []) == ("Plain prose.", [])
    content, (call,) = json_tools.parse_action('{"action": "web_search", "arguments": ["tides"]}', [])
    assert not content and call.invalid_arguments == '["tides"]'
    earlier = [ChatMessage(role="assistant", tool_calls=[ToolCall(id="call_1", name="web_search")])]
    _, (next_call,) = json_tools.parse_action('{"action": "crawl_tool", "arguments": {"url": "u"}}', earlier)
    assert next_call.id == "call_2"  # ids stay unique in the conversation


MCP_LOOKUP = ToolSpec(name="mcp_docs_lookup", description="An MCP tool", parameters={
    "type": "object", "properties": {"terms": {"type": "array", "items": {"type": "string"}},
                                     "filters": {"type": "object",
                                                 "properties": {"site": {"type": ["string", "null"]}}}}})


@pytest.mark.parametrize("tools", [
    [HANDOFF_TO_PLANNER],
    [spec.spec for spec in TOOLS.values()],
    [MCP_LOOKUP],
])
def test_every_string_and_array_of_the_action_schema_is_bounded(tools: list[ToolSpec]) -> None:
    schema = json_tools.action_schema(tools, json_tools.answer_chars([TOOL_RESULT], 4096))
    assert unbounded(schema) == []
    assert len(schema["anyOf"]) == len(tools) + 1  # each tool and the final answer


def longest_value(schema: Any) -> Any:
    """The longest value ``schema`` allows: every string, array and choice at its bound."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return max(schema["enum"], key=lambda value: len(json.dumps(value)))
    if "anyOf" in schema:
        return max((longest_value(option) for option in schema["anyOf"]), key=lambda value: len(json.dumps(value)))
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "string" in kinds:
        return "x" * schema["maxLength"]
    if "array" in kinds:
        return [longest_value(schema["items"])] * schema["maxItems"]
    if "object" in kinds:
        return {name: longest_value(value) for name, value in (schema.get("properties") or {}).items()}
    return 1e-100 if {"number", "integer"} & kinds else False


@pytest.mark.parametrize(("tools", "cap"), [
    *[([HANDOFF_TO_PLANNER], cap) for cap in (100, 256, 512, 4096)],
    *[([spec.spec for spec in TOOLS.values()], cap) for cap in (100, 256, 512, 4096)],
    *[([MCP_LOOKUP], cap) for cap in (256, 512, 4096)],
])
def test_every_action_the_schema_allows_fits_the_turns_output_cap(cap: int, tools: list[ToolSpec]) -> None:
    """A small model looping inside a tool's argument stops at the schema, before the cap cuts the action
    (the plan's schema likewise: tests/test_plan_schema.py). Not below the floor: 17 strings of the MCP
    tool at 16 characters each do not fit a 100-token cap, and its arrays keep their 16 items."""
    schema = json.loads(json.dumps(json_tools.response_format(tools, [TOOL_RESULT], cap, [])))["json_schema"]["schema"]
    for option in schema["anyOf"]:
        if option["properties"]["action"]["const"] != json_tools.FINAL_ACTION:
            assert len(json.dumps(longest_value(option))) <= cap * json_tools.CHARS_PER_TOKEN, option
    assert json_tools.argument_chars(tools[0], None) == json_tools.MAX_ARGUMENT_CHARS


def test_a_json_mode_turn_acts_before_it_may_answer() -> None:
    """A small model allowed to answer at once answers without research (measured on SmolLM2-135M)."""
    first = json_tools.action_schema([HANDOFF_TO_PLANNER], json_tools.answer_chars([], 4096))
    assert [option["properties"]["action"]["const"] for option in first["anyOf"]] == ["handoff_to_planner"]
    assert json_tools.FINAL_ACTION not in json_tools.instructions([HANDOFF_TO_PLANNER], answers=False)
    later = json_tools.answer_chars([ChatMessage(role="user", content="task"), TOOL_RESULT], 4096)
    assert later == json_tools.MAX_ANSWER_CHARS


def actions(schema: dict[str, Any]) -> list[str]:
    return [option["properties"]["action"]["const"] for option in schema["anyOf"]]


def test_a_url_argument_is_one_the_step_found_and_no_call_has_used() -> None:
    """SmolLM2-135M crawled made-up URLs (``https://example.com/...``, ``http#heat-pumps``) instead of
    searching, then the same one until the step's turns ran out (measured on llama-server)."""
    tools = [TOOLS["web_search"].spec, TOOLS["crawl_tool"].spec]
    found = FoundUrls()
    task = [ChatMessage(role="user", content=STEP)]
    first = json_tools.action_schema(tools, None, found.choices(task))
    assert actions(first) == ["web_search"]  # nothing to crawl yet: the step searches first
    found.add(["https://t.example/tides", "https://t.example/moon", "https://t.example/tides"])
    crawled = ToolCall(id="call_2", name="crawl_tool", arguments={"url": "HTTPS://t.example/tides#top"})
    later = [*task, ChatMessage(role="assistant", tool_calls=[ToolCall(id="call_1", name="web_search")]),
             ChatMessage(role="tool", tool_call_id="call_1", name="web_search", content="(the results)"),
             ChatMessage(role="assistant", tool_calls=[crawled])]
    schema = json_tools.action_schema(tools, 100, found.choices(later))
    assert actions(schema) == ["web_search", "crawl_tool", json_tools.FINAL_ACTION]
    assert schema["anyOf"][1]["properties"]["arguments"]["properties"]["url"]["enum"] == ["https://t.example/moon"]
    assert unbounded(schema) == []
    only_crawl = json_tools.action_schema([TOOLS["crawl_tool"].spec], None, [])
    assert actions(only_crawl) == ["crawl_tool"]  # no action left otherwise: offered as it is


async def test_a_json_turn_offers_to_crawl_only_the_urls_the_workflow_found(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    """Not the URLs the conversation's text holds: a search for a URL the model made up answers
    "No results found for '<that URL>'." (issue #42, item 7), and errors quote the model's arguments."""
    invented = "https://www.amazon.com/dp/B0INVENTED"
    searched = ToolCall(id="call_1", name="web_search", arguments={"query": invented})
    echoed = [ChatMessage(role="assistant", tool_calls=[searched]),
              ChatMessage(role="tool", tool_call_id="call_1", name="web_search",
                          content=f"No results found for {invented!r}.")]
    activities = ModelActivities(pointed_at(provider_env, toolless, "json"))
    await chat(activities, researcher(*echoed))
    assert actions(toolless.requests[-1]["response_format"]["json_schema"]["schema"]) == [
        "web_search", json_tools.FINAL_ACTION]
    given = researcher(*echoed).model_copy(update={"url_choices": ["https://t.example/tides"]})
    await chat(activities, given)
    crawl = toolless.requests[-1]["response_format"]["json_schema"]["schema"]["anyOf"][1]
    assert crawl["properties"]["arguments"]["properties"]["url"]["enum"] == ["https://t.example/tides"]


async def test_the_fake_writes_only_what_the_schema_allows_as_llama_servers_grammar_does(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    searched = [ChatMessage(role="assistant", tool_calls=[ToolCall(id="call_1", name="web_search",
                                                                   arguments={"query": "tides"})]), TOOL_RESULT]
    activities = ModelActivities(pointed_at(provider_env, toolless, "json"))
    listed = researcher(*searched).model_copy(update={"url_choices": ["https://t.example/moon",
                                                                      "https://t.example/tides"]})
    toolless.inject(Fault.call("crawl_tool", {"url": "https://t.example/tide-tables"}))
    nearest = await chat(activities, listed)
    assert nearest.message.tool_calls[0].arguments == {"url": "https://t.example/tides"}
    toolless.inject(Fault.call("crawl_tool", {"url": "https://t.example/tide-tables"}))
    unlisted = await chat(activities, researcher(*searched))  # nothing found: no crawl offered, the answer is
    assert not unlisted.message.tool_calls and unlisted.message.content == GIVEN_UP


def test_a_tool_called_twice_with_the_same_arguments_is_not_offered_again() -> None:
    """SmolLM2-135M searched "heat pump" twelve times running until the step's turns ran out."""
    tools = [TOOLS["web_search"].spec, TOOLS["crawl_tool"].spec]
    found = '[{"url": "https://t.example/heat-pumps"}]'
    messages = [ChatMessage(role="user", content=STEP)]
    for number in (1, 2):
        search = ToolCall(id=f"call_{number}", name="web_search", arguments={"query": "heat pump"})
        messages += [ChatMessage(role="assistant", tool_calls=[search]),
                     ChatMessage(role="tool", tool_call_id=search.id, name="web_search", content=found)]
        schema = json.loads(json.dumps(json_tools.response_format(tools, messages, 100, ["https://t.example/a"])))
        schema = schema["json_schema"]["schema"]
        offered = actions(schema)
        assert ("web_search" in offered) is (number == 1)
        assert offered[-2:] == ["crawl_tool", json_tools.FINAL_ACTION]


async def test_a_research_steps_first_json_turn_can_only_search(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    response = await chat(ModelActivities(pointed_at(provider_env, toolless, "json")), researcher())
    schema = toolless.requests[-1]["response_format"]["json_schema"]["schema"]
    assert actions(schema) == ["web_search"]
    assert response.message.tool_calls[0].name == "web_search"


async def test_an_agents_last_tool_less_turn_is_asked_in_json_mode_once_the_provider_does_not_call_tools(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    """SmolLM2-135M asked natively for a conversation of calls its template cannot render answered
    with nothing, six times, and the run failed (measured on llama-server)."""
    activities = ModelActivities(pointed_at(provider_env, toolless))
    await chat(activities, researcher())  # the worker learns: the provider ignores tools
    call = ToolCall(id="call_1", name="web_search", arguments={"query": "tides"})
    last = researcher(ChatMessage(role="assistant", tool_calls=[call]), TOOL_RESULT,
                      ChatMessage(role="user", content=FINAL_ANSWER_REQUEST)).model_copy(update={"tools": []})
    response = await chat(activities, last)
    sent = toolless.requests[-1]
    assert actions(sent["response_format"]["json_schema"]["schema"]) == [json_tools.FINAL_ACTION]
    assert [message["role"] for message in sent["messages"]] == ["system", "user", "assistant", "user", "user"]
    assert response.message.content.strip() and response.usage.json_tool_calls == 1
    native = await chat(ModelActivities(pointed_at(provider_env, toolless, "native")), last)
    assert "response_format" not in toolless.requests[-1] and native.usage.json_tool_calls == 0


def test_every_string_and_array_of_the_plan_schema_is_bounded() -> None:
    assert unbounded(plan_json_schema(256, 3)) == []


# ---------------------------------------------------------------- auto: native, then JSON


async def test_auto_falls_back_to_json_when_the_server_drops_tools_and_counts_every_call(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    activities = ModelActivities(pointed_at(provider_env, toolless))
    response = await chat(activities, COORDINATOR)
    native, probe, again = toolless.requests
    assert native["tools"] and probe["tool_choice"] == "required" and "tools" not in again
    assert response.message.tool_calls[0].name == "handoff_to_planner"
    assert (response.usage.llm_calls, response.usage.json_tool_calls) == (3, 1)
    assert response.usage.total_tokens > 0
    await chat(activities, researcher())  # the worker remembers: straight to JSON, no probe
    assert len(toolless.requests) == 4 and "tools" not in toolless.requests[-1]


async def test_auto_falls_back_to_json_when_the_model_rambles_under_a_forced_call(
    provider_env: dict[str, str], rambling: FakeModelServer
) -> None:
    settings = pointed_at(provider_env, rambling)
    activities = ModelActivities(settings)
    response = await chat(activities, researcher())
    native, probe, _ = rambling.requests
    assert native["tools"] and probe["tool_choice"] == "required"
    assert response.message.tool_calls[0].name == "web_search" and response.usage.json_tool_calls == 1
    key = ToolSupport.key_of(rambling.base_url, settings.model_name("basic"))
    assert activities.tool_support.known(key) is Verdict.RAMBLES


async def test_auto_falls_back_to_json_when_the_server_refuses_tools_with_an_error(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(500, "tools param requires --jinja flag", agent="coordinator"))
    response = await chat(ModelActivities(pointed_at(provider_env, model_server)), COORDINATOR)
    assert response.message.tool_calls[0].name == "handoff_to_planner" and response.usage.json_tool_calls == 1
    assert "tools" not in model_server.requests[-1]


async def test_text_before_a_call_is_still_a_call(provider_env: dict[str, str]) -> None:
    with FakeModelServer(tool_text="before") as server:
        response = await chat(ModelActivities(pointed_at(provider_env, server)), COORDINATOR)
    assert response.message.tool_calls[0].name == "handoff_to_planner"
    assert len(server.requests) == 1  # a call: nothing to probe


async def test_a_provider_that_honours_tools_keeps_native_mode_and_a_genuine_answer(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    activities = ModelActivities(pointed_at(provider_env, model_server))
    first = await chat(activities, researcher())
    assert first.message.tool_calls and first.usage.json_tool_calls == 0
    model_server.inject(Fault.no_tool_call(agent="researcher"))
    answer = await chat(activities, researcher())  # no call, but the first was one: no probe, it stands
    assert not answer.message.tool_calls and answer.usage.llm_calls == 1 and answer.usage.json_tool_calls == 0
    assert not any(body.get("tool_choice") == "required" for body in model_server.requests)


# ---------------------------------------------------------------- native: a truthful failure


async def test_native_mode_on_a_rambling_model_says_so_and_does_not_advise_jinja(
    provider_env: dict[str, str], rambling: FakeModelServer
) -> None:
    with pytest.raises(ApplicationError) as raised:
        await chat(ModelActivities(pointed_at(provider_env, rambling, "native")), COORDINATOR)
    message = raised.value.message
    assert raised.value.type == "ModelToolsUnsupported" and raised.value.non_retryable
    assert "enforces tool calls but the model does not make them" in message and "finish_reason length" in message
    assert "--jinja" not in message and "LLM_TOOL_MODE" in message
    probe = rambling.requests[-1]
    assert probe["tool_choice"] == "required"


async def test_native_mode_on_a_server_that_drops_tools_names_its_template_and_reports_the_calls_spent(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    with pytest.raises(ApplicationError) as raised:
        await chat(ModelActivities(pointed_at(provider_env, toolless, "native")), COORDINATOR)
    message = raised.value.message
    assert message.startswith("The model provider ignores tools") and "finish_reason stop" in message
    assert "chat template (ChatML) of deerflow-offline.gguf" in message
    assert "chat_template_caps.supports_tools=false" in message
    (spent,) = raised.value.details
    assert spent.llm_calls == 2 and spent.total_tokens > 0  # the reply and the probe


async def test_fixing_the_server_fixes_the_next_run_without_restarting_the_worker(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    activities = ModelActivities(pointed_at(provider_env, toolless, "native"))
    with pytest.raises(ApplicationError):
        await chat(activities, COORDINATOR)
    toolless.ignore_tools = False  # the operator restarts llama-server with a tool template
    hello = COORDINATOR.model_copy(update={"messages": [ChatMessage(role="user", content="Hello!")]})
    response = await chat(activities, hello)  # a genuine direct reply: probed afresh, not failed
    assert response.message.content and not response.message.tool_calls
    assert toolless.requests[-1]["tool_choice"] == "required"


async def test_a_verdict_expires_and_the_provider_is_asked_natively_again(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    now = [0.0]
    activities = ModelActivities(pointed_at(provider_env, toolless))
    activities.tool_support = ToolSupport(ttl=60, clock=lambda: now[0])
    await chat(activities, COORDINATOR)
    await chat(activities, COORDINATOR)
    assert ["tools" in body for body in toolless.requests] == [True, True, False, False]
    now[0] = 61
    await chat(activities, COORDINATOR)
    assert ["tools" in body for body in toolless.requests[4:]] == [True, True, False]  # probed afresh


async def test_a_template_without_tool_support_means_ignored_even_when_the_model_rambles(
    provider_env: dict[str, str]
) -> None:
    """SmolLM2-135M on llama-server with its own template: tools dropped, and the probe's text runs
    to its cap; /props decides (measured)."""
    with FakeModelServer(ignore_tools=True, chat_template=CHATML) as server:
        server.inject(Fault.loop())  # the coordinator's text
        server.inject(Fault.loop())  # the probe's text, to its cap: finish_reason "length"
        with pytest.raises(ApplicationError) as raised:
            await chat(ModelActivities(pointed_at(provider_env, server, "native")), COORDINATOR)
    assert raised.value.message.startswith("The model provider ignores tools")
    assert "supports_tools=false" in raised.value.message


def test_props_name_the_template_and_its_tool_support() -> None:
    qwen = "<|im_start|>system\n{% if tools %}<tools></tools>{% endif %}<tool_call>\n"
    described = template_description({"chat_template": qwen, "model_path": "/m/qwen2.5-0.5b.gguf",
                                      "chat_template_caps": {"supports_tools": True}})
    assert described == ("the chat template (ChatML with <tool_call> tool calls (Hermes/Qwen style)) of "
                         "qwen2.5-0.5b.gguf with chat_template_caps.supports_tools=true")
    assert template_description({"error": "not found"}) is None


# ---------------------------------------------------------------- whole runs


async def test_a_whole_run_in_auto_mode_on_a_server_that_drops_tools_reaches_a_searched_report(
    worker_with: WorkerWith, provider_env: dict[str, str], toolless: FakeModelServer,
    search_server: FakeSearchServer,
) -> None:
    async with worker_with(pointed_at(provider_env, toolless)) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=2)
        result = await handle.result()
        status = await handle.query("status", result_type=RunStatus)
        config = await first_run_config(handle)
    assert result.outcome is Outcome.REPORT and "made no search" not in result.report
    researched = toolless.requests_for("researcher")
    assert researched and all("tools" not in body for body in researched)
    assert any("Result of web_search" in message["content"] for body in researched for message in body["messages"])
    assert result.usage.json_tool_calls >= len(researched) and result.usage.llm_calls == len(toolless.requests)
    assert "in JSON tool mode" in status_text(handle.id, status)
    assert config.llm_tool_mode == "auto"


async def first_run_config(handle: Any) -> RunConfig:
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_completed_event_attributes"):
            payloads = event.activity_task_completed_event_attributes.result.payloads
            data = json.loads(payloads[0].data)
            if "agent_recursion_limit" in data:
                return RunConfig.model_validate(data)
    raise AssertionError("no load_run_config result in the history")


async def test_a_failed_run_counts_the_calls_it_made(
    worker_with: WorkerWith, provider_env: dict[str, str], toolless: FakeModelServer,
) -> None:
    async with worker_with(pointed_at(provider_env, toolless, "native")) as client:
        handle = await start(client, auto_accept_plan=True)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        status = await handle.query("status", result_type=RunStatus)
    assert status.usage.llm_calls == 2 and status.usage.total_tokens > 0
    assert "2 model calls" in status_text(handle.id, status)


async def test_a_report_whose_research_step_made_no_search_says_so_at_its_top(
    time_worker: Client, model_server: FakeModelServer,
) -> None:
    model_server.inject(Fault.no_tool_call(agent="researcher"))
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.report.startswith("> **Note:** Research step 1 (")
    assert "made no search" in result.report.split("\n\n")[0]


def test_the_no_search_history_notes_the_step_behind_its_patch() -> None:
    history = load(HISTORIES / "no_search_step.json")
    patches = [json.loads(event.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
               for event in history.events if event.HasField("marker_recorded_event_attributes")]
    assert NO_SEARCH_PATCH in patches
    completed = history.events[-1].workflow_execution_completed_event_attributes
    report = json.loads(completed.result.payloads[0].data)["report"]
    assert report.startswith("> **Note:** Research step 1 (") and "made no search" in report.split("\n\n")[0]
