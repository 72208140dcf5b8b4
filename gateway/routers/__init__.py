"""One FastAPI router per resource: chat, completions, models, health, metrics."""
