"""The coder's Python sandbox: ``bootstrap`` runs in the child, everything else in the worker.

``bootstrap.py`` is the only module that runs next to model-written code, and it imports the
standard library only; the activity (``activity.py``) and its helpers never run there.
"""
