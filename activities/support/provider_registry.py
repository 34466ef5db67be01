"""A registry of named backends chosen by one setting: ``SEARCH_API`` for web search,
``RAG_PROVIDER`` for retrieval.

Why one class: both registries map a case-insensitive name to a factory taking the worker's
``Settings``, treat an empty setting as the default (compose passes unset variables as ""), and
answer an unknown name with a non-retryable configuration error that lists the names they know.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from temporalio.exceptions import ApplicationError

from config.settings import Settings

T = TypeVar("T")
Factory = Callable[[Settings], T]


class ProviderRegistry(Generic[T]):
    """Backends of one kind, by name. ``load`` imports modules that register themselves."""

    def __init__(
        self,
        setting: str,
        kind: str,
        default: str,
        config_error: Callable[[str], ApplicationError],
        load: Callable[[], None] = lambda: None,
    ) -> None:
        self._setting, self._kind, self._default = setting, kind, default
        self._config_error, self._load = config_error, load
        self._factories: dict[str, Factory[T]] = {}

    def register(self, name: str) -> Callable[[Factory[T]], Factory[T]]:
        """Make a backend selectable as ``<setting>=<name>`` (case-insensitive)."""

        def decorator(factory: Factory[T]) -> Factory[T]:
            self._factories[name.lower()] = factory
            return factory

        return decorator

    def names(self) -> list[str]:
        """The names the setting may take."""
        self._load()
        return sorted(self._factories)

    def create(self, name: str, settings: Settings) -> T:
        """The backend ``name`` names, built with ``settings``; an unknown name is a config error."""
        self._load()
        factory = self._factories.get(name.strip().lower() or self._default)
        if factory is None:
            raise self._config_error(
                f"{self._setting}={name!r} is not a supported {self._kind} (supported: {', '.join(self.names())})."
            )
        return factory(settings)
