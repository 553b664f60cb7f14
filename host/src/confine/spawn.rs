//! Starting a confined command: one `clone` straight into a new user and PID namespace,
//! sharing mur's memory until the child execs (as `posix_spawn` does), so no copy of
//! mur's page tables is made and nothing of mur stays resident beside the command. The
//! child is process 1 of its namespace: when it ends, is killed or times out, the kernel
//! kills every process it started.
//!
//! The clone runs on one long-lived thread of its own: a child's parent-death signal
//! follows the thread that made it, and this thread lives as long as mur, so a command
//! dies with mur and never with a worker thread that happened to retire.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::sync::mpsc;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// What to run, and where.
pub struct Request<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
}

/// A started command: its process and the read ends of its output.
pub struct Started {
    pub process: Process,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// A started server: a command whose standard input is a pipe mur writes to.
pub struct Served {
    pub process: Process,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// Where the child's standard input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`: a shell command reads nothing, so one waiting for input ends at once.
    Null,
    /// A pipe whose write end the parent keeps (a server's requests).
    Piped,
}

/// What [`launch`] started, whichever its standard input.
pub struct Launched {
    pub process: Process,
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

impl Launched {
    /// As a command's: its standard input (`/dev/null`) has no end here.
    pub fn started(self) -> Started {
        Started {
            process: self.process,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }

    /// As a server's.
    ///
    /// # Errors
    ///
    /// It was launched without a stdin pipe (the process is killed as it drops).
    pub fn served(self) -> io::Result<Served> {
        let stdin = self
            .stdin
            .ok_or_else(|| io::Error::other("the server was started without a stdin pipe"))?;
        Ok(Served {
            process: self.process,
            stdin,
            stdout: self.stdout,
            stderr: self.stderr,
        })
    }
}

/// The steps the child takes after its standard streams and directory are set; they
/// receive the child's own descriptors and run between clone and exec.
pub type Enter = Box<dyn Fn() -> io::Result<()> + Send + Sync>;

/// Everything the child touches, built before the clone. The raw pointers point into
/// the `CString`s held beside them, whose heap buffers do not move.
struct Plan {
    program: CString,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// The write end of the pipe that carries an errno back if exec is never reached.
    report: OwnedFd,
    enter: Enter,
    stack: Vec<u8>,
}

// SAFETY: the raw pointers point into buffers owned by this same value, which moves
// whole to the spawner thread and is only read there.
unsafe impl Send for Plan {}

const STACK_BYTES: usize = 256 * 1024;

impl Plan {
    fn new(req: &Request<'_>, input: Stdin, enter: Enter) -> io::Result<(Plan, Pipes)> {
        let program = c_string(req.program.as_bytes())?;
        let mut argv_owned = vec![program.clone()];
        for arg in req.args {
            argv_owned.push(c_string(arg.as_bytes())?);
        }
        let envp_owned = req
            .env
            .iter()
            .map(|(k, v)| c_string(format!("{k}={v}").as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let argv = null_terminated(&argv_owned);
        let envp = null_terminated(&envp_owned);
        let (out_read, out_write) = pipe_pair()?;
        let (err_read, err_write) = pipe_pair()?;
        let (report_read, report_write) = pipe_pair()?;
        let (stdin, stdin_write) = match input {
            Stdin::Null => (std::fs::File::open("/dev/null")?.into(), None),
            Stdin::Piped => {
                let (read, write) = pipe_pair()?;
                (read, Some(write))
            }
        };
        let plan = Plan {
            program,
            _argv: argv_owned,
            argv,
            _envp: envp_owned,
            envp,
            cwd: c_string(req.cwd.as_os_str().as_bytes())?,
            stdin,
            stdout: out_write,
            stderr: err_write,
            report: report_write,
            enter,
            stack: vec![0u8; STACK_BYTES],
        };
        let pipes = Pipes {
            stdin: stdin_write,
            stdout: out_read,
            stderr: err_read,
            report: report_read,
        };
        Ok((plan, pipes))
    }
}

/// The parent's ends.
struct Pipes {
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    report: OwnedFd,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::other("an argument or variable holds a NUL byte"))
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills the two-element array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `req` in new namespaces (`flags`: `CLONE_NEWUSER | CLONE_NEWPID`, and
/// `CLONE_NEWNS` for the sealed root), its standard input as `input` says; `enter` then
/// confines the child before it execs. With `flags` 0 the child gets no namespace of its
/// own (an `advisory` server), only its process group.
///
/// # Errors
///
/// The pipes, the clone or the child's steps failed; the command did not run.
pub async fn launch(
    req: &Request<'_>,
    input: Stdin,
    flags: libc::c_int,
    enter: Enter,
) -> io::Result<Launched> {
    let (plan, pipes) = Plan::new(req, input, enter)?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = reply.send(clone_child(plan, flags));
    });
    spawner()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send(job)
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    let pid = answer
        .await
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))??;
    // SAFETY: the child is ours and unreaped, so its pid names it.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        let e = io::Error::last_os_error();
        kill_and_reap(pid);
        return Err(e);
    }
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    if let Some(errno) = child_error(&pipes.report) {
        reap(&pidfd);
        return Err(io::Error::from_raw_os_error(errno));
    }
    // SAFETY: the pidfd is owned by the AsyncFd from here on and stays open while it is
    // registered (it closes only when the AsyncFd is dropped or taken apart).
    let pidfd =
        match unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) } {
            Ok(pidfd) => pidfd,
            Err(e) => {
                let (pidfd, cause) = e.into_parts();
                send_kill(&pidfd);
                reap(&pidfd);
                return Err(cause);
            }
        };
    Ok(Launched {
        process: Process {
            pid,
            pidfd: Some(pidfd),
        },
        stdin: pipes.stdin.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: pipe::Receiver::from_owned_fd(pipes.stdout)?,
        stderr: pipe::Receiver::from_owned_fd(pipes.stderr)?,
    })
}

/// The errno the child sent before exiting, or `None` once exec closed the pipe.
fn child_error(report: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    loop {
        // SAFETY: read into a local four-byte buffer.
        let n = unsafe { libc::read(report.as_raw_fd(), buf.as_mut_ptr().cast(), 4) };
        if n == 4 {
            return Some(i32::from_ne_bytes(buf));
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The one thread that clones commands.
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: std::sync::OnceLock<Mutex<mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (send, jobs) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("mur-spawner".into())
            .spawn(move || {
                // No signal handler of mur's may run in a child that shares its memory:
                // the thread blocks them all, and the child resets them before unblocking.
                // SAFETY: sigfillset and pthread_sigmask on a local set.
                unsafe {
                    let mut all: libc::sigset_t = std::mem::zeroed();
                    libc::sigfillset(&raw mut all);
                    libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, std::ptr::null_mut());
                }
                for job in jobs {
                    job();
                }
            });
        if let Err(e) = started {
            eprintln!("[murmur] could not start the shell spawner thread: {e}");
        }
        Mutex::new(send)
    })
}

/// Runs on the spawner thread: clones the child and waits (CLONE_VFORK) until it has
/// exec'd or exited; the parent's write ends then close.
fn clone_child(mut plan: Plan, flags: libc::c_int) -> io::Result<i32> {
    let top = plan.stack.as_mut_ptr_range().end;
    // 16-byte alignment, as the ABI wants at a call.
    let top = (top as usize & !15) as *mut libc::c_void;
    let flags = flags | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: the child runs `child_main` on its own stack in our memory and only makes
    // system calls on `plan` until it execs or exits; CLONE_VFORK keeps this thread (and
    // so `plan`) waiting until then.
    let pid = unsafe { libc::clone(child_main, top, flags, (&raw const plan).cast_mut().cast()) };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // The launch was told these namespaces could be made: the next one asks again.
        super::kernel::forget_probe();
        return Err(e);
    }
    Ok(pid)
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan `clone_child` passed, alive until this child execs.
    let plan = unsafe { &*(arg as *const Plan) };
    let errno = match unsafe { run(plan) } {
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        Ok(()) => libc::EIO,
    };
    let bytes = errno.to_ne_bytes();
    // SAFETY: write and _exit; the descriptor is the child's copy of the report pipe.
    unsafe {
        libc::write(plan.report.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// The child's steps up to exec, which does not return on success.
unsafe fn run(plan: &Plan) -> io::Result<()> {
    // SAFETY: system calls on descriptors and C strings the plan owns.
    unsafe {
        reset_signals();
        for (from, to) in [
            (plan.stdin.as_raw_fd(), 0),
            (plan.stdout.as_raw_fd(), 1),
            (plan.stderr.as_raw_fd(), 2),
        ] {
            check(libc::dup2(from, to))?;
        }
        check(libc::chdir(plan.cwd.as_ptr()))?;
        // A group of its own, as for every command: one killpg reaches all of it.
        check(libc::setpgid(0, 0))?;
        (plan.enter)()?;
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
    }
    Err(io::Error::last_os_error())
}

/// Every handler back to its default (an ignored SIGPIPE too), then nothing blocked.
unsafe fn reset_signals() {
    // SAFETY: sigaction with a zeroed (SIG_DFL) action, then an empty mask.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..libc::SIGRTMAX() {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &raw const default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const none, std::ptr::null_mut());
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A confined command's process, waited for through its pidfd. Dropped unreaped, it is
/// killed with its process group (and with it, its namespace) and reaped on a thread of
/// its own.
pub struct Process {
    pid: i32,
    pidfd: Option<AsyncFd<OwnedFd>>,
}

impl Process {
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Asks the command to stop with `SIGINT` (a harness ends its turn). Process 1 of
    /// a PID namespace gets it only if it handles it; dropping the process kills it
    /// either way.
    pub fn interrupt(&self) {
        if let Some(pidfd) = &self.pidfd {
            send_signal(pidfd.get_ref(), libc::SIGINT);
        }
    }

    /// Waits for the command to end.
    ///
    /// # Errors
    ///
    /// The pidfd could not be polled or waited on.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::other("the command was already waited for"));
        };
        loop {
            let mut ready = pidfd.readable().await?;
            if let Some(status) = try_wait(pidfd.get_ref())? {
                drop(ready);
                self.pidfd = None;
                return Ok(status);
            }
            ready.clear_ready();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            let pidfd = pidfd.into_inner();
            // Without a PID namespace (`advisory`) the leader's death does not take its
            // children along; its group does. The leader is not reaped yet, so its pid
            // still names this group and no other.
            // SAFETY: killpg takes plain integers; an empty group yields ESRCH.
            unsafe {
                libc::killpg(self.pid, libc::SIGKILL);
            }
            send_kill(&pidfd);
            std::thread::spawn(move || reap(&pidfd));
        }
    }
}

fn try_wait(pidfd: &OwnedFd) -> io::Result<Option<ExitStatus>> {
    // SAFETY: waitid fills the zeroed siginfo it is given.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG;
    let rc = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &raw mut info,
            flags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful waitid, si_pid and si_status are set (0 if nothing ended).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    let raw = if info.si_code == libc::CLD_EXITED {
        (status & 0xff) << 8
    } else {
        status & 0x7f
    };
    Ok(Some(ExitStatus::from_raw(raw)))
}

fn send_kill(pidfd: &OwnedFd) {
    send_signal(pidfd, libc::SIGKILL);
}

fn send_signal(pidfd: &OwnedFd, signal: libc::c_int) {
    // SAFETY: pidfd_send_signal on our own pidfd, with no siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        );
    }
}

/// Blocks until the child has ended; for a child that is already dying.
fn reap(pidfd: &OwnedFd) {
    // SAFETY: waitid fills the zeroed siginfo it is given.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &raw mut info,
            libc::WEXITED,
        );
    }
}

fn kill_and_reap(pid: i32) {
    // SAFETY: kill and waitpid on our own unreaped child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &raw mut status, 0);
    }
}
