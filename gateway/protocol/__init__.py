"""OpenAI wire protocol: request models (validated, extra fields refused) and response
builders. Knows the OpenAI JSON shapes only; nothing about engines, grammars or HTTP."""
