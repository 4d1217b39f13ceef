"""The engines' registries, as the archive declares them: each has ``PRESETS``, preset → model. The adapter reads
them with ``--registries archive.engines:REGISTRIES`` to report every preset's model without starting a model.
"""

from __future__ import annotations

import types

ollama = types.SimpleNamespace(
    PRESETS={"fast": "llama3.2:1b", "balanced": "qwen2.5:7b", "thorough": "qwen2.5:14b"},
    URL="http://127.0.0.1:11434",
)

#: Engine name → registry.
REGISTRIES = {"ollama": ollama}
