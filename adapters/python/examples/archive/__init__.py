"""An example shaped like the archive's own code, for the Python adapter's documentation and tests: a SQLAlchemy
session factory (``db.SessionLocal``), engine registries that declare their ``PRESETS``
(``engines.REGISTRIES``), a catalogue of workers in their order (``catalogue.WORKERS``), and workers whose functions
take the session first and declare their options, engine and preset in their signatures (``workers.*``).
"""
