"""What a run measures of itself: metric keys, health, cost, throughput, loop lag."""
