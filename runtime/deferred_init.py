"""Packages whose ``__init__`` a worker runs only when something first asks one of them for a name
(issue #45: a worker's start).

Why: importing a submodule runs its package's ``__init__`` first, and the packages named here,
which the model queue's preload reaches, import far more there than a worker uses:
- ``openai.types``: its ``__init__`` imports the schema of every endpoint of OpenAI's API (evals,
  graders, files, vector stores...). The SDK and langchain-openai import the few modules they need
  (``openai.types.chat``, ``openai.types.responses``) by their own names.
- ``langsmith.types``: langchain's tracers import ``langsmith.run_trees``, which imports one small
  module of it (a ``Literal`` of field names); its ``__init__`` imports every pydantic schema of
  LangSmith's REST API, which only LangSmith's client reads, when an operator turns tracing on.
- ``langchain_openai`` and its ``chat_models``: their ``__init__`` import Azure's chat model, the
  completion models (and PyYAML with them), the embeddings and the tools, beside the one class the
  model activities use, which they import from its own module (``chat_models.base``).

The first two were 0.42 s of the 1.94 s of CPU that importing the model libraries and warming the
clients cost here (best of five); the last two 0.15 s more (medians of ten, alternating). A package
named here is imported as an empty module that has its ``__path__`` (its submodules import as
usual) and runs its real ``__init__`` on the first name it does not have yet: ``from openai.types
import Completion`` still works, at the cost it always had, when it is first asked. A whole offline
research run (plan, tools, streaming, report) asked for none.
Installed by the worker alone (``worker.py``), before its imports, like its optional extras.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import threading
import types
from collections.abc import Sequence
from typing import Any

DEFERRED_PACKAGES = ("openai.types", "langsmith.types", "langchain_openai", "langchain_openai.chat_models")
_running_init = threading.RLock()


class _InitOnFirstUse(types.ModuleType):
    """A package whose ``__init__`` has not run: it runs, once, on the first name not found.

    A second thread that asks meanwhile waits for the first. Not guarded: a thread that asks while
    it holds the import lock of one of the package's submodules, which the ``__init__`` running in
    another thread imports, would wait on that thread while it waits on the lock, as two threads
    importing each other's modules can in any program. No code a worker runs asks (above)."""

    def __getattr__(self, name: str) -> Any:
        with _running_init:  # the preload imports in a thread: a second asker waits for the first
            if type(self) is _InitOnFirstUse:
                loader = self.__spec__.loader
                assert isinstance(loader, _DeferredInitLoader)
                self.__class__ = types.ModuleType
                self.__spec__.loader = self.__loader__ = loader.package_loader
                loader.package_loader.exec_module(self)
        return types.ModuleType.__getattribute__(self, name)


class _DeferredInitLoader(importlib.abc.Loader):
    """Makes the package's module as its own loader would, and leaves its ``__init__`` for later."""

    def __init__(self, package_loader: importlib.abc.Loader) -> None:
        self.package_loader = package_loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.package_loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = _InitOnFirstUse


class DeferredInitFinder(importlib.abc.MetaPathFinder):
    """Finds the named packages where the path finder does, with the deferring loader."""

    def __init__(self, names: Sequence[str] = DEFERRED_PACKAGES) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return spec  # not a package here: imported as it is
        spec.loader = _DeferredInitLoader(spec.loader)
        return spec
