"""syncedge: an embedded edge runtime for calibration-conditioned robot world models."""

from setuptools import find_packages, setup

TRAIN = [
    "torch==2.13.0",
    "mujoco==3.3.7",
    "fast-simplification>=0.1.9",
    "matplotlib>=3.7",
]
ROS = ["rosbags>=0.10"]
TEST = ["pytest>=8", "ruff>=0.6", "mypy>=1.10", *ROS]

setup(
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
        # Subcommand groups contributed by each package; edge.cli discovers them
        # here so that edge/ never imports export/ or firmware_bridge/ directly.
        "syncedge.commands": [
            "cells = export.cells.cli:register",
            "model = export.model_cli:register",
            "bridge = firmware_bridge.cli:register",
            "bundle = export.bundle.cli:register",
            "export = export.cli:register",
            "simulate = edge.commands.simulate:register",
            "precheck = edge.commands.precheck:register",
            "doctor = edge.commands.doctor:register",
            "cache = edge.commands.cache:register",
            "calibrate = edge.commands.calibrate:register",
        ],
    },
)
