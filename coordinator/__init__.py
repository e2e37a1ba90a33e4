"""Coordinators: cluster metadata (controller), consumer groups, transactions."""
