"""Steering a run: the control interface every front end drives, and its HTTP endpoint."""
