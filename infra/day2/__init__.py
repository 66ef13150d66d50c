"""Day 2: what a deploy may do to a live cluster, decided from the last deploy's outputs."""
