"""The agent: the loop, its context, the providers and the model stream."""
