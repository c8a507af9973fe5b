"""Delite inside other frameworks; each integration imports its framework only when used (its pip extra)."""
