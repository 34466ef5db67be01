"""Every workflow type this product runs: what the main queue's worker registers and what the
replayer (``starter.py replay``, the replay corpus) must know, so any run's history replays."""

from __future__ import annotations

from workflows.prompt_enhancer import PromptEnhancerWorkflow
from workflows.research import DeepResearchWorkflow

WORKFLOWS = (DeepResearchWorkflow, PromptEnhancerWorkflow)
