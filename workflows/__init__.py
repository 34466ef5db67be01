"""The workflows: what a run decides, never what it does (no I/O; deterministic and replayable).

In wings, each importing only those listed before it (research/ and content/ never each other):
``text/`` (pure, linear readings of text nobody vetted) · ``contracts/`` (every value that crosses a
boundary: requests, results, statuses, activity inputs, split by concern) · ``calls/`` (how workflow
code starts activities and decodes its inputs) · ``research/`` (``DeepResearchWorkflow`` and its stages)
· ``content/`` (the report's buttons and DeerFlow's small flows). ``catalog.py`` lists every workflow type.
"""
