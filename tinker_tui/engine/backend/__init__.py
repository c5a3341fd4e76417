"""The backend seam: which backend, what the engine asks of its clients, the session."""
