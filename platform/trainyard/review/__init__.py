"""Reports for people: rendered files, capacity tables and review diffs. No engine, no cluster."""
