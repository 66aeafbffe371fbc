"""A tiny name -> class registry, so interchangeable modules are chosen by name from a config."""

from __future__ import annotations

from collections.abc import Iterator


class Registry:
    def __init__(self, kind: str):
        self.kind = kind  # the config field that names an entry, for error messages
        self._classes: dict[str, type] = {}

    def register(self, name: str):
        """Class decorator: ``@MUX_REGISTRY.register("name")``."""

        def add(cls):
            self._classes[name] = cls
            cls.registry_name = name
            return cls

        return add

    def unregister(self, name: str) -> None:
        """Remove an entry (a plug-in's variant, e.g. at the end of a test)."""
        self._classes.pop(name, None)

    def check(self, name: object) -> None:
        """Raise a ``ValueError`` naming the registered choices unless ``name`` is one."""
        if name not in self._classes:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self._classes)}")

    def build(self, name: str, config):
        self.check(name)
        return self._classes[name](config)

    def __getitem__(self, name: str) -> type:
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)
