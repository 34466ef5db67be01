"""The small workflows beside research: the report's buttons (evaluation, prose, slides, podcast, speech),
the prompt enhancer and DeerFlow's MCP server check. Each one's contracts live in ``workflows/contracts/``."""
