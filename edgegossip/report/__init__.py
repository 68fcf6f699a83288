"""What agents leave in their output folders, read back for people: the per-agent summary, the
average of their models, time to an accuracy, and the plots. Used by `emulate` and by `fleet
collect` alike, so it sits below both."""
