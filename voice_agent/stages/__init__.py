"""Stages of a spoken turn, each usable alone: voice activity, transcription, turn end, barge-in,
speech text rules and the TTS client (piper itself runs only in the separate worker process)."""
