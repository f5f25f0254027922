"""Programs Trainyard ships into Jobs (they import nothing from Trainyard)."""
