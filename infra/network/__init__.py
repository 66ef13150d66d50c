"""The network: address plan, security groups, hub peering, egress, and the iptables rules machines load."""
