#!/usr/bin/env bash
# Assembles a CUDA 12 toolkit (nvcc 12.4) in DEST, for the CUDA 12 wheel, from package
# registries only and without installing anything system-wide:
#
#   .ci/cuda12_toolkit.sh DEST        (prints DEST's nvcc version; DEST then serves as CUDA_HOME)
#
# Why these pieces: PyPI's nvidia-cuda-nvcc-cu12 (every 12.x release, 12.9.86 included) ships
# ptxas, libnvvm and the crt headers but no nvcc, cicc, cudafe++, fatbinary or nvlink (only the
# CUDA 13 package, nvidia-cuda-nvcc, carries nvcc). The newest CUDA 12 nvcc a reachable
# registry has is Debian's nvidia-cuda-toolkit 12.4.131 (trixie, non-free): its .deb is
# downloaded with apt-get (a private apt configuration under DEST/apt: the system's sources
# and package state are not touched) and unpacked with dpkg -x. The headers come from the
# PyPI wheels of the same release: nvidia-cuda-nvcc-cu12 12.4.131 (crt/), -runtime-cu12
# 12.4.127 (cuda_runtime.h, libcudart.so.12 to link against), -cccl-cu12 12.4.127.post1
# (nv/target, cub; 12.4.127 itself was yanked as broken). About 110 MB of downloads, 10 s.
# nvcc 12.4 compiles sm_50 ... sm_90a; Blackwell (sm_100, sm_120) needs nvcc 12.8 or newer,
# which no registry reachable here has: the wheel serves those GPUs with compute_90 PTX.
set -euo pipefail
DEST="${1:?usage: $0 DEST}"
mkdir -p "$DEST" && DEST="$(cd "$DEST" && pwd)"
PY="${PYTHON:-python3}"

if [ -x "$DEST/bin/nvcc" ] && "$DEST/bin/nvcc" --version >/dev/null 2>&1; then
  "$DEST/bin/nvcc" --version | tail -n 2 | head -n 1
  exit 0
fi
DEB_SUITE=trixie
DEB_PACKAGE=nvidia-cuda-toolkit
PIP_PACKAGES=(nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127
              nvidia-cuda-cccl-cu12==12.4.127.post1)

work="$DEST/download"
rm -rf "$work" && mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/deb" "$work/pip"
echo "deb http://deb.debian.org/debian $DEB_SUITE non-free" >"$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
          -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
          -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
apt-get "${apt_opts[@]}" -qq update
(cd "$work/deb" && apt-get "${apt_opts[@]}" -qq download "$DEB_PACKAGE/$DEB_SUITE")
dpkg -x "$work"/deb/"$DEB_PACKAGE"_*.deb "$work/deb/root"
# The headers below are 12.4's: a Debian update to another release must change them too.
"$work/deb/root/usr/lib/nvidia-cuda-toolkit/bin/nvcc" --version | grep -q "release 12\.4," \
  || { echo "cuda12_toolkit: $DEB_PACKAGE/$DEB_SUITE is not nvcc 12.4: update PIP_PACKAGES" >&2; exit 1; }
"$PY" -m pip download -q --no-deps -d "$work/pip" "${PIP_PACKAGES[@]}"
for w in "$work"/pip/*.whl; do "$PY" -m zipfile -e "$w" "$work/pip/root"; done

# The usual toolkit layout: bin/ (nvcc and what it calls), nvvm/, include/, lib64/.
deb="$work/deb/root/usr"
nv="$work/pip/root/nvidia"
rm -rf "$DEST/bin" "$DEST/nvvm" "$DEST/include" "$DEST/lib64"
mkdir -p "$DEST/bin/crt" "$DEST/nvvm/bin" "$DEST/nvvm/libdevice" "$DEST/include" "$DEST/lib64"
cp "$deb/lib/nvidia-cuda-toolkit/bin/nvcc" "$DEST/bin/"
cp "$deb"/lib/nvidia-cuda-toolkit/bin/crt/* "$DEST/bin/crt/"
for tool in cudafe++ ptxas fatbinary nvlink bin2c cuobjdump nvprune cu++filt; do
  cp "$deb/bin/$tool" "$DEST/bin/"
done
cp "$deb/lib/nvidia-cuda-toolkit/bin/cicc" "$DEST/nvvm/bin/"
cp "$deb/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc" "$DEST/nvvm/libdevice/"
cp -r "$nv"/cuda_runtime/include/. "$nv"/cuda_nvcc/include/. "$nv"/cuda_cccl/include/. "$DEST/include/"
find "$DEST/include" -name '__init__.py' -delete
find "$DEST/include" -name '__pycache__' -prune -exec rm -rf {} +
cp "$nv/cuda_runtime/lib/libcudart.so.12" "$DEST/lib64/"
ln -sf libcudart.so.12 "$DEST/lib64/libcudart.so"
cat >"$DEST/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
rm -rf "$work"
"$DEST/bin/nvcc" --version | tail -n 2 | head -n 1
