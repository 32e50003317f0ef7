"""Programs that train the models Quarry ships; never imported by serving code, never in the wheel."""
