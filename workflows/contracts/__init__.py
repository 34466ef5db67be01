"""The contracts: every value that crosses a boundary (client -> workflow, workflow -> activity, workflow
-> client), one module per concern, so a client imports what it speaks and nothing of the workflows' logic.
Their field names and JSON shapes are the public API: clients, stored histories and DeerFlow's UI read them.

A research run's: ``research.py`` (its names, request and result), ``plan.py``, ``status.py``,
``run_config.py``, ``budget.py``, ``usage.py``, ``decisions.py`` (who decided), ``fork_point.py``,
``mcp_choices.py``; the activities': ``chat.py``, ``tool_activities.py``; the content flows': ``evaluation.py``
(with ``report_metrics.py``), ``prose.py``, ``slides.py``, ``podcast.py``, ``enhance.py``, ``artefact.py``.
Words on the wire: ``report_style.py``, ``json_tool_protocol.py`` (JSON tool mode), ``mcp_naming.py`` (MCP
tools' names), ``undecodable.py`` (a message the worker could not decode). ``base.py`` is the models' pydantic
base (each validator built when first used).
"""
