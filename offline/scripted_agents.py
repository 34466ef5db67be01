"""Deterministic stand-ins for DeerFlow's agents, as pure functions over a chat request.

The offline model server (``offline.model_server``) hands every ``/v1/chat/completions`` body
to :func:`respond`. Which agent is being played is read from what the request offers (see
:func:`detect_agent`), never from a marker that would ship to real providers too; everything else
comes from the message list, so the same request always yields the same reply. Nothing here
does I/O: the answers are built only from what the workflow sent (topic, search results, tool
output, observations), which is what makes an offline run a real, inspectable end-to-end run
rather than canned text.
"""

# Chinese text needs full-width punctuation, which RUF001 would flag on every zh-CN string.

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from offline import content_agents
from offline.report_styles import ReportParts, render_report
from offline.search_index import tokenize

# Tools that only one agent is offered. MCP tools may be offered beside them, so one match decides.
AGENT_TOOLS = (
    ("coordinator", frozenset({"handoff_to_planner", "ask_clarification"})),
    ("coder", frozenset({"python_repl_tool"})),
    ("researcher", frozenset({"web_search", "crawl_tool", "local_search_tool"})),
)
# Turns without tools (the analyst, the reporter, any agent's final summarising turn) are told
# apart by the role their prompt opens with.
ROLE_RE = re.compile(r"^You are an? (researcher|coder|analyst|reporter|prompt enhancer|report judge|prose writer"
                     r"|presentation composer|podcast script writer)\b", re.MULTILINE)
LOCALE_RE = re.compile(r"Locale:\s*([A-Za-z]{2,3}-[A-Za-z]{2,4})")
MAX_STEPS_RE = re.compile(r"at most\s+(\d+)\s+steps", re.IGNORECASE)
STYLE_RE = re.compile(r"Report style:\s*([A-Za-z_]+)")
HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# The user's own documents are cited as file:// links, web sources as http(s).
LINK_RE = re.compile(r"(?<!!)\[([^\]\n]+)\]\(((?:https?|file)://[^)\s]+)\)")
URL_RE = re.compile(r"(?:https?|file)://[^\s)\]>\"']+")
FINDING_RE = re.compile(r"<finding>(.*?)</finding>", re.DOTALL)
BACKGROUND_PREFIX = "background investigation results of user query:"
OBSERVATION_PREFIX = "Below are some observations for the research task:"
DEFAULT_MAX_STEPS = 3
# The plan's research angles, in order: step titles are "<angle>: <subject>", so the researcher
# searches for the subject and picks the sentences that speak to the angle (its cue words).
ANGLES = (
    ("Background and key facts", "背景与关键事实", ()),
    ("Evidence, data and expert perspectives", "证据、数据与不同观点",
     ("percent", "million", "billion", "study", "studies", "measured", "found", "about", "%", "万", "亿")),
    ("Costs, economics and market size", "成本、经济性与市场规模",
     ("cost", "price", "cheap", "expensive", "market", "economic", "成本", "价格", "市场")),
    ("Risks, limitations and open problems", "风险、局限与未解决的问题",
     ("risk", "but", "however", "challenge", "limit", "problem", "cannot", "falls", "风险", "但", "问题", "挑战")),
    ("Policy, regulation and standards", "政策、监管与标准",
     ("policy", "law", "regulat", "government", "standard", "target", "agreement", "政策", "监管", "标准")),
    ("Outlook for the next decade", "未来十年展望",
     ("future", "will", "expected", "developed", "plan", "next", "growing", "未来", "将", "发展")),
    ("Key players and case studies", "主要参与者与案例",
     ("company", "companies", "agency", "NASA", "researchers", "countries", "公司", "机构", "国家")),
)
ANGLE_ROUNDS = 3  # plans of up to 1 + 3 x 7 steps (ResearchRequest allows 20)
# An edit request's wording around what it asks for: "add a step on running costs" -> "running costs".
FOCUS_RE = re.compile(
    r"^(?:please\s+)?(?:(?:also\s+)?(?:add|include|cover|insert)\s+(?:(?:a|an|another|one|new)\s+)?"
    r"(?:(?:research\s+)?(?:step|section|part)s?\s+)?(?:on|about|covering|for|regarding|into|that covers)?\s*|"
    r"(?:research|look\s+(?:at|into)|investigate|focus\s+on)\s+)(?:the\s+)?",
    re.IGNORECASE,
)
ZH_FOCUS_RE = re.compile(r"^(?:请)?(?:再)?(?:增加|添加|加上?|补充)(?:一个|一步)?(?:关于)?|(?:的)?(?:步骤|部分|研究)$")

SMALL_TALK = {
    "greeting": {"hi", "hello", "hey", "hi there", "hello there", "hey there", "good morning",
                 "good afternoon", "good evening", "greetings", "yo", "howdy", "how are you",
                 "你好", "您好", "嗨", "哈喽", "早上好", "下午好", "晚上好", "你好吗", "大家好"},
    "thanks": {"thanks", "thank you", "thanks a lot", "thank you very much", "many thanks", "thx",
               "ty", "cheers", "谢谢", "谢谢你", "多谢", "感谢", "非常感谢", "谢啦"},
    "identity": {"who are you", "what are you", "what can you do", "what is your name",
                 "what's your name", "你是谁", "你能做什么", "你叫什么", "你叫什么名字"},
}
SMALL_TALK_REPLIES = {
    ("greeting", "en"): "Hello! I'm DeerFlow, a deep-research assistant (running on the offline "
                        "demo model). Ask me a research question and I will plan the research, "
                        "gather sources and write a report.",
    ("thanks", "en"): "You're welcome! Ask me another research question any time.",
    ("identity", "en"): "I'm DeerFlow, a deep-research assistant. Give me a question and I will "
                        "plan the research, search for sources, run small analyses and write a "
                        "cited report.",
    ("greeting", "zh"): "你好！我是 DeerFlow，一个深度研究助手（当前使用离线演示模型）。"
                        "请告诉我你想研究的问题，我会制定计划、收集资料并撰写报告。",
    ("thanks", "zh"): "不客气！随时可以再问我新的研究问题。",
    ("identity", "zh"): "我是 DeerFlow，一个深度研究助手。给我一个问题，我会制定研究计划、"
                        "搜索资料、做简单分析，并撰写带引用的报告。",
}
@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call the scripted agent wants to make; ``id`` is ``call_<n>``, unique per chat."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptedReply:
    """What the model says: text, or tool calls (then ``content`` is empty)."""

    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    agent: str | None = None


# ---------------------------------------------------------------- message helpers


def text_of(content: Any) -> str:
    """Message content as plain text; OpenAI allows a list of typed parts as well as a string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def system_text(messages: list[dict[str, Any]]) -> str:
    """All system text: the agent's role and the ``Locale:``/step-limit/style lines live there."""
    return "\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))


def detect_agent(body: dict[str, Any]) -> str | None:
    """The DeerFlow agent a chat request is for, from what it offers; None for a plain chat.

    An agent's own tools name it, JSON mode is the planner's, and a tool-less turn falls back to
    the role its prompt states ("You are a reporter."), which every real prompt has anyway.
    """
    offered = set(_tool_names(body))
    for agent, tools in AGENT_TOOLS:
        if offered & tools:
            return agent
    if (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        return "planner"
    match = ROLE_RE.search(system_text(body.get("messages") or []))
    return match.group(1).replace(" ", "_") if match else None


def is_chinese(text: str) -> bool:
    """Han characters present: DeerFlow's rule for answering (and researching) in zh-CN."""
    return bool(HAN_RE.search(text))


def _zh(locale: str) -> bool:
    """Chinese output wanted; every other locale gets English, the demo's only other language."""
    return locale.lower().startswith("zh")


def _users(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("role") == "user"]


def _tool_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]


def _tool_names(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Offered function tools by name: agents only call tools the request actually offers."""
    tools = body.get("tools") or []
    return {t["function"]["name"]: t["function"] for t in tools if t.get("type", "function") == "function"}


def _call(messages: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> ScriptedToolCall:
    """A tool call whose id continues the numbering of the calls already in the conversation."""
    earlier = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    return ScriptedToolCall(id=f"call_{earlier + 1}", name=name, arguments=arguments)


# Section headings of the agents' answers, in English and Chinese: every heading follows the locale.
SECTIONS = {
    "problem": ("Problem Statement", "问题陈述"), "findings": ("Findings", "发现"),
    "conclusion": ("Conclusion", "结论"), "references": ("References", "参考资料"),
    "analysis": ("Analysis", "分析"), "statistics": ("Statistical Summary", "统计汇总"),
    "interpretation": ("Interpretation", "解读"), "result": ("Result", "结果"),
}


def heading(key: str, zh: bool) -> str:
    """A section heading (``## Findings`` / ``## 发现``) in the answer's language."""
    return "## " + SECTIONS[key][1 if zh else 0]


def _any_section(text: str, key: str) -> str:
    """A section's body, whichever language its heading is in."""
    return next((found for name in SECTIONS[key] if (found := _section(text, name, "##"))), "")


def _section(text: str, heading: str, level: str = "#") -> str:
    """The body under a markdown heading, up to the next heading of the same level."""
    pattern = rf"(?m)^{re.escape(level)} {re.escape(heading)}[ \t]*\n(.*?)(?=^{re.escape(level)} |\Z)"
    match = re.search(pattern, text, re.DOTALL)
    return match.group(1).strip() if match else ""


def _plain(text: str) -> str:
    """Markdown inline syntax removed, so a sentence can be quoted in a bullet or table."""
    text = LINK_RE.sub(r"\1", text)
    text = re.sub(r"[*_`]+", "", text)
    return re.sub(r"\s+", " ", text).strip()


# A full stop after these does not end a sentence ("Dr. Smith", "e.g. solar").
ABBREVIATION_RE = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|Prof|St|Sr|Jr|vs|etc|No|Fig|Inc|Ltd|approx|e\.g|i\.e)|"
                             r"\b[A-Z])\.$")
SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def sentences(text: str) -> list[str]:
    """The prose of ``text`` as whole sentences: headings, tables, rules, tags and ``Source:`` lines
    dropped, so no markdown heading leaks into a finding and no abbreviation splits a sentence."""
    prose = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "|", "---", "<", "```", "Source: ")):
            continue
        prose.append(_plain(re.sub(r"^([-*+]|\d+\.)\s+", "", line)))
    found: list[str] = []
    for line in prose:
        pieces = [piece.strip() for piece in SENTENCE_END_RE.split(line) if piece.strip()]
        merged: list[str] = []
        for piece in pieces:
            if merged and ABBREVIATION_RE.search(merged[-1]):
                merged[-1] += " " + piece
            else:
                merged.append(piece)
        found.extend(merged)
    return found


def first_sentence(text: str) -> str:
    """The first whole sentence of the prose in ``text`` (headings, tables and rules skipped)."""
    found = sentences(text)
    return found[0] if found else ""


def _shorten(text: str, limit: int) -> str:
    """Whitespace-collapsed text cut at a word boundary, so titles and bullets stay readable."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(",;:") + "…"


def _locale(messages: list[dict[str, Any]], fallback_text: str = "") -> str:
    """The prompt's ``Locale:`` marker; without one, guess from the text like the coordinator."""
    match = LOCALE_RE.search(system_text(messages))
    if match:
        return match.group(1)
    return "zh-CN" if is_chinese(fallback_text) else "en-US"


# ---------------------------------------------------------------- coordinator


def _small_talk_kind(text: str) -> str | None:
    """Kind of small talk if *every* phrase of the message is small talk, else None."""
    phrases = [p.strip() for p in re.split(r"[,.!?;:~，。！？；：、\n]+", text.lower()) if p.strip()]
    if not phrases or len(text) > 80:
        return None
    kinds = []
    for phrase in phrases:
        phrase = re.sub(r"\s+", " ", phrase.replace("deerflow", "").strip())
        kind = next((k for k, words in SMALL_TALK.items() if phrase in words), None)
        if kind is None:
            return None
        kinds.append(kind)
    return kinds[-1]


CLARIFYING_QUESTIONS = (
    ("Which aspect should the research focus on: technology, market, policy or something else?",
     "研究应侧重哪个方面：技术、市场、政策，还是其他？"),
    ("Which time frame and region matter most to you?", "你最关心哪个时间范围和地区？"),
    ("Who is the report for, and how deep should it go?", "这份报告的读者是谁，需要多深入？"),
)
VAGUE_WORD_LIMIT = 12


def _clarifying_question(messages: list[dict[str, Any]], topic: str) -> ScriptedReply | None:
    """Ask while the request stays vague (few words in all) and the tool is offered."""
    words = len(topic.split()) if not is_chinese(topic) else len(topic) // 3
    if words >= VAGUE_WORD_LIMIT:
        return None
    asked = sum(1 for m in messages if m.get("role") == "assistant" and m.get("content"))
    english, chinese = CLARIFYING_QUESTIONS[min(asked, len(CLARIFYING_QUESTIONS) - 1)]
    question = chinese if is_chinese(topic) else english
    return ScriptedReply(tool_calls=(_call(messages, "ask_clarification", {"question": question}),))


def coordinator(body: dict[str, Any]) -> ScriptedReply:
    """Small talk gets a direct answer; a vague request gets a clarifying question when the
    ``ask_clarification`` tool is offered; anything else is handed to the planner with a locale."""
    messages = body.get("messages") or []
    users = [text_of(m.get("content")).strip() for m in _users(messages) if m.get("name") != "system"]
    last = users[-1] if users else ""
    kind = _small_talk_kind(last)
    if kind is not None or not last:
        lang = "zh" if is_chinese(last) else "en"
        return ScriptedReply(content=SMALL_TALK_REPLIES[(kind or "greeting", lang)])
    topic = "\n".join(u for u in users if u and _small_talk_kind(u) is None)
    locale = "zh-CN" if is_chinese(topic) else "en-US"
    if "ask_clarification" in _tool_names(body):
        clarifying = _clarifying_question(messages, topic)
        if clarifying is not None:
            return clarifying
    if "handoff_to_planner" not in _tool_names(body):
        return ScriptedReply(content=f"Let me research this for you: {topic}")
    call = _call(messages, "handoff_to_planner", {"research_topic": topic, "locale": locale})
    return ScriptedReply(tool_calls=(call,))


# ---------------------------------------------------------------- planner


def subject_of(topic: str) -> str:
    """The topic as a noun-ish phrase for titles: request verbs and end punctuation dropped."""
    text = re.sub(r"\s+", " ", topic).strip()
    text = re.sub(r"^(请问|请|帮我|麻烦)?(研究一下|研究|调研|分析一下|分析|介绍一下|介绍)?(什么是)?", "", text)
    text = re.sub(
        r"^(please\s+)?((can|could|would) you\s+)?(research|investigate|explain|describe|summari[sz]e|"
        r"analy[sz]e|tell me about|write a report (on|about)|give me an overview of|"
        r"i want to know about)\s+",
        "", text, flags=re.IGNORECASE,
    )
    text = re.sub(r"^(what|which|who)\s+(is|are|was|were)\s+(the\s+)?(?=\w+\s+\w+)", "", text,
                  flags=re.IGNORECASE)
    text = _shorten(text.rstrip("?.!？。！ "), 90) or topic.strip()
    return text[:1].upper() + text[1:]


QUESTION_RE = re.compile(r"^(how|why|when|where|who|which|what|should|can|could|is|are|does|do|did|will|"
                         r"would)\b", re.IGNORECASE)


def _mid(subject: str) -> str:
    """The subject inside a sentence: lower-case first letter unless it starts an acronym."""
    return subject if subject[1:2].isupper() else subject[:1].lower() + subject[1:]


def _plan(body: dict[str, Any]) -> dict[str, Any]:
    """DeerFlow's plan object, built from topic, background results, feedback and observations."""
    messages = body.get("messages") or []
    topic, observed = "", False
    background: list[dict[str, Any]] = []
    feedback: list[str] = []
    for message in messages:
        role, name = message.get("role"), message.get("name")
        content = text_of(message.get("content")).strip()
        if role != "user":  # a previous plan (assistant) is rebuilt from the topic: deterministic
            continue
        if name == "background_investigation" or content.lower().startswith(BACKGROUND_PREFIX):
            prefixed = content.lower().startswith(BACKGROUND_PREFIX)
            raw = content[len(BACKGROUND_PREFIX):] if prefixed else content
            try:
                parsed = json.loads(raw.strip())
            except ValueError:
                parsed = []
            background = [r for r in parsed if isinstance(r, dict)] if isinstance(parsed, list) else []
        elif name == "feedback" or content.startswith("[EDIT_PLAN]"):
            text = re.sub(r"^\[EDIT_PLAN\]\s*", "", content)
            if text:
                feedback.append(text)
        elif name == "observation":
            observed = True
        elif not topic:
            topic = content
    locale = _locale(messages, topic)
    zh = _zh(locale)
    limit = MAX_STEPS_RE.search(system_text(messages))
    n = max(1, min(1 + ANGLE_ROUNDS * len(ANGLES), int(limit.group(1)) if limit else DEFAULT_MAX_STEPS))
    subject = subject_of(topic or "the topic")
    question = bool(QUESTION_RE.match(subject))
    bg_titles = [_shorten(str(r.get("title", "")), 60) for r in background if r.get("title")]
    colon = "：" if zh else ": "

    def research(angle: str, description: str) -> dict[str, Any]:
        return {"need_search": True, "title": f"{angle}{colon}{subject}", "description": description,
                "step_type": "research", "execution_res": None}

    if zh:
        title = f"{subject}：研究报告"
        angles = [research(chinese, f"研究{subject}的{chinese}，并注明来源。") for _, chinese, _ in ANGLES]
        angles[0]["description"] = f"收集关于{subject}的权威资料：定义、发展历程、现状和主要参与者。"
        angles[1]["description"] = "寻找量化数据、案例研究、专家观点和反方论据。"
        stats = {"need_search": False, "title": f"研究发现的统计汇总：{subject}",
                 "description": "使用 Python 对前面步骤收集到的发现计算简单统计"
                                "（发现数量、词数、不同来源数、高频词），并以表格形式呈现。",
                 "step_type": "processing", "execution_res": None}
        if bg_titles:
            angles[0]["description"] += f"可从背景调查的资料入手，例如“{bg_titles[0]}”。"
    else:
        title = f"{subject}?" if question else f"{subject}: A Research Report"
        about = f'the question "{subject}?"' if question else _mid(subject)
        angles = [research(english, f"Research the {english.lower()} for {about}, with sources.")
                  for english, _, _ in ANGLES]
        angles[0]["description"] = (f"Gather authoritative sources on {about}: definitions, history, "
                                    "current state and the main actors.")
        angles[1]["description"] = ("Find quantitative data, case studies, expert opinions and counter-arguments, "
                                    "noting where sources disagree.")
        stats = {"need_search": False, "title": f"Statistical summary of the findings: {subject}",
                 "description": "Use Python to compute simple statistics over the findings gathered in the "
                                "previous steps (number of findings, word count, distinct sources, most "
                                "frequent terms) and present them as a table.",
                 "step_type": "processing", "execution_res": None}
        if bg_titles:
            angles[0]["description"] += f' Start from the background sources, e.g. "{bg_titles[0]}".'
    # A plan longer than the angles revisits them, numbered, so benches can ask for 12 steps or more.
    angles += [{**step, "title": f"{step['title']} ({2 + i // len(ANGLES)})"}
               for i, step in enumerate(angles * (ANGLE_ROUNDS - 1))]
    slots = n - 1 if n >= 3 else n
    if feedback:
        extra = [research(_focus(text, zh), f"按审阅者的要求：{text}" if zh else
                          f"Address the reviewer's request: {text}") for text in feedback]
        researched = extra[-1:] if slots == 1 else [angles[0], *extra[-(slots - 1):]]
        title += "（修订版）" if zh else " (revised)"
    else:
        researched = angles[:slots]
    if n >= 3:
        stats["depends_on"] = list(range(len(researched)))  # it summarises every research step
        steps = [*researched, stats]
    else:
        steps = researched
    if observed:
        thought = ("已完成的步骤收集到了足够的信息，可以撰写报告。" if zh else
                   "The completed steps gathered enough information to write the report.")
    elif zh:
        thought = f"用户想了解{subject}。我将分 {len(steps)} 步进行研究。"
    else:
        wants = f"The user asks: {subject}?" if question else f"The user wants to understand {_mid(subject)}."
        thought = (f"{wants} I will research it in {len(steps)} "
                   f"step{'s' if len(steps) > 1 else ''}: "
                   + "; ".join(s["title"] for s in steps) + ".")
    if background:
        thought += (f"背景调查找到了 {len(background)} 条资料。" if zh else
                    f" The background investigation found {len(background)} source(s).")
    if feedback:
        thought += (f"根据审阅意见修订了计划：“{feedback[-1]}”。" if zh else
                    f' Revised the plan following the feedback: "{feedback[-1]}".')
    return {"locale": locale, "has_enough_context": observed, "thought": thought, "title": title,
            "steps": steps}


def _focus(feedback: str, zh: bool) -> str:
    """What an edit request asks to research, as a step's angle: "add a step on running costs"
    becomes "Running costs", so the request's wording never becomes a step title."""
    text = re.sub(r"\s+", " ", feedback).strip().rstrip(".!?。！？")
    focus = (ZH_FOCUS_RE.sub("", text) if zh else FOCUS_RE.sub("", text, count=1)).strip() or text
    focus = _shorten(focus, 60)
    return focus[:1].upper() + focus[1:]


def planner(body: dict[str, Any]) -> ScriptedReply:
    """The plan as a JSON object, as ``response_format: json_object`` promises the caller."""
    plan = _plan(body)
    return ScriptedReply(content=json.dumps(plan, ensure_ascii=False, indent=2))


# ---------------------------------------------------------------- researcher, coder, analyst


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
    users = _users(messages)
    text = text_of(users[0].get("content")) if users else ""
    current_at = text.rfind("# Current Step")
    current = text[current_at:] if current_at >= 0 else text
    head = text[:current_at] if current_at >= 0 else ""
    completed_at = head.find("# Completed Steps")
    completed = head[completed_at + len("# Completed Steps"):].strip() if completed_at >= 0 else ""
    topic = _section(head[:completed_at] if completed_at >= 0 else head, "Research Topic")
    title = _section(current, "Title", "##") or first_sentence(text) or "the current step"
    locale = _section(current, "Locale", "##").split()[:1]
    return StepInput(topic=topic, completed=completed, title=title,
                     description=_section(current, "Description", "##"),
                     locale=locale[0] if locale else _locale(messages, text))


def _results_of(content: str) -> list[dict[str, str]]:
    """Search/crawl results in whatever shape the tool message has (list, dict, or text)."""
    if NO_RESULTS_RE.match(content):
        return []
    try:
        data = json.loads(content)
    except ValueError:
        page = CRAWLED_RE.match(content)  # a crawled page, as workflows/search_format.py lays it out
        if page:
            return [{"title": page["title"], "url": page["url"], "content": content[page.end():]}]
        return [{"title": _shorten(first_sentence(content), 80) or "Tool output", "url": "", "content": content}]
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
            results.append({"title": _shorten(first_sentence(item), 80) or "Result", "url": "", "content": item})
    return results


BULLET_TITLE_RE = re.compile(r"(?m)^[-*]\s+\*\*[^*\n]+\*\*[:：]\s*")  # "- **Source title**: "
# The statistics table's labels in Chinese (the code prints English labels, which the coder parses).
ZH_TABLE_LABELS = {"Metric": "指标", "Value": "数值", "Findings": "发现数", "Words": "词数",
                   "Distinct URLs": "不同来源数", "Top words": "高频词"}
CRAWLED_RE = re.compile(r"# (?P<title>[^\n]+)\n\nSource: (?P<url>\S+)\n\n")
NO_RESULTS_RE = re.compile(r"\s*No results found for ")  # workflows/search_format.py's words


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
    tools, outputs = _tool_names(body), _tool_messages(messages)
    cues, query = _angle_and_query(step.title)
    if not outputs:
        for name in ("local_search_tool", "web_search", "web_search_tool", "tavily_search"):
            if name in tools:
                properties = (tools[name].get("parameters") or {}).get("properties") or {}
                argument = "query" if "query" in properties or not properties else next(iter(properties))
                first = _call(messages, name, {argument: query})
                return ScriptedReply(tool_calls=(first, *_mcp_calls(tools, query, start=2)))
    zh = _zh(step.locale)
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
            bullets.append(f"- **{_plain(r['title'])}**{'：' if zh else ': '}{('' if zh else ' ').join(picked)}")
    if errors:
        note = "- 注意：部分工具调用失败：" if zh else "- Note: some tool calls failed: "
        bullets.append(note + errors[0])
    best = first_sentence(BULLET_TITLE_RE.sub("", bullets[0])) if bullets else ""
    conclusion = (f"共有 {len(refs)} 条资料涉及“{step.title}”。{best}" if zh else
                  f"{len(refs)} source(s) address {_mid(step.title)}. {best}").strip()
    references = "\n\n".join(f"- [{_plain(r['title'])}]({r['url']})" for r in refs) or (
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
    outputs = _tool_messages(messages)
    if not outputs and "python_repl_tool" in _tool_names(body):
        code = STATS_CODE.format(text=_string_literal(step.completed))
        return ScriptedReply(tool_calls=(_call(messages, "python_repl_tool", {"code": code}),))
    zh = _zh(step.locale)
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
    zh = _zh(step.locale)
    none = "尚无已完成步骤的发现可供分析。" if zh else "No findings from completed steps are available yet."
    bullets = [f"- {_key_point(b) or _shorten(_plain(b), 200)}" for b in blocks] or [f"- {none}"]
    conclusion = (f"综合 {len(blocks)} 条发现，以上要点回答了“{step.title}”。" if zh else
                  f"Taken together, the {len(blocks)} finding(s) above address \"{step.title}\".")
    return ScriptedReply(content=_answer(step, zh, ("analysis", "\n".join(bullets)), ("conclusion", conclusion)))


# ---------------------------------------------------------------- reporter


def _key_point(observation: str) -> str:
    """An observation's most telling sentence: its conclusion if it has one, else its first."""
    for key in ("findings", "analysis", "interpretation", "conclusion", "result"):
        body = BULLET_TITLE_RE.sub("", _any_section(observation, key))
        found = first_sentence(body)
        if found:
            return found
    return first_sentence(observation)


def _observation_title(observation: str, index: int, zh: bool) -> str:
    """A subsection heading for an observation: its step title if it has one."""
    problem = _any_section(observation, "problem")
    match = re.match(r"\*\*(.+?)\*\*", problem)
    if match:
        return match.group(1).strip()
    heading = re.search(r"(?m)^#{1,3} (.+)$", observation)
    return heading.group(1).strip() if heading else (f"观察 {index}" if zh else f"Observation {index}")


def reporter(body: dict[str, Any]) -> ScriptedReply:
    """DeerFlow's report in the requested style; every observation is reproduced so no finding is lost."""
    messages = body.get("messages") or []
    users = [text_of(m.get("content")) for m in _users(messages)]
    request = users[0] if users else ""
    title = _section(request, "Task", "##") or first_sentence(request) or "Research Report"
    observations = [u[len(OBSERVATION_PREFIX):].strip() for u in users if u.startswith(OBSERVATION_PREFIX)]
    observations += [text_of(m.get("content")).strip() for m in _users(messages)
                     if m.get("name") == "observation" and not text_of(m.get("content")).startswith(
                         OBSERVATION_PREFIX)]
    zh = _zh(_locale(messages, title))
    style_match = STYLE_RE.search(system_text(messages))
    links: dict[str, str] = {}
    for observation in observations:
        for text, url in LINK_RE.findall(observation):
            links.setdefault(url, text)
    points = [_key_point(o) or _shorten(_plain(o), 200) for o in observations]
    parts = ReportParts(
        title=title, thought=_section(request, "Description", "##"), points=list(dict.fromkeys(p for p in points if p)),
        sections=[(_observation_title(o, i, zh), re.sub(r"(?m)^(#{1,4}) ", r"\1## ", o))
                  for i, o in enumerate(observations, 1)],
        rows=[(p, len(set(URL_RE.findall(o)))) for o, p in zip(observations, points, strict=True)],
        links=links, zh=zh,
    )
    return ScriptedReply(content=render_report(style_match.group(1).lower() if style_match else "academic", parts))


# ---------------------------------------------------------------- dispatch


# What each report style's enhanced prompt asks for (the enhancer's prompt names the style).
ENHANCER_FOCUS = {
    "academic": "a rigorous, well-cited analysis of the evidence, its methods and its limits",
    "popular_science": "a clear explanation for curious non-specialists, with concrete examples",
    "news": "the latest developments, who is involved and why they matter now",
    "social_media": "a short, engaging summary of the key facts people should know",
    "strategic_investment": "the market, the main players, growth drivers, risks and the outlook",
}


def prompt_enhancer(body: dict[str, Any]) -> ScriptedReply:
    """DeerFlow's prompt enhancer: the original prompt, made specific, in the tags it asks for."""
    messages = body.get("messages") or []
    style = STYLE_RE.search(system_text(messages))
    user = text_of(_users(messages)[-1].get("content")) if _users(messages) else ""
    original, _, context = user.removeprefix("Original prompt:").partition("Additional context:")
    topic = " ".join(original.split()).rstrip("?.! ") or "the topic"
    focus = ENHANCER_FOCUS.get(style.group(1) if style else "", ENHANCER_FOCUS["academic"])
    extra = f" Take into account: {_shorten(' '.join(context.split()), 300)}." if context.strip() else ""
    text = (f"Research {topic}. Cover the background, the current state and the main open questions, "
            f"compare the leading approaches or positions with evidence from reliable sources, and "
            f"give {focus}.{extra}")
    return ScriptedReply(content=f"<enhanced_prompt>\n{text}\n</enhanced_prompt>")


def plain_chat(body: dict[str, Any]) -> ScriptedReply:
    """No DeerFlow agent recognised: a short, honest answer (summarising tool output if there is any)."""
    messages = body.get("messages") or []
    outputs = _tool_messages(messages)
    users = [text_of(m.get("content")) for m in _users(messages)]
    if outputs:
        text = "Summary of the tool results so far:\n\n" + "\n".join(
            f"- {first_sentence(o) or _shorten(o, 200)}" for o in outputs)
    else:
        asked = _shorten(users[-1], 200) if users else ""
        text = ("This is DeerFlow's offline demo model; it can only play DeerFlow's agents. "
                f'You said: "{asked}"')
    return ScriptedReply(content=text)


def _content(body: dict[str, Any], agent: Callable[[str, str], str]) -> ScriptedReply:
    """A content flow's agent (offline/content_agents.py): system text and the last user message in, text out."""
    messages = body.get("messages") or []
    users = _users(messages)
    return ScriptedReply(content=agent(system_text(messages), text_of(users[-1].get("content")) if users else ""))


AGENTS: dict[str, Callable[[dict[str, Any]], ScriptedReply]] = {
    "coordinator": coordinator, "planner": planner, "researcher": researcher, "coder": coder,
    "analyst": analyst, "reporter": reporter, "prompt_enhancer": prompt_enhancer,
    "report_judge": lambda body: _content(body, content_agents.report_judge),
    "prose_writer": lambda body: _content(body, content_agents.prose_writer),
    "presentation_composer": lambda body: _content(body, content_agents.ppt_composer),
    "podcast_script_writer": lambda body: _content(body, content_agents.podcast_script_writer),
}


def respond(body: dict[str, Any], agent: str | None = None) -> ScriptedReply:
    """The scripted reply to one chat-completions request body, by ``agent`` if given (else detected)."""
    agent = agent or detect_agent(body)
    reply = AGENTS.get(agent or "", plain_chat)(body)
    return ScriptedReply(content=reply.content, tool_calls=reply.tool_calls, agent=agent)
