"""The worker's plumbing: building the workers from Settings, the interceptors, the in-flight
journal and the reclaim of attempts a dead worker left. It sits above the activity wings and the
sandbox (it assembles them); nothing below imports it. Named ``hosting`` because ``worker.py`` is
the top-level entry point."""
