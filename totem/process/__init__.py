"""Child processes: how the server runs one, the background jobs of a session and its terminal."""
