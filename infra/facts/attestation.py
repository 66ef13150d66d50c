"""How a joining node proves which Azure machine it is: the facts both sides of the join share.

The node's boot program (``machine/node/node_join.py``, rendered by ``infra/node/join.py``) puts them on its
client CSR; the approver on every apiserver (``machine/control_plane/csr_approver.py``, rendered by
``infra/control_plane/csr_approval.py``) reads them back.
"""

from __future__ import annotations

# The signer of kubelet client certificates and the identity a node's certificate names (kubernetes.io
# "Certificate Signing Requests", built-in signers; "Using Node Authorization").
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
# Every bootstrap token authenticates as group system:bootstrappers; ours also adds this narrower group
# (auth-extra-groups must start with "system:bootstrappers:"), and only it is granted anything.
BOOTSTRAP_GROUP = "system:bootstrappers:supercluster-nodes"

# Annotations of the node's client CSR: the instance metadata service's attested document (its ``signature``,
# base64 PKCS #7 signed by Azure) and the VM's Azure resource ID (IMDS compute ``resourceId``).
DOCUMENT_ANNOTATION = "supercluster.io/attested-document"
VM_ANNOTATION = "supercluster.io/vm-resource-id"

# IMDS's attested document (azure-rest-api-specs, specification/imds/data-plane/Microsoft.InstanceMetadataService,
# stable/2019-08-15/imds.json: GET /metadata/attested/document, whose ``nonce`` is "a string of up to 32 random
# alphanumeric characters"; the answer's ``signature`` is the PKCS #7 document holding vmId, subscriptionId,
# nonce and timeStamp). The nonce is the first NONCE_LENGTH hex characters of the SHA-256 of the CSR's
# SubjectPublicKeyInfo: 128 bits, the most IMDS carries.
ATTESTED_PATH = "/metadata/attested/document"
ATTESTED_API_VERSION = "2019-08-15"
NONCE_LENGTH = 32
# What signs the document on Azure's public cloud: a certificate for metadata.azure.com, chaining to a public root
# through intermediates its Authority Information Access names (Microsoft Q&A 878907, "Azure Instance Metadata
# Service Attested data certificate changes FAQ": the chain changed in 2022, pin no intermediate). The approver
# trusts the machine's own root store for it.
ATTESTATION_SIGNER = "metadata.azure.com"
SYSTEM_ROOTS = "/etc/ssl/certs/ca-certificates.crt"  # Ubuntu's ca-certificates bundle
# The only hosts the approver fetches an intermediate from, and only at a URL its signer's CA Issuers field names:
# Microsoft's certificate-download hosts in "Azure Certificate Authority details"
# (learn.microsoft.com/azure/security/fundamentals/azure-ca-details, its certificate downloads, revocation lists
# and firewall allowlist), where the Azure TLS issuing CAs that sign metadata.azure.com are published
# (www.microsoft.com/pkiops/certs/...). Plain HTTP, as CA Issuers URLs are: what is fetched is not trusted, the
# chain must still verify to SYSTEM_ROOTS.
INTERMEDIATE_HOSTS = ("caissuers.microsoft.com", "www.microsoft.com")
# Azure Resource Manager's record of a VM (properties.vmId, properties.osProfile.computerName): the API version
# is one azure-native's getVirtualMachineScaleSetVM lists (pulumi.com registry, azure-native compute).
ARM_HOST = "management.azure.com"
ARM_ENDPOINT = f"https://{ARM_HOST}"
ARM_API_VERSION = "2024-07-01"
# The NICs of the VM a Node's providerID names, which the approver reads for the addresses a kubelet's serving
# certificate may name: a scale set's instance's at ``<instance>/networkInterfaces`` (Microsoft.Compute's path,
# served by Microsoft.Network), a VM's at the IDs its ``properties.networkProfile.networkInterfaces`` lists. The
# scale-set path takes only some Network API versions (azure-rest-api-specs issue 19477 quotes Resource Manager's
# list for ``virtualMachineScaleSets/networkInterfaces``; later Network specs still point that path at
# stable/2018-10-01/vmssNetworkInterface.json, issue 21141); 2018-10-01 is on that list and a stable Network
# version for ``networkInterfaces`` too, so one version serves both.
NETWORK_API_VERSION = "2018-10-01"
# The VM's own compute metadata, whose ``resourceId`` the node claims (the version machine/node/provider_id.py asks).
COMPUTE_PATH = "/metadata/instance/compute"
COMPUTE_API_VERSION = "2021-02-01"

# What the attested join reaches at run time, from the apiservers' approver only (never at boot, never from a node,
# NAT host or etcd member): Resource Manager on 443 and Microsoft's certificate hosts on 80. The apiserver subnet's
# way out is the system VNet's NAT gateway (infra/network/egress.py); no NSG restricts outbound (docs/security.md).
RUN_TIME_HOSTS = (ARM_HOST, *INTERMEDIATE_HOSTS)
