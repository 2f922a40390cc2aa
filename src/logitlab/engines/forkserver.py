"""Workers forked from a process that has already imported an engine's libraries (a fork server).

A supervised engine's worker (:mod:`logitlab.engines.supervised_worker`) starts a new Python and imports the
engine's libraries before it loads the model: for the ``hf`` engine, PyTorch and transformers, about 4.5 s on a
2-core machine against 0.9 s for the model itself. An ``ab`` starts two such workers, and one more after each
crash. A :class:`ForkServer` is a process that imports an adapter's :attr:`~logitlab.engines.base.Engine.PRELOAD`
modules once and then forks one worker per request, which skips the imports.

What a forked worker shares with a worker started afresh, and how:

- **The environment and the current folder.** A server is started with the worker's environment in the
  caller's current folder and serves only workers whose environment and folder are the same
  (:func:`server_key`), but for :data:`UNREAD_AT_IMPORT`, variables no library reads while it is imported (the
  child is given its exact environment and folder before the worker runs). A variant's environment knobs
  (``TORCH_*``, ``OMP_NUM_THREADS``, ...) therefore reach the imports as they reach a new process's: another
  environment is another server, never a knob set after the imports.
- **The code.** Before each fork the server checks that no file of a module it imported changed on disk since
  (a library reinstalled, a source tree checked out, as ``bisect`` does between builds) and that CUDA is not
  initialised in it; otherwise it answers ``refused``, takes no more requests, and the worker is started as a
  new process (:class:`~logitlab.engines.supervised.SupervisedEngine`), as is a worker whose server ended before
  it forked it (a crash while importing then shows with its evidence, in the new process).
- **Its streams, session and exit status.** The worker's standard input, answer pipe and standard error are
  passed to the server over a Unix socket (``SCM_RIGHTS``); the child calls ``setsid`` (a process group of
  its own, as ``start_new_session``) before its pid is reported; the server reaps it and writes its exit status
  (``os.waitstatus_to_exitcode``: negative for a signal, as :class:`subprocess.Popen`) into a status pipe that
  only the server holds. :class:`ForkedWorker` reads that pipe: ``pid``, ``poll`` and ``wait`` as
  ``subprocess.Popen``'s.
- **Random state.** Python's ``random`` is reseeded at fork by the standard library; NumPy's global generator
  is reseeded from the OS in the child, as a new process would seed it.

The server imports only what :attr:`PRELOAD` names and runs nothing else: no thread of its own, no engine, no
OpenMP region (a fork after one leaves the child's thread pool unusable). What imports create — NumPy's
OpenBLAS threads — is known to survive ``fork`` (OpenBLAS re-creates its pool in the child through
``pthread_atfork``), and the tests check a forked worker's logits are bit-identical to a new process's.

Why not :mod:`multiprocessing.forkserver`: it keeps one server per process, started with the environment of the
first use (a knob set later would go unseen), gives the child no standard input, and runs pickled targets.

``LOGITLAB_FORKSERVER=0`` turns the servers off (every worker a new process). A process keeps at most
:data:`MAX_SERVERS` servers; a server closed (this process ended, or it was the least recently used) takes no
more requests and exits once its last worker has ended, telling their exit statuses until then. A server killed
from outside cannot tell them: its workers run on, and their exit reads as -9 (``-SIGKILL``).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

__all__ = ["ForkServer", "ForkedWorker", "MAX_SERVERS", "UNREAD_AT_IMPORT", "fork_worker", "server_key"]

#: Servers one process keeps (each holds the preloaded libraries: about 0.4 GB for PyTorch and transformers,
#: shared with its workers page by page); the least recently used one is closed when another is needed.
MAX_SERVERS = 2
#: Environment variables that differ between otherwise equal workers and that no library reads while it is
#: imported, so two environments that differ only in them share a server: pytest's name of the running test.
UNREAD_AT_IMPORT = frozenset({"PYTEST_CURRENT_TEST"})
_ENABLED_VAR = "LOGITLAB_FORKSERVER"
#: The largest request (its arguments and environment as JSON) a server reads, bytes: one datagram.
MAX_REQUEST = 1 << 17


def server_key(env: dict[str, str], preload: Sequence[str]) -> tuple:
    """What two workers must share to be forked from one server: the modules to import, the environment (but
    :data:`UNREAD_AT_IMPORT`), the current folder (relative paths, ``sys.path[0]``) and this interpreter."""
    return (sys.executable, os.getcwd(), tuple(preload),
            tuple(sorted((k, v) for k, v in env.items() if k not in UNREAD_AT_IMPORT)))


class ForkedWorker:
    """A worker forked by a :class:`ForkServer`, seen as :class:`subprocess.Popen` sees its child: ``pid``,
    ``stdin`` (text, this process's end of the worker's standard input), ``returncode``, :meth:`poll`,
    :meth:`wait` (raises :class:`subprocess.TimeoutExpired`).

    The status pipe carries the worker's pid (written once it leads its own session) and, when the server has
    reaped it, its exit code; or ``refused REASON`` in place of both (not forked: :meth:`never_started`). An
    end of the pipe with no exit code (the server was killed from outside) reads as the worker's end once the
    pid is gone (or a zombie), exit code -9 (``-SIGKILL``): its worker may have gone the same way.
    """

    def __init__(self, status_fd: int, stdin: Any, args: Sequence[str], server: subprocess.Popen | None = None):
        self.args = list(args)
        self.server = server
        self.stdin = stdin
        self.returncode: int | None = None
        self._status = os.fdopen(status_fd, "rb", buffering=0)
        self._pending = b""
        self._pid: int | None = None
        self._orphan = False  # the server ended before it told the worker's exit status
        self.refused: str | None = None

    @property
    def pid(self) -> int:
        """The worker's pid (waits for the server to fork it: the first worker of a new server waits for the
        server's imports).

        Raises:
            ProcessLookupError: the server ended or refused without forking it (:meth:`never_started`).
        """
        while self._pid is None and self.returncode is None:
            if not self._read_line(None):
                break
        if self._pid is None:
            raise ProcessLookupError("the fork server ended before it started the worker")
        return self._pid

    def _read_line(self, timeout: float | None) -> bool:
        """Read one line of the status pipe within ``timeout`` (None: no limit): True when one was read (or, the
        server gone, the worker's end was seen)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            if self._orphan:
                return self._wait_orphan(deadline)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._status], [], [], left)
            if not ready:
                return False
            chunk = os.read(self._status.fileno(), 256)
            if not chunk:  # the server is gone: the worker itself is watched (none, if it never said its pid)
                self._orphan = True
                if self._pid is None:
                    self.returncode = -signal.SIGKILL
                    return True
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        what, _, number = line.decode().partition(" ")
        if what == "pid":
            self._pid = int(number)
        elif what == "exit":  # (before any pid: the child died before it could say it, its setsid failed)
            self.returncode = int(number)
        else:  # "refused": not forked (the server's libraries changed on disk, or fork failed); it has ended
            self.returncode = -signal.SIGKILL
            self.refused = number
        return True

    def never_started(self, timeout: float = 10.0) -> bool:
        """Whether the server ended or refused without forking the worker. Asked once the worker's answer pipe
        ended: the server has then forked it (its pid or exit code is on the way) or ended or refused (it says so,
        or its end closes the pipe), so this waits at most ``timeout`` seconds for that line. Such a worker is
        started as a new process instead."""
        deadline = time.monotonic() + timeout
        while self._pid is None and self.returncode is None:
            if not self._read_line(max(0.0, deadline - time.monotonic())):
                break
        return self._pid is None and self.returncode is not None

    def killpg(self) -> None:
        """SIGKILL the worker's process group; before its pid is known (its server still importing, or hung),
        the server itself, which ends the worker's start (nothing is waited for here)."""
        if self.poll() is not None:  # reaped: its pid may be another process's by now
            return
        if self._pid is not None:
            os.killpg(self._pid, signal.SIGKILL)
        elif self.server is not None:
            self.server.kill()

    def _wait_orphan(self, deadline: float | None) -> bool:
        """Wait until the worker whose server is gone is gone or a zombie (its new parent may never reap it), or
        until ``deadline``; True when it ended (read as -SIGKILL: its status is lost)."""
        while True:
            try:
                with open(f"/proc/{self._pid}/stat", "rb") as f:
                    ended = f.read().rpartition(b")")[2].split()[0] == b"Z"
            except OSError:
                ended = True
            if ended:
                self.returncode = -signal.SIGKILL
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def poll(self) -> int | None:
        """The exit code when the worker has ended, else None (does not wait)."""
        while self.returncode is None and self._read_line(0):
            pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, waiting at most ``timeout`` seconds (None: until the worker ends).

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if not self._read_line(None if deadline is None else max(0.0, deadline - time.monotonic())):
                if self.returncode is None and (deadline is None or time.monotonic() >= deadline):
                    raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def __del__(self) -> None:
        try:
            self._status.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ForkServer:
    """A process with ``preload`` imported under ``env`` that forks workers (:func:`fork_worker`).

    It starts importing at once; a request sent meanwhile waits in its socket.
    """

    def __init__(self, env: dict[str, str], preload: Sequence[str]):
        self.preload = tuple(preload)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logitlab.engines.forkserver", str(theirs.fileno()), *self.preload],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True, env=env)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def fork(self, argv: Sequence[str], env: dict[str, str], stdin_fd: int, answers_fd: int,
             stderr_fd: int) -> int:
        """Ask for one worker: ``python -m logitlab.engines.supervised_worker`` with ``argv``, its standard input
        ``stdin_fd``, ``answers_fd`` (``argv[0]`` is its number here; the child is given its own number for it),
        standard error ``stderr_fd``, environment ``env``. Returns the read end of its status pipe.

        Raises:
            OSError: the server is gone, or the request is over :data:`MAX_REQUEST` bytes.
        """
        status_r, status_w = os.pipe()
        try:
            request = json.dumps({"argv": list(argv), "env": env, "cwd": os.getcwd()}).encode()
            if len(request) > MAX_REQUEST:
                raise OSError(f"a fork request of {len(request)} bytes (over {MAX_REQUEST})")
            with self.lock:
                socket.send_fds(self.sock, [request], [stdin_fd, answers_fd, stderr_fd, status_w])
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        return status_r

    def close(self) -> None:
        """Close the socket: the server takes no more requests and exits once its workers have ended (it reports
        their exit statuses until then). Nothing is waited for here."""
        with self.lock:
            self.sock.close()


_SERVERS: dict[tuple, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def enabled() -> bool:
    """Whether workers are forked from servers (``LOGITLAB_FORKSERVER`` is not ``0``) on this platform."""
    return os.environ.get(_ENABLED_VAR, "1") != "0" and hasattr(os, "fork") and hasattr(socket, "send_fds")


def fork_worker(preload: Sequence[str], argv: Sequence[str], env: dict[str, str], stderr_fd: int,
                answers_fd: int) -> ForkedWorker:
    """A supervised worker forked from the server for ``preload`` and ``env`` (started on first use).

    Returns:
        The worker, as :class:`subprocess.Popen` would give it (``stdin`` text, line-buffered).

    Raises:
        OSError: the server could not be reached (the caller starts a new process instead).
    """
    key = server_key(env, preload)
    for attempt in (1, 2):
        server = _server(key, env, preload)
        stdin_r, stdin_w = os.pipe()
        try:
            status = server.fork(argv, env, stdin_r, answers_fd, stderr_fd)
        except OSError:  # the server stopped taking requests (ended, or refused one): another server, once
            os.close(stdin_w)
            with _SERVERS_LOCK:
                if _SERVERS.get(key) is server:
                    del _SERVERS[key]
            server.close()
            if attempt == 2:
                raise
            continue
        except BaseException:
            os.close(stdin_w)
            raise
        finally:
            os.close(stdin_r)
        return ForkedWorker(status, os.fdopen(stdin_w, "w", buffering=1), ["forkserver", *argv], server.proc)
    raise AssertionError("unreachable")


def _server(key: tuple, env: dict[str, str], preload: Sequence[str]) -> ForkServer:
    """The live server for ``key``, started if there is none (the least recently used one closed beyond
    :data:`MAX_SERVERS`)."""
    with _SERVERS_LOCK:
        server = _SERVERS.pop(key, None)
        if server is not None and server.proc.poll() is not None:  # ended (killed)
            server.close()
            server = None
        if server is None:
            while len(_SERVERS) >= MAX_SERVERS:
                _SERVERS.pop(next(iter(_SERVERS))).close()
            server = ForkServer(env, preload)
        _SERVERS[key] = server  # the most recently used last
        return server


@atexit.register
def close_servers() -> None:
    """Close every server of this process (at interpreter exit; also for tests)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        try:
            server.close()
        except OSError:
            pass


# -- the server side ---------------------------------------------------------------------------------------
def _module_files() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of the file of every module imported here: what a worker forked now would run."""
    files = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path:
            try:
                st = os.stat(path)
            except OSError:
                continue
            files[path] = (st.st_mtime_ns, st.st_size)
    return files


def _why_not_fork(imported: dict[str, tuple[int, int]]) -> str | None:
    """Why a worker must not be forked from this server now (None: it may): a module file changed on disk since
    it was imported (a library reinstalled, a source tree checked out: a new process would run the new code), or
    CUDA initialised here (a forked child cannot use it)."""
    for path, seen in imported.items():
        try:
            st = os.stat(path)
        except OSError:
            return f"changed-on-disk:{path}"
        if (st.st_mtime_ns, st.st_size) != seen:
            return f"changed-on-disk:{path}"
    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "cuda", None), "is_initialized", lambda: False)():
        return "cuda-initialised"
    return None


def _serve(sock: socket.socket) -> None:
    """Fork a worker per request until the socket ends, then go on reaping until the last worker has ended;
    each worker's exit code goes into its status pipe. A request that must not be forked (:func:`_why_not_fork`)
    is answered ``refused REASON`` and the server ends (its next user starts a new one)."""
    imported = _module_files()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, int] = {}  # pid -> status pipe
    listening = True
    while listening or children:
        ready, _, _ = select.select([sock, wake_r] if listening else [wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
            _reap(children)
        if not listening or sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
        if not data or len(fds) != 4:
            listening = False
            sock.close()
            for fd in fds:
                os.close(fd)
            continue
        request = json.loads(data)
        stdin_fd, answers_fd, stderr_fd, status_fd = fds
        why = _why_not_fork(imported)
        pid = None
        if why is None:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # nothing printed here is handed down to the child's streams
            try:
                pid = os.fork()
            except OSError as exc:
                why = f"fork-failed:{exc.errno}"
        if pid == 0:
            signal.set_wakeup_fd(-1)
            sock.close()
            for fd in (wake_r, wake_w, *children.values()):
                os.close(fd)
            _child(request, stdin_fd, answers_fd, stderr_fd, status_fd)  # never returns
        if pid is None:  # said before the worker's answer pipe ends here: the parent asks once it ended
            os.write(status_fd, f"refused {why}\n".encode())
            os.close(status_fd)
        for fd in (stdin_fd, answers_fd, stderr_fd):
            os.close(fd)
        if pid is None:
            if not why.startswith("fork-failed"):  # a changed library or CUDA: this server is done (the requests
                listening = False                  # queued behind this one end with the socket: never started)
                sock.close()
            continue
        children[pid] = status_fd
        _reap(children)


def _reap(children: dict[int, int]) -> None:
    """Reap every ended worker of ``children`` (pid -> status pipe) and write ``exit CODE`` into its pipe
    (``os.waitstatus_to_exitcode``: negative for a signal); the pipe is then closed."""
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
            code = os.waitstatus_to_exitcode(status) if done else None
        except ChildProcessError:  # reaped elsewhere: its status is lost
            done, code = pid, -signal.SIGKILL
        if done:
            fd = children.pop(pid)
            try:
                os.write(fd, f"exit {code}\n".encode())
            except OSError:  # the parent closed its end: nobody waits for this status
                pass
            os.close(fd)


def _child(request: dict[str, Any], stdin_fd: int, answers_fd: int, stderr_fd: int, status_fd: int) -> None:
    """The forked worker: its own session, its streams and environment and current folder as asked, its pid
    said, then :func:`logitlab.engines.supervised_worker.main`; exits with its status (never returns)."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        argv = [str(answers_fd), *request["argv"][1:]]  # the worker writes its answers where they arrived
        os.dup2(stdin_fd, 0)
        os.dup2(stderr_fd, 2)
        for fd in (stdin_fd, stderr_fd):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        os.write(status_fd, f"pid {os.getpid()}\n".encode())
        os.close(status_fd)
        sys.argv = ["logitlab.engines.supervised_worker", *argv]
        from logitlab.engines.supervised_worker import main

        code = main(argv)
        import atexit as _atexit

        _atexit._run_exitfuncs()  # as the interpreter would at a worker's exit
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's end, told on its standard error
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def main(args: list[str]) -> int:
    """``python -m logitlab.engines.forkserver FD MODULE...``: import the modules, then serve the socket FD."""
    import importlib

    sock = socket.socket(fileno=int(args[0]))
    for name in args[1:]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not importable here: the worker's own import reports it
            pass
    _serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
