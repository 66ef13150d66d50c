"""The state-safety policy pack (docs/day2.md, "Policy pack"); the rules live in ``policypack.rules``."""
