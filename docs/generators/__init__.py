"""The generators behind ``docs/generate.py``: each returns the Markdown of one region.

Nothing here is part of the package or the site (``mkdocs.yml`` excludes this folder).
"""
