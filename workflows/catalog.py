"""Every workflow type this product runs: what the main queue's worker registers and what the
replayer (``starter.py replay``, the replay corpus) must know, so any run's history replays."""

from __future__ import annotations

from workflows.mcp_checker import McpServerCheckWorkflow
from workflows.podcast_writer import PodcastWorkflow
from workflows.prompt_enhancer import PromptEnhancerWorkflow
from workflows.prose_writer import ProseWriterWorkflow
from workflows.report_evaluator import ReportEvaluationWorkflow
from workflows.research import DeepResearchWorkflow
from workflows.slide_composer import SlideComposerWorkflow
from workflows.speech import SpeechWorkflow

WORKFLOWS = (DeepResearchWorkflow, PromptEnhancerWorkflow, ReportEvaluationWorkflow, ProseWriterWorkflow,
             McpServerCheckWorkflow, SlideComposerWorkflow, PodcastWorkflow, SpeechWorkflow)
