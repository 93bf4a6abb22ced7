"""Downstream tasks on dialogues (emotion recognition in conversation, ...) and their metrics."""
