"""What every Temporal client shares: worker, CLI, replayer and any server.

``connection`` builds clients from Temporal's environment configuration and ``front_door`` connects
the CLI and the API server (the embedded default); ``research_client`` is the research workflow's
typed contract; ``converter`` is the one data converter (pydantic, large payloads in the blob
store), with ``blob_gc`` and ``artefacts`` on the same stores; ``token_stream_format`` is what
workers and the API server say about token previews; ``search_attributes`` registers the
attributes runs upsert, ``embedded`` runs the bundled dev server (``embedded_keeper`` keeps it up
while the API server runs), ``whole_file`` replaces small shared files whole, ``stall_watchdog`` ends a
process whose event loop is stuck, and ``shutdown`` exits cleanly around an SDK finalisation crash.
Nothing here imports the CLI, the API server or worker code.
"""
