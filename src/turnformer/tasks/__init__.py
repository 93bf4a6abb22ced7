"""Downstream tasks on dialogues (emotion recognition, dialogue acts, response selection, generation) and their
metrics. Each task module ends with its task object (`base.Task`); `registry` finds them by id, and what they share
is `common`."""
