"""The fields of ``KubeletConfiguration`` (kubelet.config.k8s.io/v1beta1), vendored to check our config.

Copied from the json tags of kubernetes/kubernetes
staging/src/k8s.io/kubelet/config/v1beta1/types.go (commit 001332b0; ``KubeletConfiguration``
and its nested ``KubeletAuthentication``/``KubeletAuthorization`` types). A name that is
not here is a typo kubelet would reject (it decodes config files strictly).
"""

from __future__ import annotations

from typing import Any

TOP_LEVEL = frozenset(
    {
        "apiVersion",
        "kind",
        "enableServer",
        "staticPodPath",
        "podLogsDir",
        "syncFrequency",
        "fileCheckFrequency",
        "httpCheckFrequency",
        "staticPodURL",
        "staticPodURLHeader",
        "address",
        "port",
        "readOnlyPort",
        "tlsCertFile",
        "tlsPrivateKeyFile",
        "tlsCipherSuites",
        "tlsCurvePreferences",
        "tlsMinVersion",
        "rotateCertificates",
        "serverTLSBootstrap",
        "authentication",
        "authorization",
        "registryPullQPS",
        "registryBurst",
        "imagePullCredentialsVerificationPolicy",
        "preloadedImagesVerificationAllowlist",
        "eventRecordQPS",
        "eventBurst",
        "enableDebuggingHandlers",
        "enableContentionProfiling",
        "healthzPort",
        "healthzBindAddress",
        "oomScoreAdj",
        "clusterDomain",
        "clusterDNS",
        "streamingConnectionIdleTimeout",
        "nodeStatusUpdateFrequency",
        "nodeStatusReportFrequency",
        "nodeLeaseDurationSeconds",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "volumeStatsAggPeriod",
        "kubeletCgroups",
        "systemCgroups",
        "cgroupRoot",
        "cgroupsPerQOS",
        "cgroupDriver",
        "cpuManagerPolicy",
        "singleProcessOOMKill",
        "cpuManagerPolicyOptions",
        "cpuManagerReconcilePeriod",
        "draManagerReconcilePeriod",
        "memoryManagerPolicy",
        "topologyManagerPolicy",
        "topologyManagerScope",
        "topologyManagerPolicyOptions",
        "qosReserved",
        "runtimeRequestTimeout",
        "hairpinMode",
        "maxPods",
        "podCIDR",
        "podPidsLimit",
        "resolvConf",
        "runOnce",
        "cpuCFSQuota",
        "cpuCFSQuotaPeriod",
        "nodeStatusMaxImages",
        "maxOpenFiles",
        "contentType",
        "kubeAPIQPS",
        "kubeAPIBurst",
        "serializeImagePulls",
        "maxParallelImagePulls",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "evictionPressureTransitionPeriod",
        "evictionMaxPodGracePeriod",
        "evictionMinimumReclaim",
        "mergeDefaultEvictionSettings",
        "podsPerCore",
        "enableControllerAttachDetach",
        "protectKernelDefaults",
        "makeIPTablesUtilChains",
        "iptablesMasqueradeBit",
        "iptablesDropBit",
        "featureGates",
        "failSwapOn",
        "memorySwap",
        "containerLogMaxSize",
        "containerLogMaxFiles",
        "containerLogMaxWorkers",
        "containerLogMonitorInterval",
        "configMapAndSecretChangeDetectionStrategy",
        "systemReserved",
        "kubeReserved",
        "reservedSystemCPUs",
        "showHiddenMetricsForVersion",
        "systemReservedCgroup",
        "kubeReservedCgroup",
        "enforceNodeAllocatable",
        "allowedUnsafeSysctls",
        "volumePluginDir",
        "providerID",
        "kernelMemcgNotification",
        "logging",
        "enableSystemLogHandler",
        "enableSystemLogQuery",
        "shutdownGracePeriod",
        "shutdownGracePeriodCriticalPods",
        "shutdownGracePeriodByPodPriority",
        "crashLoopBackOff",
        "reservedMemory",
        "enableProfilingHandler",
        "enableDebugFlagsHandler",
        "seccompDefault",
        "memoryThrottlingFactor",
        "memoryReservationPolicy",
        "registerWithTaints",
        "registerNode",
        "tracing",
        "localStorageCapacityIsolation",
        "containerRuntimeEndpoint",
        "imageServiceEndpoint",
        "failCgroupV1",
        "userNamespaces",
    }
)
AUTHENTICATION = {"x509": {"clientCAFile"}, "webhook": {"enabled", "cacheTTL"}, "anonymous": {"enabled"}}
AUTHORIZATION = {"mode": None, "webhook": {"cacheAuthorizedTTL", "cacheUnauthorizedTTL"}}
TAINT = frozenset({"key", "value", "effect", "timeAdded"})  # core/v1 Taint


def unknown_fields(document: dict[str, Any]) -> list[str]:
    """Dotted paths of every field in ``document`` that KubeletConfiguration does not have."""
    unknown = [key for key in document if key not in TOP_LEVEL]
    for section, allowed in (("authentication", AUTHENTICATION), ("authorization", AUTHORIZATION)):
        for key, value in (document.get(section) or {}).items():
            if key not in allowed:
                unknown.append(f"{section}.{key}")
            elif isinstance(value, dict):
                unknown += [f"{section}.{key}.{sub}" for sub in value if sub not in (allowed[key] or ())]
    for i, taint in enumerate(document.get("registerWithTaints") or []):
        unknown += [f"registerWithTaints[{i}].{key}" for key in taint if key not in TAINT]
    return unknown
