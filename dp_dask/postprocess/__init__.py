"""Post-processing of noisy marginals: consistency, spanning tree, row updates."""
