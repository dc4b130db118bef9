"""Shared data stages: the public schema, encoding, reading, exact counts, decoding."""
