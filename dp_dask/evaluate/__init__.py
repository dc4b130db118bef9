"""Utility against the raw data (the data owner's, never part of a release)."""
