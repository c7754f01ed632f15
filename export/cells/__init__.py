"""Robot cells rendered with MuJoCo: scenes, cell sampling, splits, trajectories, episodes.

Heavy libraries (mujoco, fast_simplification) are imported inside the modules that use
them, at first use.
"""

__all__: list[str] = []
