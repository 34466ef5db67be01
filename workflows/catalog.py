"""Every workflow type this product runs: what the main queue's worker registers and what the
replayer (``starter.py replay``, the replay corpus) must know, so any run's history replays."""

from __future__ import annotations

from workflows.content.mcp_checker import MCP_CHECK_WORKFLOW, McpServerCheckWorkflow
from workflows.content.podcast_writer import PodcastWorkflow
from workflows.content.prompt_enhancer import PromptEnhancerWorkflow
from workflows.content.prose_writer import ProseWriterWorkflow
from workflows.content.report_evaluator import ReportEvaluationWorkflow
from workflows.content.slide_composer import SlideComposerWorkflow
from workflows.content.speech import SPEECH_WORKFLOW, SpeechWorkflow
from workflows.contracts.enhance import ENHANCER_WORKFLOW
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW
from workflows.contracts.podcast import PODCAST_WORKFLOW
from workflows.contracts.prose import PROSE_WORKFLOW
from workflows.contracts.research import WORKFLOW_TYPE
from workflows.contracts.slides import SLIDES_WORKFLOW
from workflows.research.workflow import DeepResearchWorkflow

WORKFLOWS = (DeepResearchWorkflow, PromptEnhancerWorkflow, ReportEvaluationWorkflow, ProseWriterWorkflow,
             McpServerCheckWorkflow, SlideComposerWorkflow, PodcastWorkflow, SpeechWorkflow)
# Their type names, as runs record them. The research workflow is the dynamic one (any other name
# would run it too), so a fleet replay selects runs by these names, never replaying a stranger's.
WORKFLOW_TYPES = (WORKFLOW_TYPE, ENHANCER_WORKFLOW, EVALUATOR_WORKFLOW, PROSE_WORKFLOW, MCP_CHECK_WORKFLOW,
                  SLIDES_WORKFLOW, PODCAST_WORKFLOW, SPEECH_WORKFLOW)
