"""Refusal policy: gates, messages, handoff, recheck, evaluation. Pure; imports kb only."""
