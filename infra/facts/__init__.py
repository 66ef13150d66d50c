"""Facts the rest of the program shares: ports, host paths, roles, node labels and taints, tags, endpoints.

Each is defined once here and imported wherever it is used, so no module keeps a copy in sync by
hand. This package imports nothing else from ``infra``: every layer may depend on it, and it on none
(the import contract in pyproject.toml; tests/ci/test_facts.py refuses the literals elsewhere).
"""
