"""Filter plugins: masks of the nodes a task can run on."""
