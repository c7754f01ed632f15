"""The rollout runtime: backends, the loaded model, the rollout loop and its inputs."""

__all__: list[str] = []
