#!/bin/bash
# supercluster: puts kubelet and containerd state on the machine's local SSDs, on every boot.
# Every local NVMe disk (RAID0 when there are several) or the temp disk becomes one ext4 filesystem
# labelled $LABEL, created only when missing (a new or deallocated VM comes with blank disks) and
# mounted at $MOUNT; kubelet's and the pod logs' directories are bind-mounted onto it.
# Parameters come from the unit's EnvironmentFile: NVME_DISKS, LABEL, MOUNT, BIND_DIRS.
set -euo pipefail

find_disks() {
  disks=()
  if [ "$NVME_DISKS" -gt 0 ]; then
    # Azure's local NVMe disks report model "Microsoft NVMe Direct Disk"; managed disks never do.
    for dev in /dev/nvme*n1; do
      [ -e "$dev" ] || continue
      if grep -qs "NVMe Direct Disk" "/sys/block/${dev#/dev/}/device/model"; then disks+=("$dev"); fi
    done
    [ "${#disks[@]}" -ge "$NVME_DISKS" ]
  else
    [ -e /dev/disk/azure/resource ] && disks=("$(readlink -f /dev/disk/azure/resource)")
  fi
}

for _ in $(seq 1 90); do find_disks && break; sleep 2; done
want=$(( NVME_DISKS > 0 ? NVME_DISKS : 1 ))
if [ "${#disks[@]}" -lt "$want" ]; then
  echo "local-disk: found ${#disks[@]} of $want local disks; refusing to start kubelet on the OS disk" >&2
  exit 1
fi
for dev in "${disks[@]}"; do
  if findmnt -rno TARGET -S "$dev" | grep -qvx "$MOUNT"; then
    echo "local-disk: $dev is mounted elsewhere; refusing to format it" >&2
    exit 1
  fi
done

target="/dev/disk/by-label/$LABEL"
if [ ! -e "$target" ]; then
  dev="${disks[0]}"
  if [ "${#disks[@]}" -gt 1 ]; then
    mdadm --assemble --scan >/dev/null 2>&1 || true
    if [ ! -e "/dev/md/$LABEL" ]; then
      mdadm --create "/dev/md/$LABEL" --name="$LABEL" --level=0 --raid-devices="${#disks[@]}" \
        --run --force "${disks[@]}"
    fi
    dev="/dev/md/$LABEL"
  fi
  if [ "$(blkid -s LABEL -o value "$dev" || true)" != "$LABEL" ]; then
    wipefs -a "$dev"
    mkfs.ext4 -F -q -L "$LABEL" -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$dev"
  fi
  udevadm settle
fi

mkdir -p "$MOUNT"
mountpoint -q "$MOUNT" || mount -o defaults,noatime "$target" "$MOUNT"
for pair in $BIND_DIRS; do
  name="${pair%%:*}"
  path="${pair#*:}"
  mkdir -p "$MOUNT/$name" "$path"
  mountpoint -q "$path" || mount --bind "$MOUNT/$name" "$path"
done
