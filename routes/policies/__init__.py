"""Policy implementations a deployment can choose by settings: the answer-level model and an
external LLM judge."""
