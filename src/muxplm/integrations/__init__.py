"""muxplm inside other engines. Each module imports its engine on first use, and the engine is an
optional extra: :mod:`muxplm.integrations.ray` (``pip install "muxplm[ray]"``)."""
