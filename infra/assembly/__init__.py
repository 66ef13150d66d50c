"""The whole desired cluster, assembled once before any resource is declared, and the stack's output."""
