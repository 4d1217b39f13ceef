"""The archive's catalogue: its workers in the order they run, each with what only the archive knows (its axis,
its governance, its stamp) and the dotted path of its module. The scheduler's TOML catalogue mirrors it; option
defaults, engines and presets are not repeated there: the workers' signatures declare them.
"""

WORKERS = [
    {"name": "tag-suggest", "axis": "enrichment", "governance": "curator review", "stamp": "tags_v1",
     "module": "archive.workers.tag_suggest"},
    {"name": "quality-validator", "axis": "quality", "governance": "cleaning rules", "stamp": "quality_v1",
     "module": "archive.workers.quality_validator"},
]
