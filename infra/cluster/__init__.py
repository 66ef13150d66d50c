"""The cluster as a whole: its validated inputs, and the checks of combinations no single key shows."""
