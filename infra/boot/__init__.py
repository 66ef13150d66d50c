"""What every VM boots with: cloud-init, systemd units, secrets from Key Vault, the local SSDs."""
