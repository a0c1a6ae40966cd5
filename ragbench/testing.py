"""pytest plugin (registered through the ``pytest11`` entry point).

Fixtures for benchmark authors; see the README's "pytest fixtures" section.
"""
