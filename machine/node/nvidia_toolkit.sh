#!/bin/bash
# supercluster: installs the pinned NVIDIA Container Toolkit into the GPU machine image, from NVIDIA's apt
# repository, once its signing key is the one pinned. Runs on Image Builder's build VM (as root); every GPU node
# then checks the version at boot (supercluster-gpu-check). Parameters (environment): TOOLKIT_VERSION (the Debian
# version of the four packages), KEY_URL, KEY_FINGERPRINT, REPOSITORY (an apt source line's URL); KEYRING and
# SOURCES default to apt's own places.
set -euo pipefail
keyring=${KEYRING:-/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg}
sources=${SOURCES:-/etc/apt/sources.list.d}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 5 "$KEY_URL" -o "$work/key"
fingerprint=$(gpg --show-keys --with-colons "$work/key" | awk -F: '$1 == "fpr" && !seen { print $10; seen = 1 }')
if [ "$fingerprint" != "$KEY_FINGERPRINT" ]; then
  echo "nvidia-toolkit: $KEY_URL holds key ${fingerprint:-none}, not $KEY_FINGERPRINT: nothing installed" >&2
  exit 1
fi
gpg --batch --yes --dearmor --output "$keyring" "$work/key"
# One source for the repository: a list the base image carries for it (another key file) would conflict.
for list in "$sources"/*; do
  [ -f "$list" ] && grep -q "nvidia.github.io/libnvidia-container" "$list" && rm -f "$list"
done
echo "deb [signed-by=$keyring] $REPOSITORY /" > "$sources/nvidia-container-toolkit.list"
packages=(nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1)
apt-get update
apt-get install -y --no-install-recommends --allow-downgrades --allow-change-held-packages \
  "${packages[@]/%/=$TOOLKIT_VERSION}"
apt-mark hold "${packages[@]}"
