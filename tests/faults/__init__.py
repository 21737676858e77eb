"""Faults and races: the LLM or the database failing, connections cut, restarts, replicas."""
