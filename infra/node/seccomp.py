"""Seccomp on every node: no container runs Unconfined unless it asks to.

kubelet's ``seccompDefault`` (GA since Kubernetes 1.27) gives every container that names no profile the
runtime's default, containerd's RuntimeDefault. That profile refuses ``mbind``, ``set_mempolicy`` and
``get_mempolicy`` to a container without ``CAP_SYS_NICE`` (which Pod Security ``baseline`` does not let a
tenant add) and has no ``migrate_pages`` or ``move_pages``: the calls NUMA-pinned training makes (libnuma,
NCCL's and the data loaders' CPU and memory binding). So one Localhost profile, ``supercluster/numa.json``, is on every
node for the pods that need them (``securityContext.seccompProfile``: ``type: Localhost``,
``localhostProfile: supercluster/numa.json``; ``baseline`` admits it).

The NUMA profile is an allowlist: every call it does not name is refused with EPERM, as RuntimeDefault
refuses them. It names what RuntimeDefault allows a container with containerd's default capabilities
(``RUNTIME_DEFAULT_ALLOWED`` and the conditional rules in ``numa_profile``: ``socket`` but not AF_VSOCK, five
``personality`` values, ``clone`` without a namespace flag, ``clone3`` answered ENOSYS), plus the five NUMA
calls, minus io_uring's three calls, which RuntimeDefault of the containerd 1.7 line still allows and this
profile refuses (a stricter choice of this project: io_uring has been a recurring source of kernel privilege
escalations, and the denylist profile before this one refused it too). A call newer than the list is refused, as it is
under RuntimeDefault. The set was read from containerd's own default profile for the pinned release
(``versions.CONTAINERD_VERSION``, its ``contrib/seccomp`` package, for x86_64 and a kernel of 4.8 or later);
``tests/infra/test_seccomp_allowlist.py`` builds that package from its Go module and compares. It is a
profile a pod opts into; everything else stays under RuntimeDefault.

``/var/lib/kubelet`` is a bind mount from the local SSDs (infra/node/state_disk.py), so the profile is
written under /etc/kubernetes and copied into kubelet's seccomp root on every boot, after the mount and
before kubelet.
"""

from __future__ import annotations

import json
from typing import Any

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.facts.host_paths import KUBELET_ROOT
from infra.node import state_disk

UNIT = "supercluster-seccomp-profiles.service"
# kubelet resolves a Localhost profile under <root-dir>/seccomp (kubernetes.io "Restrict a Container's
# Syscalls with seccomp").
PROFILE_ROOT = f"{KUBELET_ROOT}/seccomp"
NUMA_PROFILE = "supercluster/numa.json"  # what a pod names as localhostProfile
SOURCE_DIR = "/etc/kubernetes/seccomp"

# The NUMA calls RuntimeDefault refuses an unprivileged container, which the profile exists to allow.
NUMA_SYSCALLS = ("mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages")
# What RuntimeDefault (containerd 1.7.29) allows, with no condition on arguments, a container holding
# containerd's default capabilities, on x86_64 (its 32-bit names included: the profile covers the x86 and
# x32 ABIs too) with a kernel of 4.8 or later. Names only, in alphabetical order.
RUNTIME_DEFAULT_ALLOWED = tuple(
    """
    _llseek _newselect
    accept accept4 access adjtimex alarm arch_prctl
    bind brk
    cachestat capget capset chdir chmod chown chown32 chroot clock_adjtime clock_adjtime64 clock_getres
    clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range
    connect copy_file_range creat
    dup dup2 dup3
    epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old
    eventfd eventfd2 execve execveat exit exit_group
    faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown
    fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat
    fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_requeue futex_time64 futex_wait
    futex_waitv futex_wake futimesat
    get_robust_list get_thread_area getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid
    getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom
    getresgid getresgid32 getresuid getresuid32 getrlimit getrusage getsid getsockname getsockopt gettid
    gettimeofday getuid getuid32 getxattr
    inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents
    io_pgetevents io_pgetevents_time64 io_setup io_submit io_uring_enter io_uring_register io_uring_setup ioctl
    ioprio_get ioprio_set ipc
    kill
    landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat
    listen listxattr llistxattr lremovexattr lseek lsetxattr lstat lstat64
    madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock
    mlock2 mlockall mmap mmap2 modify_ldt mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
    mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget msgrcv msgsnd msync
    munlock munlockall munmap
    name_to_handle_at nanosleep newfstatat
    open openat openat2
    pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64
    prctl pread64 preadv preadv2 prlimit64 process_mrelease process_vm_readv process_vm_writev pselect6
    pselect6_time64 ptrace pwrite64 pwritev pwritev2
    read readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
    removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
    rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
    sched_get_priority_max sched_get_priority_min sched_getaffinity sched_getattr sched_getparam
    sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr
    sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
    semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto set_robust_list set_thread_area
    set_tid_address setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer
    setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32
    setrlimit setsid setsockopt setuid setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd
    signalfd4 sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx symlink
    symlinkat sync sync_file_range syncfs sysinfo
    tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime
    timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times
    tkill truncate truncate64
    ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes
    vfork vmsplice
    wait4 waitid waitpid write writev
    """.split()  # noqa: SIM905 - 361 names, one line per letter, are read more easily than one per line
)
# Allowed by RuntimeDefault, refused here (module docstring).
REFUSED_BESIDES = ("io_uring_setup", "io_uring_enter", "io_uring_register")
AF_VSOCK = 40  # linux/socket.h: RuntimeDefault allows socket() for every address family but this one
# The personality(2) values RuntimeDefault allows (sys/personality.h): PER_LINUX, UNAME26, ADDR_NO_RANDOMIZE,
# both of those, and 0xffffffff (a query that changes nothing).
PERSONALITIES = (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF)
# clone(2) with any of these flags makes a namespace (linux/sched.h): refused, plain clone allowed.
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
EPERM, ENOSYS = 1, 38  # asm-generic/errno-base.h, errno.h


def allowed() -> tuple[str, ...]:
    """Every call the profile allows whatever its arguments: RuntimeDefault's, the NUMA calls, not io_uring."""
    return tuple(sorted((set(RUNTIME_DEFAULT_ALLOWED) | set(NUMA_SYSCALLS)) - set(REFUSED_BESIDES)))


def numa_profile() -> dict[str, Any]:
    """The Localhost profile, in the format kubelet hands containerd (the OCI runtime spec's seccomp fields)."""
    allow = "SCMP_ACT_ALLOW"
    namespace_flags = sum(CLONE_NAMESPACE_FLAGS.values())
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [
            {"names": list(allowed()), "action": allow},
            {"names": ["socket"], "action": allow, "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}]},
            *(
                {"names": ["personality"], "action": allow, "args": [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}]}
                for value in PERSONALITIES
            ),
            # Allowed when (flags & namespace_flags) == 0.
            {
                "names": ["clone"],
                "action": allow,
                "args": [{"index": 0, "value": namespace_flags, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
            },
            # clone3 passes its flags in memory seccomp cannot read: ENOSYS, so the C library falls back to
            # clone, whose flags the rule above sees (as RuntimeDefault does).
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
        ],
    }


def add_seccomp(cloud: CloudConfig) -> None:
    source = f"{SOURCE_DIR}/{NUMA_PROFILE.rsplit('/', 1)[1]}"
    # Compact and compressed: customData is bounded (infra/boot/cloudinit.py); the plan's files show it decoded.
    cloud.add(source, json.dumps(numa_profile(), separators=(",", ":")) + "\n", compressed=True)
    target = f"{PROFILE_ROOT}/{NUMA_PROFILE}"
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Seccomp profiles into kubelet's seccomp root (on the local SSDs, fresh each boot)",
            ["/usr/bin/install", "-D", "-m", "0644", source, target],
            after=[state_disk.UNIT],
            requires=[state_disk.UNIT],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
        ),
    )
