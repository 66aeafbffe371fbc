"""``fetch``: the offline data sources (:mod:`.sources`) and the pretrained encoders
(:mod:`.pretrained`), by name; the one entry point ``muxplm data fetch`` calls."""

from __future__ import annotations

from pathlib import Path

from . import pretrained, sources


def fetch(names: list[str] | tuple[str, ...] | str | None = None, cache_dir: str | Path | None = None,
          force: bool = False, progress: bool = True) -> dict[str, Path]:
    """Fetch the named sources and models (every data source when ``names`` is None; models are
    large and only fetched when named) and return ``{name: folder}``. See
    :func:`.sources.fetch_sources` and :func:`.pretrained.fetch_model`."""
    if isinstance(names, str):
        names = [names]
    selected = list(sources.SOURCES) if names is None else list(names)
    unknown = [name for name in selected if name not in sources.SOURCES and name not in pretrained.MODELS]
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; known: {sorted(sources.SOURCES)}, and the "
                         f"pretrained models {sorted(pretrained.MODELS)} (fetched only when named)")
    root = Path(cache_dir or sources.default_cache_dir())
    result: dict[str, Path] = {}
    for name in selected:
        if name in pretrained.MODELS:
            result[name] = pretrained.fetch_model(name, root, force=force, progress=progress)
        else:
            result.update(sources.fetch_sources([name], root, force=force, progress=progress))
    return result

