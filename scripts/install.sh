#!/usr/bin/env bash
# Install everything syncedge's tests and tools need on a fresh Debian/Ubuntu machine:
# Debian packages (offscreen OpenGL for MuJoCo, iproute2 for the EtherCAT tests, a C
# compiler), the package itself with its extras, and the robot model files.
#
#   bash scripts/install.sh          # everything (training, bridge, tests)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6 iproute2 util-linux gcc g++)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages (install them as root): ${missing[*]}" >&2
    exit 1
  fi
fi

python3 -m pip install -q --upgrade pip >/dev/null
python3 -m pip install -q -e ".[train,bridge,test]"
# Robot meshes and MJCF files only: robosuite's own Python dependencies clash with ours
# (numpy<2 through mink, the non-headless opencv-python), and syncedge never imports it.
python3 -m pip install -q --no-deps robosuite==1.5.2
echo "syncedge installed: $(command -v syncedge)"
