"""turnformer: multi-turn, multi-party dialogue modelling with structure-aware Transformers."""

from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem, Turn

__all__ = ["Dialogue", "DialogueError", "ResponseSelectionItem", "Turn"]
__version__ = "0.1.0"
