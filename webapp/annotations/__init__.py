"""Community annotations: threads drawn on a run's charts (step range, tags, Markdown), live and moderated."""
