"""The Realtime GA stand-in: `WS /v1/realtime?model=…` speaking the events of
openai-wire.md §7 (session config, input audio with an energy VAD, paced audio
answers, cancel, truncate, function calls), scripted over `/_standin/realtime/…`."""
