"""Drafters: where draft tokens come from (draft model, prompt lookup, Predicted Outputs,
grammar-forced tokens, or none). Each returns a `Proposal`; see `engine.drafters.base`."""

from engine.drafters.base import Drafter, Proposal
from engine.drafters.forced import ForcedDrafter, NoDrafter
from engine.drafters.model import ModelDrafter
from engine.drafters.ngram import NgramDrafter
from engine.drafters.prediction import PredictionDrafter

__all__ = [
    "Drafter",
    "ForcedDrafter",
    "ModelDrafter",
    "NgramDrafter",
    "NoDrafter",
    "PredictionDrafter",
    "Proposal",
]
