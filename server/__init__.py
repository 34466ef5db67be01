"""The web front end: a DeerFlow-compatible API server, our own research page, and the run feed."""
