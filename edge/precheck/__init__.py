"""Policy pre-check: rules, evaluation of predicted rollouts, policies in the loop, reports."""

__all__: list[str] = []
