"""The control plane: kube-apiserver, kube-controller-manager and kube-scheduler on dedicated VMs.

Pure renderers (no Pulumi) for everything an apiserver VM and the cluster receive:

- ``pki``: which certificates exist, who signs them, and where each lands (Key Vault secret -> file).
- ``apiserver``, ``controller_manager``, ``scheduler``: flags and config files, sized for 7,500 nodes.
- ``leader_election``: the controller-manager's and scheduler's lease timings, longer than an etcd election's stall.
- ``flowcontrol``: API Priority and Fairness objects that keep per-node agents from starving the rest.
- ``kubeconfig``: component kubeconfigs (file references, no secrets) and the admin kubeconfig.
- ``install``: the boot script that installs the pinned binaries, verified.
- ``machine``: the whole cloud-init of one apiserver VM.
- ``cluster_objects``: what Pulumi applies in-cluster once an apiserver answers (RBAC, CRD, APF).
"""
