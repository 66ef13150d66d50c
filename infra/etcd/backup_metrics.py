"""How fresh the etcd backups are: published by the etcd machines, alerted on by Prometheus.

Every etcd machine serves these over plain HTTP (path /metrics) on METRICS_PORT, so the
alert does not depend on which member happens to be the uploader.
"""

# Unix time (seconds) of the newest snapshot in the cluster's backup container, whoever uploaded it.
LAST_SUCCESS_METRIC = "supercluster_etcd_backup_last_success_timestamp_seconds"
# Unix time (seconds) of this machine's last backup attempt, successful or not.
LAST_ATTEMPT_METRIC = "supercluster_etcd_backup_last_attempt_timestamp_seconds"
# Not used by etcd (2379 client, 2380 peer, 2381 metrics) nor by any add-on.
METRICS_PORT = 9479
