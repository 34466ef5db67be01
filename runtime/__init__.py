"""What every Temporal client shares: worker, CLI, replayer and any server.

``connection`` builds clients from Temporal's environment configuration, ``converter`` is the one
data converter (pydantic, large payloads in the blob store), ``search_attributes`` registers the
attributes runs upsert, ``embedded`` runs the bundled dev server, and ``shutdown`` exits cleanly
around an SDK finalisation crash. Nothing here knows about the CLI.
"""
