"""``starter.py evaluate|slides|podcast ID``: the content flows over a finished run's report.

Each command reads the finished run's report, starts the same small workflow the web endpoint
starts, and prints or writes what it answers.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from cli.actor import cli_actor
from cli.terminal import printable
from config.settings import Settings
from runtime import artefacts
from runtime.front_door import CliError, connect
from runtime.run_memo import flow_memo
from workflows.calls.errors import failure_message
from workflows.contracts.decisions import Actor
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest, EvaluationResult
from workflows.contracts.podcast import PODCAST_WORKFLOW, PodcastRequest, PodcastResult, script_text
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchResult
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult

R = TypeVar("R", bound=BaseModel)


async def finished_report(client: Client, run_id: str) -> ResearchResult:
    """The report of a run that finished with one; anything else is a one-line error."""
    handle = client.get_workflow_handle(run_id, result_type=ResearchResult)
    try:
        description = await handle.describe()
    except Exception as error:
        raise CliError(f"No research run with ID {run_id!r}.") from error
    if description.workflow_type != WORKFLOW_TYPE:  # a content flow's run: its result is no report
        raise CliError(printable(f"{run_id} is not a research run (it is a {description.workflow_type}): "
                                 "only a research run has a report to work on."))
    if description.status != WorkflowExecutionStatus.COMPLETED:
        raise CliError(f"Run {run_id} has no finished report (it is {description.status.name.lower()}).")
    try:
        result = await handle.result()
    except WorkflowFailureError as error:
        raise CliError(f"Run {run_id} failed: {failure_message(error.cause)}") from error
    if result.outcome is not Outcome.REPORT or not result.report.strip():
        raise CliError(f"Run {run_id} ended without a report ({result.outcome.value}).")
    return result


async def run_flow(client: Client, workflow: str, request: BaseModel, result_type: type[R], label: str,
                   started_by: Actor) -> R:
    """Run the flow to its result; its memo names who started it (``starter.py costs`` reads it)."""
    handle = await client.start_workflow(workflow, request, id=f"{label}-{uuid.uuid4().hex[:16]}",
                                         task_queue=TASK_QUEUE, result_type=result_type,
                                         static_summary=f"{label} (CLI)", memo=flow_memo(started_by))
    try:
        return await handle.result()
    except WorkflowFailureError as error:
        raise CliError(printable(f"The {label} failed: {failure_message(error.cause)}")) from error


def evaluation_text(result: EvaluationResult) -> str:
    metrics = result.metrics
    lines = [f"Grade {result.grade} ({result.score}/10)",
             f"Words {metrics.word_count} · citations {metrics.citation_count} · unique sources "
             f"{metrics.unique_sources} · images {metrics.image_count}",
             f"Sections {metrics.section_count} found ({', '.join(metrics.sections_found) or 'none'}), "
             f"coverage {metrics.section_coverage_score:.0%}",
             f"Missing: {', '.join(metrics.sections_missing) or 'nothing'}"]
    if result.llm_evaluation is not None:
        judged = result.llm_evaluation
        lines.append("Model's scores: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in judged.scores.items()))
        lines += [f"{heading}: {'; '.join(items)}" for heading, items in
                  (("Strengths", judged.strengths), ("Weaknesses", judged.weaknesses),
                   ("Suggestions", judged.suggestions)) if items]
    return printable("\n".join(lines))


async def evaluate_command(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings)
    result = await finished_report(client, args.id)
    query: Any = result.plan.title if result.plan else ""
    request = EvaluateRequest(content=result.report, query=query, report_style=args.style, use_llm=args.llm)
    print(evaluation_text(await run_flow(client, EVALUATOR_WORKFLOW, request, EvaluationResult, "report-evaluation",
                                          cli_actor(args))))
    return 0


def _writable(output: str) -> Path:
    """The output path, refused before any work when it cannot be written."""
    path = Path(output)
    if path.is_dir() or not path.parent.resolve().is_dir():
        raise CliError(f"Cannot write to {output}: not a file in an existing folder.")
    return path


async def slides_command(args: argparse.Namespace, settings: Settings) -> int:
    path = _writable(args.output)
    client = await connect(settings)
    result = await finished_report(client, args.id)
    request = SlidesRequest(content=result.report, locale=result.locale)
    deck = await run_flow(client, SLIDES_WORKFLOW, request, SlidesResult, "slide-composer", cli_actor(args))
    path.write_bytes(await artefacts.get(settings, deck.pptx))
    print(printable(f"Wrote {path} ({len(deck.deck.slides) + 1} slides: {deck.deck.title})"))
    return 0


async def podcast_command(args: argparse.Namespace, settings: Settings) -> int:
    """The MP3; without a voice, one line saying so, and the script beside the requested file."""
    path = _writable(args.output)
    client = await connect(settings)
    result = await finished_report(client, args.id)
    podcast = await run_flow(client, PODCAST_WORKFLOW, PodcastRequest(content=result.report), PodcastResult,
                             "podcast", cli_actor(args))
    if podcast.audio is None:
        script = path.with_suffix(".txt")
        script.write_text(script_text(podcast.script) + "\n", encoding="utf-8")
        raise CliError(printable(f"{podcast.note} Script written to {script}."))
    path.write_bytes(await artefacts.get(settings, podcast.audio))
    print(printable(f"Wrote {path} ({len(podcast.script.lines)} lines spoken)"))
    return 0
