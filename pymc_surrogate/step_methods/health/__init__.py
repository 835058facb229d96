"""Chain-health checks in the draws and the warnings a step queues."""
