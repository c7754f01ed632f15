"""syncedge: an embedded edge runtime for calibration-conditioned robot world models."""

import ast
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithCommit(build_py):
    """build_py that also records the source tree's git commit in the built package
    (export/_build_commit.txt), so that an installed copy's model.json provenance names
    the commit it came from (export.provenance.git_commit)."""

    def run(self) -> None:
        super().run()
        import subprocess

        try:
            rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True,
                                 text=True, check=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=HERE, capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return  # not built from a git clone: the package says "unknown"
        target = Path(self.build_lib) / "export" / "_build_commit.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rev + ("-dirty" if dirty else "") + "\n", encoding="utf-8")

TRAIN = [
    "torch==2.13.0",
    "mujoco==3.3.7",
    "fast-simplification>=0.1.9",
    "matplotlib>=3.7",
]
ROS = ["rosbags>=0.10"]
TEST = ["pytest>=8", "ruff>=0.6", "mypy>=1.10", *ROS]


def plugin_entry_points() -> dict[str, list[str]]:
    """The entry points of the plug-in table ``PLUGINS`` in edge/plugins.py (read as a
    literal, not imported), so the metadata lists exactly the project's own plug-ins."""
    tree = ast.parse((HERE / "edge" / "plugins.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PLUGINS":
            table = ast.literal_eval(node.value)
            return {group: [f"{name} = {target}" for name, target in names.items()]
                    for group, names in table.items()}
    raise RuntimeError("edge/plugins.py: expected the PLUGINS table")


setup(
    cmdclass={"build_py": BuildPyWithCommit},
    name="syncedge",
    version="0.1.0",
    description="Embedded edge runtime for calibration-conditioned robot world models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # firmware_bridge/firmware holds the device-side C sources (no Python): a data package
    packages=find_packages(include=["edge*", "kernels*", "firmware_bridge*", "export*"])
    + ["firmware_bridge.firmware"],
    include_package_data=True,
    package_data={
        "edge": ["py.typed"],
        "kernels": ["*.cu", "*.cuh", "*.h", "*.cpp", "*.fatbin", "fatbin.json", "py.typed"],
        "firmware_bridge": ["py.typed"],
        "firmware_bridge.firmware": ["*.c", "*.h"],
        "export": ["py.typed", "engine/trt_onnx_ops.json"],
    },
    install_requires=[
        "numpy>=1.24",
        "opencv-python-headless>=4.8",
        "pyarrow>=14",
        "av>=12",
        "onnx>=1.16",
        # onnx imports ml_dtypes, and the runtime imports onnx when it loads a model (to
        # fuse each batch's step and decoder into one graph): ml_dtypes 0.7.0's extension
        # took 1.2-1.5 s to import on a 2-core x86 CPU against 0.16 s for 0.6.0, which
        # alone breaks the < 1 s cold start to the first frame (bench/bench_runtime.py)
        "ml_dtypes>=0.5.4,!=0.7.0",
        "onnxruntime>=1.18",
        "PyYAML>=6",
        "cryptography>=42",
        "pyserial>=3.5",
    ],
    extras_require={
        # Off-device: render cells with MuJoCo and train the reference model.
        # Robot meshes come from robosuite's assets, installed without its
        # dependencies (see scripts/install.sh and README.md).
        "train": TRAIN,
        # Servo buses and EtherCAT.
        # dynamixel-sdk 3.8.4 is the first with syncReadTx(..., fast_option)
        "bridge": ["dynamixel-sdk>=3.8.4", "feetech-servo-sdk>=1.0", "pysoem>=1.1.13"],
        # NVIDIA devices (JetPack): TensorRT and pycuda.
        "nvidia": ["tensorrt>=10.3", "pycuda>=2024.1"],
        # Import calibration episodes from ROS 2 bags (rosbag2, MCAP or SQLite3; no ROS).
        "ros": ROS,
        "test": TEST,
    },
    entry_points={
        "console_scripts": ["syncedge = edge.cli:main"],
        # Subcommand groups, URL sources (sim://, the joint stream transports): the plug-in
        # table of edge/plugins.py, through which a package reaches one above it.
        **plugin_entry_points(),
    },
)
