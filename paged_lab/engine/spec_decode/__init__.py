"""Speculative decoding (notebook 10): draft k tokens, verify them in one forward pass, roll back what the
target model rejects. ``rules.py`` holds the arithmetic and the acceptance rules, free of the engine."""
