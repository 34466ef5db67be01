"""The content wing: activities behind a report's buttons that write files (slides, speech)."""
