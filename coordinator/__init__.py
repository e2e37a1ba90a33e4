"""Coordinators: consumer groups (classic, KIP-848 and share groups) and transactions, each on its internal topic."""
