"""Realtime voice bridge (browser PCM16 24 kHz, phone G.711 µ-law) — skeleton until the voice issue."""
