"""Every workflow type this product runs: what the main queue's worker registers and what the
replayer (``starter.py replay``, the replay corpus) must know, so any run's history replays."""

from __future__ import annotations

from workflows.enhance import ENHANCER_WORKFLOW
from workflows.evaluation import EVALUATOR_WORKFLOW
from workflows.mcp_checker import MCP_CHECK_WORKFLOW, McpServerCheckWorkflow
from workflows.models import WORKFLOW_TYPE
from workflows.podcast import PODCAST_WORKFLOW
from workflows.podcast_writer import PodcastWorkflow
from workflows.prompt_enhancer import PromptEnhancerWorkflow
from workflows.prose import PROSE_WORKFLOW
from workflows.prose_writer import ProseWriterWorkflow
from workflows.report_evaluator import ReportEvaluationWorkflow
from workflows.research import DeepResearchWorkflow
from workflows.slide_composer import SlideComposerWorkflow
from workflows.slides import SLIDES_WORKFLOW
from workflows.speech import SPEECH_WORKFLOW, SpeechWorkflow

WORKFLOWS = (DeepResearchWorkflow, PromptEnhancerWorkflow, ReportEvaluationWorkflow, ProseWriterWorkflow,
             McpServerCheckWorkflow, SlideComposerWorkflow, PodcastWorkflow, SpeechWorkflow)
# Their type names, as runs record them. The research workflow is the dynamic one (any other name
# would run it too), so a fleet replay selects runs by these names, never replaying a stranger's.
WORKFLOW_TYPES = (WORKFLOW_TYPE, ENHANCER_WORKFLOW, EVALUATOR_WORKFLOW, PROSE_WORKFLOW, MCP_CHECK_WORKFLOW,
                  SLIDES_WORKFLOW, PODCAST_WORKFLOW, SPEECH_WORKFLOW)
