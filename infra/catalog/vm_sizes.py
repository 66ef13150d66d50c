"""The Azure VM sizes supercluster knows how to build on, and what each one has.

Validation uses this table to refuse, before anything is declared, a size that
cannot do the job: etcd and every node need a local (temp or NVMe) SSD, GPU pools
need GPUs, InfiniBand pools need an InfiniBand size.

Sources (Microsoft Learn, "Sizes for virtual machines in Azure", one page per series):
  Lsv3:  /azure/virtual-machines/sizes/storage-optimized/lsv3-series
  Ddsv5: /azure/virtual-machines/sizes/general-purpose/ddsv5-series
  Edsv5: /azure/virtual-machines/sizes/memory-optimized/edsv5-series
  Dsv5:  /azure/virtual-machines/sizes/general-purpose/dsv5-series (no temp disk)
  ND H100 v5: /azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series
  ND A100 v4: /azure/virtual-machines/sizes/gpu-accelerated/nda100v4-series
  NC A100 v4: /azure/virtual-machines/sizes/gpu-accelerated/nca100v4-series
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class VmSize:
    name: str
    vcpus: int
    memory_gib: int
    nvme_disks: int = 0  # local NVMe devices, wiped on deallocate
    temp_disk_gib: int = 0  # the SCSI temp ("resource") disk, wiped on deallocate/redeploy
    gpus: int = 0
    infiniband: bool = False
    encryption_at_host: bool = True

    @property
    def has_local_disk(self) -> bool:
        return self.nvme_disks > 0 or self.temp_disk_gib > 0


_SIZES = (
    # Storage-optimized: etcd's home (fsync latency on local NVMe ~200us vs ~2ms network disk).
    VmSize("Standard_L8s_v3", 8, 64, nvme_disks=1, temp_disk_gib=80),
    VmSize("Standard_L16s_v3", 16, 128, nvme_disks=2, temp_disk_gib=160),
    VmSize("Standard_L32s_v3", 32, 256, nvme_disks=4, temp_disk_gib=320),
    # General purpose with a local temp SSD.
    VmSize("Standard_D4ds_v5", 4, 16, temp_disk_gib=150),
    VmSize("Standard_D8ds_v5", 8, 32, temp_disk_gib=300),
    VmSize("Standard_D16ds_v5", 16, 64, temp_disk_gib=600),
    VmSize("Standard_D32ds_v5", 32, 128, temp_disk_gib=1200),
    VmSize("Standard_D64ds_v5", 64, 256, temp_disk_gib=2400),
    VmSize("Standard_D96ds_v5", 96, 384, temp_disk_gib=3600),
    # Memory-optimized: apiservers (the 7,500-node post saw ~70 GB heap per apiserver).
    VmSize("Standard_E16ds_v5", 16, 128, temp_disk_gib=600),
    VmSize("Standard_E32ds_v5", 32, 256, temp_disk_gib=1200),
    VmSize("Standard_E64ds_v5", 64, 512, temp_disk_gib=2400),
    VmSize("Standard_E96ds_v5", 96, 672, temp_disk_gib=3600),
    # No local disk at all: listed so validation can say why it is refused.
    VmSize("Standard_D4s_v5", 4, 16),
    VmSize("Standard_D16s_v5", 16, 64),
    # GPU.
    VmSize("Standard_ND96isr_H100_v5", 96, 1900, nvme_disks=8, temp_disk_gib=1000, gpus=8, infiniband=True),
    VmSize("Standard_ND96asr_v4", 96, 900, temp_disk_gib=6000, gpus=8, infiniband=True),
    VmSize("Standard_NC24ads_A100_v4", 24, 220, nvme_disks=1, temp_disk_gib=64, gpus=1),
)

VM_SIZES: dict[str, VmSize] = {size.name: size for size in _SIZES}


def known_sizes(predicate: Callable[[VmSize], bool] = lambda size: True) -> str:
    """A comma-joined list of the known sizes that satisfy ``predicate``, for error messages."""
    return ", ".join(name for name, size in VM_SIZES.items() if predicate(size))
