"""Job order plugins: in which order a queue's pending jobs are tried, and who may preempt whom."""
