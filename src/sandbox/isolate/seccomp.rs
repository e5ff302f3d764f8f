//! The seccomp filter of every session, build and verification.
//!
//! At least as strict as Docker's default profile for what matters to a
//! sandbox escape: no kernel modules, keyrings, BPF, perf events, file
//! handles (`open_by_handle_at`), new mounts, namespace changes (`unshare`,
//! `setns`, `clone` with a namespace flag), clock changes, `kexec`, swap,
//! reboot, `userfaultfd` or io_uring; no terminal input injection (`ioctl`
//! `TIOCSTI`, `TIOCLINUX`, as in Docker's profile: a process that reaches the
//! operator's terminal must not type into it); no `AF_VSOCK` sockets (no
//! network namespace isolates them: they reach the hypervisor and the host's
//! VM sockets). Everything else is allowed, so `apt-get`,
//! `dpkg`, `pip`, compilers, debuggers (`ptrace`) and services keep working.
//!
//! Two programs: the deny list answers `EPERM`; `clone3` answers `ENOSYS`
//! (its flags sit in memory a filter cannot read, and `ENOSYS` makes libc
//! fall back to `clone`, whose flags the deny list checks).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::sandbox::SandboxError;

/// System calls no sandboxed process may make.
fn denied() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_acct,
        libc::SYS_add_key,
        libc::SYS_bpf,
        libc::SYS_clock_adjtime,
        libc::SYS_clock_settime,
        libc::SYS_delete_module,
        libc::SYS_finit_module,
        libc::SYS_init_module,
        libc::SYS_kcmp,
        libc::SYS_kexec_file_load,
        libc::SYS_kexec_load,
        libc::SYS_keyctl,
        libc::SYS_request_key,
        libc::SYS_lookup_dcookie,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_perf_event_open,
        libc::SYS_quotactl,
        libc::SYS_reboot,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_settimeofday,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_fanotify_init,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_nfsservctl,
        libc::SYS_ioperm,
        libc::SYS_iopl,
        libc::SYS__sysctl,
        libc::SYS_sysfs,
        libc::SYS_uselib,
        libc::SYS_ustat,
    ]);
    calls
}

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: [i32; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

fn arch() -> Result<TargetArch, SandboxError> {
    std::env::consts::ARCH.try_into().map_err(|_| {
        SandboxError::Start(format!("no seccomp filter for {}", std::env::consts::ARCH))
    })
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SandboxError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()?)
        .map_err(|e| SandboxError::Start(format!("seccomp filter: {e}")))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SandboxError::Start(format!("seccomp filter: {e}")))
}

/// `ioctl` requests that push bytes into a terminal's input queue
/// (`TIOCSTI`) or drive the Linux console (`TIOCLINUX`, which can also
/// paste a selection as input).
#[allow(clippy::unnecessary_cast)] // `libc::Ioctl` is not u64 on every architecture
const TERMINAL_INJECTION: [u64; 2] = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// `AF_VSOCK`: host/VM sockets, which no network namespace isolates. Denied
/// to every process, with or without network access (tasks with network
/// reach the internet through `pasta`, never through vsock), which is
/// stricter than "unless the task has network" and needs no second filter.
const AF_VSOCK: u64 = libc::AF_VSOCK as u64;

/// A rule matching argument `arg` (compared as `len`) equal to `value`.
fn arg_equals(arg: u8, len: SeccompCmpArgLen, value: u64) -> Result<SeccompRule, SandboxError> {
    SeccompCondition::new(arg, len, SeccompCmpOp::Eq, value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| SandboxError::Start(format!("seccomp rule: {e}")))
}

/// The two filter programs (deny list, then `clone3`), in load order.
pub fn programs() -> Result<Vec<BpfProgram>, SandboxError> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
        denied().into_iter().map(|nr| (nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            let flag = *flag as u32 as u64;
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| SandboxError::Start(format!("seccomp rule: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    deny.insert(libc::SYS_clone, clone_rules);
    // The kernel reads an ioctl request as a 32-bit `unsigned int`: compare
    // the low 32 bits only, so set high bits do not slip past.
    let ioctl_rules = TERMINAL_INJECTION
        .iter()
        .map(|req| arg_equals(1, SeccompCmpArgLen::Dword, *req))
        .collect::<Result<Vec<_>, _>>()?;
    deny.insert(libc::SYS_ioctl, ioctl_rules);
    // The family is an `int`: likewise only its low 32 bits count.
    deny.insert(
        libc::SYS_socket,
        vec![arg_equals(0, SeccompCmpArgLen::Dword, AF_VSOCK)?],
    );
    let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, Vec::new())].into();
    Ok(vec![
        compile(deny, SeccompAction::Errno(libc::EPERM as u32))?,
        compile(clone3, SeccompAction::Errno(libc::ENOSYS as u32))?,
    ])
}

/// A one-line account of the filter for `sandbox doctor`, or why it cannot load.
pub fn summary() -> Result<String, String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Err("this kernel has no seccomp".into());
    }
    let p = programs().map_err(|e| e.to_string())?;
    Ok(format!(
        "{} system calls denied (mounts, namespaces, keyrings, BPF, perf, file handles, kexec, clocks, io_uring), \
         clone with namespace flags, ioctl TIOCSTI/TIOCLINUX and AF_VSOCK sockets denied, clone3 answers ENOSYS; \
         {} BPF instructions; no_new_privs",
        denied().len() + 1,
        p.iter().map(|x| x.len()).sum::<usize>()
    ))
}

/// The raw bytes of a program, as `bwrap --add-seccomp-fd` reads them.
pub fn bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

/// Each of `programs` in a memory file positioned at its start, for
/// `bwrap --add-seccomp-fd`.
pub fn program_files(programs: &[BpfProgram]) -> Result<Vec<OwnedFd>, SandboxError> {
    programs
        .iter()
        .map(|p| {
            // SAFETY: memfd_create returns a fresh descriptor we then own.
            let fd = unsafe { libc::memfd_create(c"endless-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(SandboxError::io("create seccomp memfd", "memfd")(
                    std::io::Error::last_os_error(),
                ));
            }
            // SAFETY: fd is valid and owned by nobody else.
            let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
            file.write_all(&bytes(p))
                .map_err(SandboxError::io("write seccomp program", "memfd"))?;
            std::io::Seek::rewind(&mut file)
                .map_err(SandboxError::io("rewind seccomp program", "memfd"))?;
            Ok(OwnedFd::from(file))
        })
        .collect()
}

/// Load `programs` into the calling thread, after setting `no_new_privs`.
///
/// # Safety
/// Meant for `pre_exec`: makes only `prctl` calls and allocates nothing.
pub unsafe fn load(programs: &[BpfProgram]) -> std::io::Result<()> {
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for p in programs {
            let prog = libc::sock_fprog {
                len: p.len() as u16,
                filter: p.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const _,
            ) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_compile_for_this_machine() {
        let p = programs().expect("filters compile");
        assert_eq!(p.len(), 2);
        assert!(p[0].len() > denied().len(), "every denied call has a jump");
        assert_eq!(bytes(&p[1]).len(), p[1].len() * 8);
    }
}
