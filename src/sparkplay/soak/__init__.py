"""`sparkplay soak`: load and (only when asked) faults against a real inventory; the lab's own soak, which
serves its own models and makes every kind of fault, is sparkplay.lab.soak."""
