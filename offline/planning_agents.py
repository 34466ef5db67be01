"""The coordinator and the planner, scripted: small talk, clarifying questions, the hand-off, the plan.

The plan is built from the topic, the background investigation's results, the reviewer's edit
requests and the observations of completed steps, in the request's language; its research steps
follow :data:`ANGLES`, which the researcher (``offline.step_agents``) reads back from step titles.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from offline.agent_text import (
    ScriptedReply,
    is_chinese,
    locale_of,
    mid_sentence,
    next_call,
    offered_tools,
    shorten,
    system_text,
    text_of,
    user_messages,
    zh_wanted,
)
from offline.plan_edits import Revision, angle_of, focuses, limit_note, revise
from workflows.research.messages import ASKED

MAX_STEPS_RE = re.compile(r"at most\s+(\d+)\s+steps", re.IGNORECASE)
BACKGROUND_PREFIX = "background investigation results of user query:"
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
    return ScriptedReply(tool_calls=(next_call(messages, "ask_clarification", {"question": question}),))


def coordinator(body: dict[str, Any]) -> ScriptedReply:
    """Small talk gets a direct answer; a vague request gets a clarifying question when the
    ``ask_clarification`` tool is offered; anything else is handed to the planner with a locale."""
    messages = body.get("messages") or []
    users = [text_of(m.get("content")).strip() for m in user_messages(messages) if m.get("name") != "system"]
    last = users[-1] if users else ""
    kind = _small_talk_kind(last)
    if kind is not None or not last:
        lang = "zh" if is_chinese(last) else "en"
        return ScriptedReply(content=SMALL_TALK_REPLIES[(kind or "greeting", lang)])
    said = [u for u in users if u and _small_talk_kind(u) is None]
    # The question, and the answers to clarifying questions after it, as the planner's titles read.
    topic = f"{said[0]} ({'; '.join(said[1:])})" if len(said) > 1 else "".join(said)
    locale = "zh-CN" if is_chinese(topic) else "en-US"
    if "ask_clarification" in offered_tools(body):
        clarifying = _clarifying_question(messages, topic)
        if clarifying is not None:
            return clarifying
    if "handoff_to_planner" not in offered_tools(body):
        return ScriptedReply(content=f"Let me research this for you: {topic}")
    call = next_call(messages, "handoff_to_planner", {"research_topic": topic, "locale": locale})
    return ScriptedReply(tool_calls=(call,))


# ---------------------------------------------------------------- planner


def subject_of(topic: str) -> str:
    """The topic as a noun-ish phrase for titles: request verbs and end punctuation dropped, the
    whole question kept, and the answers to clarifying questions after it in parentheses."""
    question, answers = clarified_parts(topic)
    subject = _request_subject(question) or re.sub(r"\s+", " ", topic).strip()
    qualifiers = [_whole_sentences(answer) for answer in answers]
    qualifiers = [q for q in qualifiers if q]
    return f"{subject} ({'; '.join(qualifiers)})" if qualifiers else subject


def _request_subject(question: str) -> str:
    text = re.sub(r"\s+", " ", question).strip()
    text = re.sub(r"^(请问|请|帮我|麻烦)?(研究一下|研究|调研|分析一下|分析|介绍一下|介绍)?(什么是)?", "", text)
    text = re.sub(
        r"^(please\s+)?((can|could|would) you\s+)?(research|investigate|explain|describe|summari[sz]e|"
        r"analy[sz]e|tell me about|write a report (on|about)|give me an overview of|"
        r"i want to know about)\s+",
        "", text, flags=re.IGNORECASE,
    )
    text = re.sub(r"^(what|which|who)\s+(is|are|was|were)\s+(the\s+)?(?=\w+\s+\w+)", "", text,
                  flags=re.IGNORECASE)
    text = _whole_sentences(text)
    return text[:1].upper() + text[1:]


# A request longer than this (a pasted brief) gives its titles only its first whole sentences; a
# question of any usual length is kept whole, so no clause of it is lost from titles and searches.
SUBJECT_CHARS = 400
SENTENCE_RE = re.compile(r"[^.!?。！？]+(?:[.!?。！？]+|$)")


def _whole_sentences(text: str) -> str:
    """``text`` without its end punctuation; past :data:`SUBJECT_CHARS`, its leading whole sentences
    that fit (at least the first, cut at a word only if that one alone is a page long)."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > SUBJECT_CHARS:
        kept = ""
        for sentence in SENTENCE_RE.findall(text):
            if kept and len(kept) + len(sentence) > SUBJECT_CHARS:
                break
            kept += sentence
        text = shorten(kept, 2 * SUBJECT_CHARS)
    return text.rstrip("?.!？。！ ")


# The planner's task after clarifying questions (workflows.research.messages.clarified_task): the question,
# then each question asked and its answer.
ASKED_RE = re.compile(r"\s*{}.*?{}(?=\n\n|\Z)\s*".format(*map(re.escape, ASKED.split("{}"))), re.DOTALL)


def clarified_parts(topic: str) -> tuple[str, list[str]]:
    """(the person's question, their answers to clarifying questions) of a planner's task."""
    question, *answers = ASKED_RE.split(topic)
    return question, [answer for answer in answers if answer.strip()]


QUESTION_RE = re.compile(r"^(how|why|when|where|who|which|what|should|can|could|is|are|does|do|did|will|"
                         r"would)\b", re.IGNORECASE)



@dataclass
class PlanRequest:
    """What the planner's messages say: the topic, background results, edit requests, observations."""

    topic: str = ""
    observed: bool = False  # completed steps were reported: the plan says there is enough context
    background: list[dict[str, Any]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)


def read_plan_request(messages: list[dict[str, Any]]) -> PlanRequest:
    """The planner's inputs from its user messages; a previous plan (assistant) is rebuilt from the
    topic, so the same request always gives the same plan."""
    request = PlanRequest()
    for message in messages:
        role, name = message.get("role"), message.get("name")
        content = text_of(message.get("content")).strip()
        if role != "user":
            continue
        if name == "background_investigation" or content.lower().startswith(BACKGROUND_PREFIX):
            prefixed = content.lower().startswith(BACKGROUND_PREFIX)
            raw = content[len(BACKGROUND_PREFIX):] if prefixed else content
            try:
                parsed = json.loads(raw.strip())
            except ValueError:
                parsed = []
            request.background = [r for r in parsed if isinstance(r, dict)] if isinstance(parsed, list) else []
        elif name == "feedback" or content.startswith("[EDIT_PLAN]"):
            text = re.sub(r"^\[EDIT_PLAN\]\s*", "", content)
            if text:
                request.feedback.append(text)
        elif name == "observation":
            request.observed = True
        elif not request.topic:
            request.topic = content
    return request


def _research_step(angle: str, subject: str, zh: bool, description: str) -> dict[str, Any]:
    colon = "：" if zh else ": "
    return {"need_search": True, "title": f"{angle}{colon}{subject}", "description": description,
            "step_type": "research", "execution_res": None}


def _angle_steps(subject: str, zh: bool, question: bool,
                 bg_titles: list[str]) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(the plan's title, one research step per angle, the statistics step), in the plan's language."""
    if zh:
        title = f"{subject}：研究报告"
        angles = [_research_step(chinese, subject, zh, f"研究{subject}的{chinese}，并注明来源。")
                  for _, chinese, _ in ANGLES]
        angles[0]["description"] = f"收集关于{subject}的权威资料：定义、发展历程、现状和主要参与者。"
        angles[1]["description"] = "寻找量化数据、案例研究、专家观点和反方论据。"
        stats = {"need_search": False, "title": f"研究发现的统计汇总：{subject}",
                 "description": "使用 Python 对前面步骤收集到的发现计算简单统计"
                                "（发现数量、词数、不同来源数、高频词），并以表格形式呈现。",
                 "step_type": "processing", "execution_res": None}
        if bg_titles:
            angles[0]["description"] += f"可从背景调查的资料入手，例如“{bg_titles[0]}”。"
        return title, angles, stats
    title = f"{subject}?" if question else f"{subject}: A Research Report"
    about = f'the question "{subject}?"' if question else mid_sentence(subject)
    angles = [_research_step(english, subject, zh, f"Research the {english.lower()} for {about}, with sources.")
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
    return title, angles, stats


def _thought(request: PlanRequest, subject: str, zh: bool, question: bool, steps: list[dict[str, Any]]) -> str:
    """The plan's ``thought``: what the user wants and how the steps get there."""
    if request.observed:
        thought = ("已完成的步骤收集到了足够的信息，可以撰写报告。" if zh else
                   "The completed steps gathered enough information to write the report.")
    elif zh:
        thought = f"用户想了解{subject}。我将分 {len(steps)} 步进行研究。"
    else:
        wants = f"The user asks: {subject}?" if question else f"The user wants to understand {mid_sentence(subject)}."
        thought = (f"{wants} I will research it in {len(steps)} "
                   f"step{'s' if len(steps) > 1 else ''}: "
                   + "; ".join(mid_sentence(angle_of(s)) for s in steps) + ".")
    if request.background:
        thought += (f"背景调查找到了 {len(request.background)} 条资料。" if zh else
                    f" The background investigation found {len(request.background)} source(s).")
    if request.feedback:
        thought += (f"根据审阅意见修订了计划：“{request.feedback[-1]}”。" if zh else
                    f' Revised the plan following the feedback: "{request.feedback[-1]}".')
    return thought


def _plan(body: dict[str, Any]) -> dict[str, Any]:
    """DeerFlow's plan object, built from topic, background results, feedback and observations."""
    messages = body.get("messages") or []
    request = read_plan_request(messages)
    locale = locale_of(messages, request.topic)
    zh = zh_wanted(locale)
    limit = MAX_STEPS_RE.search(system_text(messages))
    n = max(1, min(1 + ANGLE_ROUNDS * len(ANGLES), int(limit.group(1)) if limit else DEFAULT_MAX_STEPS))
    subject = subject_of(request.topic or "the topic")
    question = bool(QUESTION_RE.match(subject))
    bg_titles = [shorten(str(r.get("title", "")), 60) for r in request.background if r.get("title")]
    title, angles, stats = _angle_steps(subject, zh, question, bg_titles)
    # A plan longer than the angles revisits them, numbered, so benches can ask for 12 steps or more.
    angles += [{**step, "title": f"{step['title']} ({2 + i // len(ANGLES)})"}
               for i, step in enumerate(angles * (ANGLE_ROUNDS - 1))]
    slots = n - 1 if n >= 3 else n
    revision = Revision(steps=angles[:slots])
    if request.feedback:
        requested = [_research_step(focus, subject, zh, f"按审阅者的要求：研究{focus}，并注明来源。" if zh else
                                    f"As the reviewer asked: research {mid_sentence(focus)}, with sources.")
                     for focus in focuses(request.feedback, zh)]
        revision = revise(angles[:slots], requested, slots)  # the title stays: it names the report
    researched = revision.steps
    if n >= 3:
        stats["depends_on"] = list(range(len(researched)))  # it summarises every research step
        steps = [*researched, stats]
    else:
        steps = researched
    thought = _thought(request, subject, zh, question, steps) + limit_note(revision, n, zh)
    return {"locale": locale, "has_enough_context": request.observed, "thought": thought, "title": title,
            "steps": steps}


def planner(body: dict[str, Any]) -> ScriptedReply:
    """The plan as a JSON object, as ``response_format: json_object`` promises the caller."""
    plan = _plan(body)
    return ScriptedReply(content=json.dumps(plan, ensure_ascii=False, indent=2))
