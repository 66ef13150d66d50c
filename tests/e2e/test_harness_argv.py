"""The box harness starts a command only as systemd would run it: a word still holding a ``${NAME}`` systemd would
have replaced (the rendered control-plane units' ``${MACHINE_ADDRESS}``) is refused before anything starts."""

from __future__ import annotations

import pytest

from tests.e2e import hosts


def _network_and_host(tmp_path) -> tuple[hosts.TestNetwork, hosts.Host]:
    network = hosts.TestNetwork(prefix="argv-check", workdir=tmp_path, binaries=tmp_path)
    return network, hosts.Host(name="apiserver-0", namespace="argv-check-h0", addresses=("10.0.0.4/24",), root=tmp_path)


def test_a_command_holding_a_variable_systemd_would_replace_is_refused(tmp_path):
    network, host = _network_and_host(tmp_path)
    with pytest.raises(ValueError, match=r"'--bind-address=\$\{MACHINE_ADDRESS\}' holds a variable"):
        network.run(host, ["kube-scheduler", "--bind-address=${MACHINE_ADDRESS}"])
    with pytest.raises(ValueError, match="use unit_argv"):
        network.start(host, "kube-apiserver", ["kube-apiserver"], pre=[["wait-for", "${MACHINE_ADDRESS}:6443"]])


def test_shell_defaults_and_replaced_words_pass(tmp_path):
    network, host = _network_and_host(tmp_path)
    wrapped = network._wrapped(host, ["sh", "-c", 'echo "${INTERVAL_SECONDS:-}"', "--bind-address=10.0.0.4"])
    assert wrapped[-2:] == ['echo "${INTERVAL_SECONDS:-}"', "--bind-address=10.0.0.4"]
