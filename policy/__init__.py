"""Refusal policy: reading a turn, answerability, gates, messages, handoff, recheck.
Imports kb only; evaluation and voice_agent sit above it."""
