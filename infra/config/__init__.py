"""The config contract: the stack's raw config in, a validated ``ClusterConfig`` out, and the names derived from it."""
