#!/usr/bin/python3
"""supercluster: approves a kubelet's serving certificate request only for the names its Node registered.

kube-controller-manager signs ``kubernetes.io/kubelet-serving`` requests with the cluster CA once they are
approved, and never approves one itself. This program, on every apiserver VM, approves a request when:
it was sent by ``system:node:<name>`` (group ``system:nodes``); its subject is exactly that user in
organization ``system:nodes``; it asks for no usage beyond digital signature, key encipherment and server
auth (server auth included); it names at least one DNS or IP name and nothing else (no e-mail, URI or other
name); the Node ``<name>`` exists; and every DNS name is one of that Node's Hostname/InternalDNS/ExternalDNS
addresses and every IP one of its InternalIP/ExternalIP addresses. A request that can never pass (wrong
requester, subject, usage or kind of name) is denied; one that may pass later (no such Node yet, a name not
yet among its addresses) is left pending and looked at again. Each decision is logged with its reason.

Every apiserver runs a copy: an approval is an update with the request's resourceVersion, so when two copies
decide at once the apiserver takes one and answers the other 409, which is logged and skipped.
Usage: supercluster-csr-approver CONFIG_JSON   (rendered by infra/control_plane/csr_approval.py)
"""

import base64
import datetime
import ipaddress
import json
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}
REQUIRED_USAGE = "server auth"
DNS_ADDRESS_TYPES = {"Hostname", "InternalDNS", "ExternalDNS"}
IP_ADDRESS_TYPES = {"InternalIP", "ExternalIP"}
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


class Verdict:
    APPROVE, DENY, WAIT = "approve", "deny", "wait"


# ---------------------------------------------------------------- the request (DER, PKCS #10)


def der_elements(data):
    """``[(tag, content), ...]`` of the DER elements that ``data`` holds one after another."""
    elements, at = [], 0
    while at < len(data):
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
        elements.append((tag, data[at : at + length]))
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
    """The subject attributes (``{oid: [values]}``) and the alternative names (``dns``, ``ips``, ``others``:
    how many names of any other kind) of a PKCS #10 request."""
    ((_, request),) = der_elements(der)
    _, info = der_elements(request)[0]
    _, subject, _, *attributes = der_elements(info)
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
    return {"subject": names, "dns": dns, "ips": ips, "others": others}


# ---------------------------------------------------------------- the decision


def decide(csr, node):
    """``(verdict, reason)`` for a ``kubernetes.io/kubelet-serving`` request ``csr`` and the Node its requester
    names (``None`` if there is none)."""
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
    addresses = node.get("status", {}).get("addresses", [])
    dns = {a["address"] for a in addresses if a.get("type") in DNS_ADDRESS_TYPES}
    ips = set()
    for address in addresses:
        if address.get("type") in IP_ADDRESS_TYPES:
            try:
                ips.add(str(ipaddress.ip_address(address["address"])))
            except ValueError:
                continue
    foreign = [name for name in request["dns"] if name not in dns] + [ip for ip in request["ips"] if ip not in ips]
    if foreign:
        return Verdict.WAIT, f"{', '.join(foreign)} not among Node {node_name}'s addresses"
    return Verdict.APPROVE, f"every name is among Node {node_name}'s addresses"


def pem_body(pem):
    """The base64 between a PEM's BEGIN and END lines (one block: a request is one)."""
    lines = pem.decode("ascii").strip().splitlines()
    if len(lines) < 3 or not lines[0].startswith("-----BEGIN ") or not lines[-1].startswith("-----END "):
        raise ValueError("not a PEM block")
    return "".join(lines[1:-1])


def decided(csr):
    return any(c.get("type") in FINAL_CONDITIONS for c in csr.get("status", {}).get("conditions") or [])


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

    def conclude(self, csr, condition, reason):
        name = csr["metadata"]["name"]
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = csr.setdefault("status", {})
        status["conditions"] = [
            *(status.get("conditions") or []),
            {
                "type": condition,
                "status": "True",
                "reason": "SuperclusterNodeAddresses",
                "message": reason,
                "lastUpdateTime": now,
            },
        ]
        with self.call("PUT", f"{CSRS}/{urllib.parse.quote(name, safe='')}/approval", csr):
            pass


class Approver:
    def __init__(self, config):
        self.config = config
        self.selector = urllib.parse.quote(f"spec.signerName={config['signer']}", safe="")
        self.logged = {}  # the last reason logged for each request left pending: no line per relist
        self.waiting = set()

    def log(self, text):
        print(f"csr-approver: {text}", flush=True)

    def consider(self, api, csr):
        name = csr["metadata"]["name"]
        if csr["spec"].get("signerName") != self.config["signer"] or decided(csr):
            self.waiting.discard(name)
            self.logged.pop(name, None)
            return
        user = csr["spec"].get("username", "")
        node = api.node(user[len(NODE_USER_PREFIX) :]) if user.startswith(NODE_USER_PREFIX) else None
        verdict, reason = decide(csr, node)
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
            api.conclude(csr, condition, reason)
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
            self.log(f"{name}: changed meanwhile (another approver?), looked at again on its next event")
            return
        self.log(f"{name} ({user}) {condition.lower()}: {reason}")

    def cycle(self):
        """One list of the signer's requests, then a watch from there until it times out."""
        api = Api(self.config)
        listing = api.get(f"{CSRS}?fieldSelector={self.selector}")
        self.waiting.clear()
        for csr in listing.get("items", []):
            self.consider(api, csr)
        seconds = WAITING if self.waiting else RESYNC
        version = listing["metadata"]["resourceVersion"]
        path = f"{CSRS}?watch=1&fieldSelector={self.selector}&resourceVersion={version}&timeoutSeconds={seconds}"
        for event in api.watch(path, seconds):
            if event.get("type") in ("ADDED", "MODIFIED"):
                self.consider(api, event["object"])
                if self.waiting and seconds == RESYNC:
                    return  # relist and watch for WAITING seconds only, to look at it again soon
            elif event.get("type") == "ERROR":
                return  # e.g. 410 Gone: relist

    def run(self):
        self.log(f"approving {self.config['signer']} requests as {self.config['server']}")
        while True:
            try:
                self.cycle()
            except (OSError, ValueError, KeyError, urllib.error.URLError) as error:
                self.log(f"{error}; retrying in {RETRY} s")
                time.sleep(RETRY)


def main(config_path):
    with open(config_path) as handle:
        config = json.load(handle)
    Approver(config).run()


if __name__ == "__main__":
    main(sys.argv[1])
