"""Delite: an on-device inference SDK built around a Delegate API."""
