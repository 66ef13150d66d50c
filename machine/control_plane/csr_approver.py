#!/usr/bin/python3
"""supercluster: approves a node's certificate requests only for what Azure and its Node say it is.

kube-controller-manager signs kubelet certificates with the cluster CA once their requests are approved. This
program, on every apiserver VM, decides two kinds of request.

A kubelet's serving certificate (``kubernetes.io/kubelet-serving``), which the controller-manager never approves:
approved when it was sent by ``system:node:<name>`` (group ``system:nodes``); its subject is exactly that user in
organization ``system:nodes``; it asks for no usage beyond digital signature, key encipherment and server auth
(server auth included); it names at least one DNS or IP name and nothing else (no e-mail, URI or other name); the
Node ``<name>`` exists; and Azure says what it may name, not the Node, whose addresses its own kubelet writes. The
Node's ``spec.providerID`` (which the node also wrote) is taken only when it names one of this cluster's VMs that
may be a node, and Azure Resource Manager has that VM with the computer name ``<name>`` (as for a client
certificate, below); then every IP must be the private address of a primary IP configuration of one of that VM's
NICs (a pod's address, a secondary configuration, is not the node's to serve as) and every DNS name the computer
name, the one name Azure and the Node agree on. An IP or a name beyond those, a providerID elsewhere or a VM Azure
does not have is denied: none of them changes while the VM lives.

A new node's client certificate (``kubernetes.io/kube-apiserver-client-kubelet``, sent with the bootstrap token by
the node's boot program, ``machine/node/node_join.py``), which nothing else approves: approved when it comes from
a bootstrap token of the nodes' group; its subject is exactly ``system:node:<name>`` in ``system:nodes``, with
client auth and no usage beyond digital signature and key encipherment, and no alternative name; it carries
Azure's attested document, whose PKCS #7 signature chains to a trusted root through a signer named as Azure's,
whose nonce is the request's own public key's, which is fresh, and whose subscription is this VM's; and the VM it
names is one of this cluster's that may be a node (an instance of a scale set of the node resource group named with
the node pools' prefix, or a VM named with the NAT hosts' prefix), which Azure Resource Manager says has the
document's ``vmId`` and the computer name ``<name>``. A document that cannot be verified for any reason (an
intermediate not fetched included) is denied; the node then asks again with a new key and document.

A node's renewal of its client certificate (the same signer, sent as ``system:node:<name>`` by kubelet's rotation),
which nothing else approves (no one is granted ``selfnodeclient``): approved when its subject is exactly that
node in ``system:nodes``, with client auth and no other name, and Azure still has the Node's VM as for a serving
certificate (its providerID one of this cluster's node or NAT VMs, with the computer name ``<name>``). A VM Azure
no longer has is denied, so a stolen node certificate stops renewing once its VM is gone.

At run time, and only here, it reaches outside the cluster: Azure Resource Manager (HTTPS, one token from IMDS
serving five minutes of reads), and the intermediate certificates its signer's Authority Information Access
names, fetched over HTTP only from Microsoft's certificate hosts it is given, with no redirect, and cached on disk.

A request that can never pass is denied; one that may pass later (no such Node yet, a Node without a
providerID, Azure not answering) is left pending and looked at again. Each decision is logged with its reason.
Every apiserver runs a copy, and one decides at a time: the copy holding the approvers' Lease (renewed every
``retry_seconds``, given up ``renew_deadline_seconds`` after its last renewal; another copy takes it once it has
seen no renewal for ``duration_seconds``). So a burst of joining nodes costs Resource Manager one copy's reads,
not one per apiserver. Should the Lease be missing, every copy decides, as they did before it (nodes keep joining);
an approval is an update with the request's resourceVersion, so when two copies decide at once the apiserver takes
one and answers the other 409, which is logged and skipped.
Usage: supercluster-csr-approver CONFIG_JSON   (rendered by infra/control_plane/csr_approval.py)
"""

import base64
import datetime
import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"
ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}
REQUIRED_USAGE = "server auth"
CLIENT_USAGES = {"digital signature", "key encipherment", "client auth"}
REQUIRED_CLIENT_USAGE = "client auth"
# The attested document's times (Azure IMDS, "Attested data": e.g. "09/25/26 02:42:17 -0000"); an older
# document is not taken (the node fetched it just before it sent its request).
AZURE_TIME = "%m/%d/%y %H:%M:%S %z"
MAX_DOCUMENT_AGE = 600
# A compute resource's ID, case-insensitive as Azure's names are: a scale set's instance, or a VM.
RESOURCE_ID = re.compile(
    r"/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Compute/"
    r"(?:virtualMachineScaleSets/([^/]+)/virtualMachines/(\d+)|virtualMachines/([^/]+))",
    re.IGNORECASE,
)
# What kubelet writes in spec.providerID (machine/node/provider_id.py): this scheme, then the VM's resource ID.
PROVIDER_PREFIX = "azure://"
FINAL_CONDITIONS = {"Approved", "Denied", "Failed"}
# Object identifiers (RFC 5280, RFC 2985) and the GeneralName tags of a subjectAltName (RFC 5280 4.2.1.6).
COMMON_NAME, ORGANIZATION = "2.5.4.3", "2.5.4.10"
EXTENSION_REQUEST, SUBJECT_ALT_NAME = "1.2.840.113549.1.9.14", "2.5.29.17"
DNS_NAME_TAG, IP_ADDRESS_TAG = 0x82, 0x87
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
# A full relist every RESYNC seconds (a watch ends then); every WAITING seconds while a request waits for its
# Node, whose registration or addresses may arrive after the request.
RESYNC = 300
WAITING = 5
RETRY = 5
TIMEOUT = 30
# One Resource Manager token serves this long. An Entra access token lives 60-90 minutes by default (Microsoft
# identity platform documentation, "Access tokens", Token lifetime), and IMDS allows a VM 5 requests a second
# (Azure Instance Metadata Service documentation, Rate limiting).
TOKEN_REUSE_SECONDS = 300


class Verdict:
    APPROVE, DENY, WAIT = "approve", "deny", "wait"


# ---------------------------------------------------------------- the request (DER, PKCS #10)


def der_elements(data):
    """``[(tag, content), ...]`` of the DER elements that ``data`` holds one after another."""
    return [(tag, content) for tag, content, _ in der_spans(data)]


def der_spans(data):
    """``[(tag, content, whole element), ...]`` of the DER elements that ``data`` holds one after another."""
    elements, at = [], 0
    while at < len(data):
        start = at
        if at + 2 > len(data) or data[at] & 0x1F == 0x1F:
            raise ValueError("not DER this program reads")
        tag, length, at = data[at], data[at + 1], at + 2
        if length & 0x80:
            count = length & 0x7F
            if not 1 <= count <= 4 or at + count > len(data):
                raise ValueError("bad DER length")
            length, at = int.from_bytes(data[at : at + count], "big"), at + count
        if at + length > len(data):
            raise ValueError("truncated DER")
        elements.append((tag, data[at : at + length], data[start : at + length]))
        at += length
    return elements


def object_identifier(content):
    first = content[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for byte in content[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(part) for part in parts)


def read_request(der):
    """The subject attributes (``{oid: [values]}``), the alternative names (``dns``, ``ips``, ``others``: how
    many names of any other kind) and the SubjectPublicKeyInfo (``public_key``, DER) of a PKCS #10 request."""
    ((_, request),) = der_elements(der)
    _, info = der_elements(request)[0]
    _, subject, _, *attributes = der_elements(info)
    public_key = der_spans(info)[2][2]
    names = {}
    for _, relative in der_elements(subject[1]):
        for _, pair in der_elements(relative):
            (_, kind), (_, value) = der_elements(pair)
            names.setdefault(object_identifier(kind), []).append(value.decode("utf-8"))
    dns, ips, others, alt_name_extensions = [], [], 0, 0
    for _, attribute in der_elements(attributes[0][1]) if attributes else []:
        (_, kind), (_, values) = der_elements(attribute)
        if object_identifier(kind) != EXTENSION_REQUEST:
            continue
        for _, extensions in der_elements(values):
            for _, extension in der_elements(extensions):
                parts = der_elements(extension)
                if object_identifier(parts[0][1]) != SUBJECT_ALT_NAME:
                    continue
                alt_name_extensions += 1
                ((_, general_names),) = der_elements(parts[-1][1])
                for tag, value in der_elements(general_names):
                    if tag == DNS_NAME_TAG:
                        dns.append(value.decode("ascii"))
                    elif tag == IP_ADDRESS_TAG:
                        ips.append(str(ipaddress.ip_address(value)))
                    else:
                        others += 1
    if alt_name_extensions > 1:
        raise ValueError("more than one subjectAltName extension")
    return {"subject": names, "dns": dns, "ips": ips, "others": others, "public_key": public_key}


# ---------------------------------------------------------------- the decision


def decide(csr, node, azure, machines):
    """``(verdict, reason)`` for a ``kubernetes.io/kubelet-serving`` request ``csr``, the Node its requester
    names (``None`` if there is none) and what Azure says of that Node's VM. Azure not answering raises OSError."""
    spec = csr["spec"]
    user = spec.get("username", "")
    if not user.startswith(NODE_USER_PREFIX) or NODES_GROUP not in spec.get("groups", []):
        return Verdict.DENY, f"requested by {user!r}, not by a node"
    node_name = user[len(NODE_USER_PREFIX) :]
    usages = set(spec.get("usages", []))
    if not usages <= ALLOWED_USAGES or REQUIRED_USAGE not in usages:
        return Verdict.DENY, f"usages {sorted(usages)} are not server auth within {sorted(ALLOWED_USAGES)}"
    try:
        request = read_request(base64.b64decode(pem_body(base64.b64decode(spec["request"]))))
    except (KeyError, ValueError, IndexError, UnicodeDecodeError) as error:
        return Verdict.DENY, f"unreadable request: {error}"
    subject = request["subject"]
    if subject.get(COMMON_NAME) != [user] or subject.get(ORGANIZATION) != [NODES_GROUP] or len(subject) != 2:
        return Verdict.DENY, f"subject {subject} is not CN={user}, O={NODES_GROUP}"
    if request["others"]:
        return Verdict.DENY, "names other than DNS and IP"
    if not request["dns"] and not request["ips"]:
        return Verdict.DENY, "no DNS or IP name"
    if node is None:
        return Verdict.WAIT, f"no Node {node_name!r}"
    vm, verdict, reason = node_vm(node, azure, machines)
    if verdict:
        return verdict, reason
    ips = set()
    for nic in azure.nics(vm):
        for configuration in nic.get("properties", {}).get("ipConfigurations", []):
            properties = configuration.get("properties", {})
            if properties.get("primary") and properties.get("privateIPAddress"):
                ips.add(str(ipaddress.ip_address(properties["privateIPAddress"])))
    foreign = [name for name in request["dns"] if name != node_name] + [ip for ip in request["ips"] if ip not in ips]
    if foreign:
        return Verdict.DENY, f"{', '.join(foreign)} not among VM {node_name}'s name and primary IPs {sorted(ips)}"
    return Verdict.APPROVE, f"every name is VM {node_name}'s in Azure's word"


def node_vm(node, azure, machines):
    """``(Azure's record of the VM, None, "")`` for the VM a Node's ``spec.providerID`` names when that is one of
    this cluster's that may be a node and has the Node's name as its computer name; ``(None, verdict, reason)``
    otherwise. The node wrote its providerID, so only Azure's answer for it is believed."""
    name = node["metadata"]["name"]
    provider = node.get("spec", {}).get("providerID", "")
    if not provider:
        return None, Verdict.WAIT, f"Node {name} has no providerID yet"
    resource_id = provider[len(PROVIDER_PREFIX) :] if provider.startswith(PROVIDER_PREFIX) else ""
    rendered = cluster_vm(resource_id, azure.subscription(), machines)
    if rendered is None:
        return None, Verdict.DENY, f"Node {name}'s providerID {provider} is no node pool's or NAT host's VM"
    vm = azure.vm(resource_id)
    verdict, reason = check_vm(vm, None, name, rendered)
    if verdict != Verdict.APPROVE:
        return None, verdict, f"Node {name}'s providerID {provider}: {reason}"
    return {**vm, "id": resource_id}, None, ""


def pem_body(pem):
    """The base64 between a PEM's BEGIN and END lines (one block: a request is one)."""
    lines = pem.decode("ascii").strip().splitlines()
    if len(lines) < 3 or not lines[0].startswith("-----BEGIN ") or not lines[-1].startswith("-----END "):
        raise ValueError("not a PEM block")
    return "".join(lines[1:-1])


def decided(csr):
    return any(c.get("type") in FINAL_CONDITIONS for c in csr.get("status", {}).get("conditions") or [])


# ---------------------------------------------------------------- a new node's client certificate


def check_client_request(csr, config):
    """``(verdict, reason, facts)`` for what a client request says of itself; ``facts`` (the node name, the public
    key, the document, the VM's resource ID) when it may go on to Azure's checks (verdict ``None``)."""
    spec, annotations = csr["spec"], csr["metadata"].get("annotations") or {}
    user = spec.get("username", "")
    if not user.startswith(BOOTSTRAP_USER_PREFIX) or config["bootstrap_group"] not in spec.get("groups", []):
        return Verdict.DENY, f"requested by {user!r}, not by a node's bootstrap token", None
    reason, name, request = read_client_request(spec)
    if reason:
        return Verdict.DENY, reason, None
    document, vm = annotations.get(config["document_annotation"]), annotations.get(config["vm_annotation"])
    if not document or not vm:
        return Verdict.DENY, "no attested document and VM (not sent by the node's join program)", None
    return None, "", {"name": name, "public_key": request["public_key"], "document": document, "vm": vm}


def read_client_request(spec):
    """``("", node name, request)`` for a client request for exactly ``system:node:<name>`` in ``system:nodes``
    with client auth and no other name; ``(reason, "", None)`` otherwise."""
    usages = set(spec.get("usages", []))
    if not usages <= CLIENT_USAGES or REQUIRED_CLIENT_USAGE not in usages:
        return f"usages {sorted(usages)} are not client auth within {sorted(CLIENT_USAGES)}", "", None
    try:
        request = read_request(base64.b64decode(pem_body(base64.b64decode(spec["request"]))))
    except (KeyError, ValueError, IndexError, UnicodeDecodeError) as error:
        return f"unreadable request: {error}", "", None
    subject = request["subject"]
    common_names = subject.get(COMMON_NAME, [])
    name = common_names[0][len(NODE_USER_PREFIX) :] if len(common_names) == 1 else ""
    if not name or common_names[0] != NODE_USER_PREFIX + name or subject.get(ORGANIZATION) != [NODES_GROUP]:
        return f"subject {subject} is not CN={NODE_USER_PREFIX}<name>, O={NODES_GROUP}", "", None
    if len(subject) != 2 or request["dns"] or request["ips"] or request["others"]:
        return "a name beside the node's own", "", None
    return "", name, request


def decide_renewal(csr, node, azure, machines):
    """``(verdict, reason)`` for a node's request, as itself, for a new client certificate: only for its own name,
    and only while Azure has the VM its Node's providerID names, under that name (``node_vm``)."""
    spec = csr["spec"]
    user = spec.get("username", "")
    if not user.startswith(NODE_USER_PREFIX) or NODES_GROUP not in spec.get("groups", []):
        return Verdict.DENY, f"requested by {user!r}, not by a node"
    reason, name, _ = read_client_request(spec)
    if reason:
        return Verdict.DENY, reason
    if NODE_USER_PREFIX + name != user:
        return Verdict.DENY, f"{user} asks for {name}'s certificate"
    if node is None:
        return Verdict.WAIT, f"no Node {name!r}"
    _, verdict, reason = node_vm(node, azure, machines)
    if verdict:
        return verdict, reason
    return Verdict.APPROVE, f"Azure still has VM {name}"


def cluster_vm(resource_id, subscription, machines):
    """``(kind, computer name prefix)`` of the VM ``resource_id`` names if it is one of this cluster's that may be
    a node, in ``subscription``: an instance of a scale set of the node resource group whose name has the node
    pools' prefix (the rest of its name is its instances' computer-name prefix), or a VM of the cluster's group
    with the NAT hosts' prefix (its computer name is its own name). None otherwise. By name, not by a list of
    pools, so a pool added after the apiservers were built joins without rolling them."""
    found = RESOURCE_ID.fullmatch(resource_id)
    if not found or found.group(1).lower() != subscription.lower():
        return None
    group, scale_set, _, vm = (part and part.lower() for part in found.group(2, 3, 4, 5))
    if scale_set:
        prefix = machines["scale_set_prefix"].lower()
        if group != machines["scale_set_group"].lower() or not scale_set.startswith(prefix) or scale_set == prefix:
            return None
        return ("scale set instance", scale_set[len(prefix) :])
    prefix = machines["vm_prefix"].lower()
    if group != machines["vm_group"].lower() or not vm.startswith(prefix) or vm == prefix:
        return None
    return ("NAT host", vm)


def check_document(document, public_key, subscription, nonce_length, now):
    """``(verdict, reason)`` for the JSON Azure signed: the nonce is the request's key's, it is fresh and of
    this subscription."""
    nonce = hashlib.sha256(public_key).hexdigest()[:nonce_length]
    if document.get("nonce") != nonce:
        return Verdict.DENY, "the attested document was made for another key"
    if str(document.get("subscriptionId", "")).lower() != subscription.lower():
        return Verdict.DENY, f"the attested document is of subscription {document.get('subscriptionId')!r}"
    try:
        created = datetime.datetime.strptime(document["timeStamp"]["createdOn"], AZURE_TIME)
        expires = datetime.datetime.strptime(document["timeStamp"]["expiresOn"], AZURE_TIME)
    except (KeyError, TypeError, ValueError) as error:
        return Verdict.DENY, f"the attested document has no readable time: {error}"
    age = (now - created).total_seconds()
    if not -60 <= age <= MAX_DOCUMENT_AGE or now >= expires:
        return Verdict.DENY, f"the attested document of {document['timeStamp']['createdOn']} is not fresh"
    return None, ""


def check_vm(vm, vm_id, name, rendered):
    """``(verdict, reason)`` for Azure Resource Manager's record of the VM the request names (and, unless
    ``vm_id`` is None, the one the attested document names)."""
    if vm is None:
        return Verdict.DENY, "Azure knows no such VM"
    properties = vm.get("properties", {})
    if vm_id is not None and str(properties.get("vmId", "")).lower() != str(vm_id).lower():
        return Verdict.DENY, f"the attested document is VM {vm_id}'s, not this VM's ({properties.get('vmId')})"
    computer = str(properties.get("osProfile", {}).get("computerName", "")).lower()
    kind, prefix = rendered
    if computer != name or not name.startswith(prefix):
        return Verdict.DENY, f"the VM is {computer!r}, a {kind} of prefix {prefix!r}, not {name!r}"
    return Verdict.APPROVE, f"Azure attests VM {vm_id}, {kind} {computer}"


def openssl(*args, stdin=None):
    done = subprocess.run(["openssl", *args], input=stdin, capture_output=True)
    if done.returncode != 0:
        raise ValueError(f"openssl {args[0]}: {done.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    return done.stdout


def verified_document(signature, config):
    """The JSON inside Azure's PKCS #7 ``signature`` once it verifies: signed by a certificate named
    ``attestation_signer`` that chains to ``attestation_roots``, with the issuers the document carries or its
    signer's Authority Information Access names (Azure's intermediates are fetched so: ``intermediates``).
    Raises ValueError, so a document that cannot be verified, for whatever reason, is denied."""
    with tempfile.TemporaryDirectory() as work:
        names = ("doc.der", "chain.pem", "signer.pem", "doc.json")
        der, chain, signer, content = (os.path.join(work, name) for name in names)
        with open(der, "wb") as handle:
            handle.write(base64.b64decode(signature, validate=True))
        carried = openssl("pkcs7", "-inform", "DER", "-in", der, "-print_certs")
        with open(chain, "wb") as handle:
            handle.write(carried + intermediates(carried, config))
        # Two steps: the signature with the signer's certificate, then that certificate's chain to the roots, with
        # the intermediates as untrusted (cms -verify builds its chain from the document's own certificates only,
        # not from -certfile). -purpose any: Azure's signer is a TLS certificate, which S/MIME's would refuse.
        openssl("cms", "-verify", "-inform", "DER", "-in", der, "-noverify", "-signer", signer, "-out", content)
        if not (os.path.getsize(signer) and os.path.getsize(content)):
            raise ValueError("openssl wrote no signer or content")
        openssl("verify", "-no-CApath", "-CAfile", config["attestation_roots"], "-untrusted", chain, "-purpose", "any",
                signer)
        subject = openssl("x509", "-in", signer, "-noout", "-subject", "-nameopt", "RFC2253")
        if common_name(subject) != config["attestation_signer"]:
            raise ValueError(f"signed by {subject.decode().strip()}, not {config['attestation_signer']}")
        with open(content) as handle:
            return json.load(handle)


def common_name(subject_line):
    """The CN of ``openssl x509 -subject -nameopt RFC2253``'s line (``subject=CN=...,O=...``)."""
    found = re.search(r"(^|[=,])CN=([^,]+)", subject_line.decode().split("=", 1)[1])
    return found.group(2).strip() if found else ""


def name_of(pem, which):
    """A certificate's ``subject`` or ``issuer`` (RFC 2253)."""
    return openssl("x509", "-noout", f"-{which}", "-nameopt", "RFC2253", stdin=pem).split(b"=", 1)[1].strip()


def intermediates(carried, config):
    """The certificates (PEM) at the ``CA Issuers`` URLs of the carried signer's certificate (the one named
    ``attestation_signer``; no other certificate's URLs are followed), fetched only over plain HTTP from
    ``intermediate_hosts``, with no redirect, and kept in ``intermediate_cache``: a cached one is used while its
    subject is the signer's issuer. Raises ValueError for a URL elsewhere or a fetch that fails. Nothing fetched
    is trusted: the chain must still verify to the roots."""
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", carried, re.S)
    signers = [b for b in blocks if common_name(b"subject=" + name_of(b, "subject")) == config["attestation_signer"]]
    if len(signers) != 1:
        raise ValueError(f"the document carries {len(signers)} certificates of {config['attestation_signer']}")
    issuer = name_of(signers[0], "issuer")
    access = openssl("x509", "-noout", "-ext", "authorityInfoAccess", stdin=signers[0])
    found = b""
    for url in (u.decode() for u in re.findall(rb"CA Issuers - URI:(\S+)", access)):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in config["intermediate_hosts"] or parts.port:
            raise ValueError(f"the signer's issuer is at {url}, not on {', '.join(config['intermediate_hosts'])}")
        cached = os.path.join(config["intermediate_cache"], hashlib.sha256(url.encode()).hexdigest() + ".pem")
        try:
            with open(cached, "rb") as handle:
                pem = handle.read()
            if name_of(pem, "subject") == issuer:
                found += pem
                continue
        except (OSError, ValueError):
            pass  # not cached yet, or unreadable: fetched again
        try:
            pem = openssl("x509", "-inform", "DER", stdin=fetch(url))
            os.makedirs(config["intermediate_cache"], exist_ok=True)
            with open(cached + ".tmp", "wb") as handle:
                handle.write(pem)
            os.replace(cached + ".tmp", cached)
        except OSError as error:
            raise ValueError(f"could not fetch or keep {url}: {error}") from error
        found += pem
    return found


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None  # a redirect is an error: it could lead off the allowed hosts


def fetch(url):
    """The body at ``url`` (a CA Issuers URL already checked against the allowed hosts), at most 64 KiB."""
    with urllib.request.build_opener(NoRedirect).open(url, timeout=TIMEOUT) as response:
        return response.read(65536)


class Azure:
    """What Azure says: this VM's subscription (IMDS), a VM's record and its NICs' (Resource Manager, as this VM's
    identity)."""

    def __init__(self, config):
        self.config = config
        self.own_subscription = None
        self.token, self.token_until = None, 0.0

    def bearer(self):
        """This VM's Resource Manager token, asked of IMDS at most once every ``TOKEN_REUSE_SECONDS``: each ask is
        two IMDS requests, and a burst of joining nodes makes a few Resource Manager reads each."""
        if self.token is None or time.monotonic() >= self.token_until:
            token = subprocess.run(self.config["token_command"], capture_output=True, text=True, timeout=120)
            if token.returncode != 0:
                raise OSError(f"no Azure token: {token.stderr.strip()}")
            self.token, self.token_until = token.stdout.strip(), time.monotonic() + TOKEN_REUSE_SECONDS
        return self.token

    def get(self, url, headers, context=None):
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            return json.load(response)

    def subscription(self):
        if self.own_subscription is None:
            query = urllib.parse.urlencode({"api-version": self.config["compute_api_version"]})
            url = f"{self.config['imds']}{self.config['compute_path']}?{query}"
            self.own_subscription = self.get(url, {"Metadata": "true"})["subscriptionId"]
        return self.own_subscription

    def arm(self, resource_id, api_version):
        """Resource Manager's answer for ``resource_id``, or None if Azure has no such resource."""
        query = urllib.parse.urlencode({"api-version": api_version})
        try:
            return self.read(f"{self.config['arm_endpoint']}{urllib.parse.quote(resource_id)}?{query}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def read(self, url):
        """A Resource Manager URL's answer, as this VM's identity; only Resource Manager's own endpoint."""
        if not url.startswith(self.config["arm_endpoint"] + "/"):
            raise ValueError(f"{url} is not Resource Manager's")
        context = ssl.create_default_context(cafile=self.config.get("arm_ca_file"))
        try:
            return self.get(url, {"Authorization": f"Bearer {self.bearer()}"}, context)
        except urllib.error.HTTPError as error:
            if error.code == 401:  # refused: the next read asks IMDS for a new token
                self.token = None
            raise

    def vm(self, resource_id):
        """The VM's record, or None if Azure has none."""
        return self.arm(resource_id, self.config["arm_api_version"])

    def nics(self, vm):
        """The NICs of ``vm`` (a record ``vm`` returned, its ``id`` the resource ID asked): a scale set's instance's
        listed under it, a VM's each read from its network profile. Raises OSError if one is missing."""
        version = self.config["network_api_version"]
        if RESOURCE_ID.fullmatch(vm["id"]).group(3):
            page = self.arm(vm["id"] + "/networkInterfaces", version) or {}
            nics = list(page.get("value", []))
            while page.get("nextLink"):  # a list is paged (Resource Manager's "nextLink"); a VM has one NIC or two
                page = self.read(page["nextLink"])
                nics += page.get("value", [])
            return nics
        nics = [self.arm(nic["id"], version) for nic in vm["properties"]["networkProfile"]["networkInterfaces"]]
        if None in nics:
            raise OSError(f"a NIC of {vm['id']} is not in Azure yet")
        return nics


def decide_client(csr, config, azure, now):
    """``(verdict, reason)`` for a bootstrap token's ``kubernetes.io/kube-apiserver-client-kubelet`` request.
    Azure not answering raises OSError (the request is looked at again)."""
    verdict, reason, facts = check_client_request(csr, config)
    if verdict:
        return verdict, reason
    subscription = azure.subscription()
    rendered = cluster_vm(facts["vm"], subscription, config["machines"])
    if rendered is None:
        return Verdict.DENY, f"{facts['vm']} is no node pool's or NAT host's VM of this cluster"
    try:
        document = verified_document(facts["document"], config)
    except ValueError as error:
        return Verdict.DENY, f"the attested document does not verify: {error}"
    verdict, reason = check_document(document, facts["public_key"], subscription, config["nonce_length"], now)
    if verdict:
        return verdict, reason
    return check_vm(azure.vm(facts["vm"]), document.get("vmId", ""), facts["name"], rendered)


# ---------------------------------------------------------------- the apiserver


class Api:
    def __init__(self, config):
        self.server = config["server"]
        # A new context per cycle: a renewed client certificate is read at the next relist.
        self.context = ssl.create_default_context(cafile=config["ca_cert"])
        self.context.load_cert_chain(config["cert"], config["key"])

    def call(self, method, path, body=None, timeout=TIMEOUT):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(request, timeout=timeout, context=self.context)

    def get(self, path):
        with self.call("GET", path) as response:
            return json.load(response)

    def node(self, name):
        try:
            return self.get("/api/v1/nodes/" + urllib.parse.quote(name, safe=""))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def watch(self, path, seconds):
        with self.call("GET", path, timeout=seconds + TIMEOUT) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    def conclude(self, csr, condition, reason, why):
        name = csr["metadata"]["name"]
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = csr.setdefault("status", {})
        status["conditions"] = [
            *(status.get("conditions") or []),
            {
                "type": condition,
                "status": "True",
                "reason": why,
                "message": reason,
                "lastUpdateTime": now,
            },
        ]
        with self.call("PUT", f"{CSRS}/{urllib.parse.quote(name, safe='')}/approval", csr):
            pass


class Standby(Exception):
    """This copy stopped leading mid-cycle: it decides nothing more until it leads again."""


class Leadership:
    """Whether this copy is the one that decides: it holds the approvers' Lease. Another holder's claim lapses when
    this copy has seen no renewal of it for ``duration_seconds`` by its own clock (not the holder's, which may
    differ); this copy stops deciding ``renew_deadline_seconds`` after its own last renewal, before any other may
    take over. No Lease at all: every copy decides (``absent``)."""

    def __init__(self, lease, identity, clock=time.monotonic):
        self.lease, self.identity, self.clock = lease, identity, clock
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{lease['namespace']}/leases/{lease['name']}"
        self.until = 0.0
        self.absent = False
        self.seen, self.seen_at = None, 0.0  # the holder and renewal last read, and when

    def leads(self):
        return self.absent or self.clock() < self.until

    def attempt(self, api):
        """One look at the Lease: renew it if this copy holds it, take it if the holder's claim lapsed. Returns
        what changed, for the log, or None."""
        before, now = self.leads(), self.clock()
        try:
            lease = api.get(self.path)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
            self.absent = True
            return None if before else f"no Lease {self.lease['name']}: every copy decides"
        self.absent = False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = (holder, spec.get("renewTime"))
        if record != self.seen:
            self.seen, self.seen_at = record, now
        if holder and holder != self.identity and now - self.seen_at < self.lease["duration_seconds"]:
            self.until = 0.0
            return f"{holder} decides" if before else None
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime
        taking = holder != self.identity
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease["duration_seconds"],
            "renewTime": stamp,
            **({"acquireTime": stamp, "leaseTransitions": spec.get("leaseTransitions", 0) + 1} if taking else {}),
        }
        try:
            with api.call("PUT", self.path, lease):
                pass
        except urllib.error.HTTPError as error:
            if error.code == 409:  # another copy wrote it first: read again next time
                return None
            raise
        self.seen, self.seen_at = (self.identity, stamp), now
        self.until = now + self.lease["renew_deadline_seconds"]
        return None if before else f"{self.identity} holds {self.lease['name']}: deciding requests"

    def hold(self, config, log):
        """Runs beside the approver: one attempt every ``retry_seconds``, whatever the apiserver answers (each
        change logged once, not every attempt)."""
        said = None
        while True:
            try:
                changed = self.attempt(Api(config))
            except (OSError, ValueError, KeyError) as error:
                changed = f"the Lease not read or renewed: {error}"
            if changed and changed != said:
                log(changed)
            said = changed
            time.sleep(self.lease["retry_seconds"])


class Approver:
    def __init__(self, config):
        self.config = config
        self.azure_api = Azure(config)
        # One copy per VM, named by the VM: a restarted copy renews its own claim at once.
        self.leadership = Leadership(config["lease"], socket.gethostname())
        self.logged = {}  # the last reason logged for each request left pending: no line per relist
        self.waiting = set()

    def log(self, text):
        print(f"csr-approver: {text}", flush=True)

    def verdict(self, api, csr):
        """``(verdict, reason, condition reason)``, or None for a request that is not this program's."""
        signer, user = csr["spec"].get("signerName"), csr["spec"].get("username", "")
        node, machines = None, self.config["machines"]
        if signer in (self.config["signer"], self.config["client_signer"]) and user.startswith(NODE_USER_PREFIX):
            node = api.node(user[len(NODE_USER_PREFIX) :])  # the apiserver not answering: the cycle retries
        try:
            if signer == self.config["signer"]:
                return (*decide(csr, node, self.azure_api, machines), "SuperclusterNodeAddresses")
            if signer == self.config["client_signer"] and user.startswith(BOOTSTRAP_USER_PREFIX):
                now = datetime.datetime.now(datetime.timezone.utc)
                return (*decide_client(csr, self.config, self.azure_api, now), "SuperclusterAttestedJoin")
            if signer == self.config["client_signer"] and user.startswith(NODE_USER_PREFIX):
                return (*decide_renewal(csr, node, self.azure_api, machines), "SuperclusterNodeRenewal")
        except (OSError, subprocess.SubprocessError, KeyError, ValueError) as error:
            return Verdict.WAIT, f"Azure did not answer: {error}", ""
        return None  # another signer, or a client request from someone else (an operator's to decide)

    def consider(self, api, csr):
        name = csr["metadata"]["name"]
        if not decided(csr) and not self.leadership.leads():
            raise Standby()
        found = None if decided(csr) else self.verdict(api, csr)
        if found is None:
            self.waiting.discard(name)
            self.logged.pop(name, None)
            return
        verdict, reason, why = found
        user = csr["spec"].get("username", "")
        if verdict == Verdict.WAIT:
            self.waiting.add(name)
            if self.logged.get(name) != reason:
                self.log(f"{name} ({user}) left pending: {reason}")
                self.logged[name] = reason
            return
        self.waiting.discard(name)
        self.logged.pop(name, None)
        condition = "Approved" if verdict == Verdict.APPROVE else "Denied"
        try:
            api.conclude(csr, condition, reason, why)
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
            self.log(f"{name}: changed meanwhile (another approver?), looked at again on its next event")
            return
        self.log(f"{name} ({user}) {condition.lower()}: {reason}")

    def cycle(self):
        """One list of the requests, then a watch from there until it times out (no field selector: a selector
        takes one signer, and requests are few)."""
        api = Api(self.config)
        listing = api.get(CSRS)
        self.waiting.clear()
        for csr in listing.get("items", []):
            self.consider(api, csr)
        seconds = WAITING if self.waiting else RESYNC
        version = listing["metadata"]["resourceVersion"]
        path = f"{CSRS}?watch=1&resourceVersion={version}&timeoutSeconds={seconds}"
        for event in api.watch(path, seconds):
            if event.get("type") in ("ADDED", "MODIFIED"):
                self.consider(api, event["object"])
                if self.waiting and seconds == RESYNC:
                    return  # relist and watch for WAITING seconds only, to look at it again soon
            elif event.get("type") == "ERROR":
                return  # e.g. 410 Gone: relist

    def run(self):
        signers = f"{self.config['signer']} and {self.config['client_signer']}"
        self.log(f"approving {signers} requests as {self.config['server']}, while it holds the Lease")
        threading.Thread(target=self.leadership.hold, args=(self.config, self.log), daemon=True).start()
        while True:
            if not self.leadership.leads():
                time.sleep(self.config["lease"]["retry_seconds"])
                continue
            try:
                self.cycle()
            except Standby:
                continue
            except (OSError, ValueError, KeyError, urllib.error.URLError) as error:
                self.log(f"{error}; retrying in {RETRY} s")
                time.sleep(RETRY)


def main(config_path):
    with open(config_path) as handle:
        config = json.load(handle)
    Approver(config).run()


if __name__ == "__main__":
    main(sys.argv[1])
