"""fleetgate coordinator side."""
