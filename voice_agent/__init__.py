"""Everything that touches audio or connections: codecs, VAD, ASR, TTS, calls, server."""
