"""What the program builds from: pinned versions, the Azure VM sizes it knows, container image references."""
