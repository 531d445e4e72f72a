"""Coordination as plain-Python state machines (no Ray): metadata image and journal,
topic validation and replica placement, and the partition leader's rules."""
