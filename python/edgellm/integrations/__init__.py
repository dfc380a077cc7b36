"""Integrations with other serving systems (each needs its own optional extra)."""
