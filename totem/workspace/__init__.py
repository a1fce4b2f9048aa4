"""A project's files as Totem sees them: git, changes on disk, snapshots, worktrees, the project's
commands and agents, and the Total.js checks and documentation."""
