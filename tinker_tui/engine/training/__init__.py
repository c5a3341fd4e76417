"""The pipeline: rollout workers on a loop of their own feed the trainer; evals, resume."""
