"""Transports carry hints that jobs exist; the database claim decides who runs what."""
