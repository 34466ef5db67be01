"""``DeepResearchWorkflow`` (``workflow.py``) and its stages: coordinator, planner and its review,
the step loop with its agents and tools, budgets, the reporter, forks, and the run's state and status."""
