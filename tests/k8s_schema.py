"""Strict Kubernetes schema validation for tests, with each schema file read once per process.

``kubernetes_validate.validate`` re-reads and re-parses its JSON schema files, ``_definitions.json``
(megabytes) included, for every object it checks: about 16 ms an object, seconds for a plan's few hundred.
Reading each file once (the files never change while a test session runs, and validation only reads
the parsed schema) brings that to about 1 ms with the same verdicts.
"""

from __future__ import annotations

import functools

import kubernetes_validate
from kubernetes_validate import utils

utils.schema_contents = functools.cache(utils.schema_contents)

ValidationError = kubernetes_validate.ValidationError
validate = kubernetes_validate.validate
