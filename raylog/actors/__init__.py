"""Thin Ray actor shells over the storage and coordination state machines."""
