"""The task side: what a task is, its scenarios, the trajectories its rollouts return."""
