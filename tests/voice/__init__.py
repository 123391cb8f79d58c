"""Voice service tests: real processes, the Realtime stand-in, the gateway played over the bus."""
