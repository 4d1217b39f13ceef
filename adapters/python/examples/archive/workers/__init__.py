"""The example archive's workers (see ``archive/__init__.py``)."""
