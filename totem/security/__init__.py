"""What keeps a person's machine safe: the permission decision and the shell grammar it reads, the
project boundary, the kernel sandbox of every process the agent starts, and secrets at rest."""
