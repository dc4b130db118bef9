"""Empirical privacy audit of the methods as released (docs/privacy.md, "Statistical audit")."""
