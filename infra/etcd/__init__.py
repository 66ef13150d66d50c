"""The two etcd clusters (main and Events): what each member is, and every file it receives.

- ``spec``: members, addresses, zones and the apiserver's view of both clusters (``--etcd-servers``,
  ``--etcd-servers-overrides``).
- ``pki``: the certificates the etcd CA issues (profiles only; the component signs them).
- ``config_file``: etcd's own YAML config file, with every setting that matters at scale.
- ``backup``: where snapshots go and how long they are kept.
- ``machine``: the member's cloud-init: units, install script, settings of the member tool.
- ``backup_metrics``: the backup freshness metrics every member serves (shared with monitoring).
- ``membership_change``: growing or shrinking a cluster by one member per deploy.
- ``machine/etcd/member.py`` (not here): the program that runs on each member (start decision, join,
  backup, restore, freshness metrics), shipped verbatim; plain Python 3 with PyYAML, both present on
  Ubuntu's cloud images.
"""
