"""The main job: `./course lab` serves the learner's working copies of the course (never the tracked notebooks), and
its kernel, started in the copies' folder, can import and use hooklab."""
import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from jupyter_client import BlockingKernelClient

from process_group import start_process_group, stop_process_group

# `./course lab` always serves the locked .venv, so under ./course rerun it would test the pin, not the torch
from tools.classroom import workcopies
from tools.notebooks import kernelspec

# being checked (and would sync .venv as a side effect).
pytestmark = pytest.mark.skipif(os.environ.get("COURSE_RERUN") == "1",
                                reason="COURSE_RERUN=1: ./course lab serves the locked .venv, not this torch")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hooklab-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path, method="GET", body=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
        is_json = response.headers.get_content_type() == "application/json"
        return response.status, (json.loads(raw) if raw and is_json else raw)


@dataclass
class LabServer:
    port: int
    runtime_dir: Path
    log: Path
    work: Path          # COURSE_WORK_DIR: this test's own working copies, not the checkout's work/

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@pytest.fixture
def lab_server(tmp_path):
    port = free_port()
    runtime_dir = tmp_path / "runtime"
    work = tmp_path / "work"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime_dir), COURSE_WORK_DIR=str(work))
    log = open(tmp_path / "lab.log", "w+")
    proc = start_process_group(
        [str(ROOT / "course"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.port_retries=0"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                api(port, "/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"JupyterLab did not start:\n{log.read()[-3000:]}")
                time.sleep(0.5)
        yield LabServer(port, runtime_dir, tmp_path / "lab.log", work)
    finally:
        # the server runs in its own session: end it and its kernels together
        stop_process_group(proc)
        log.close()


def kernel_client(runtime_dir: Path, kernel_id: str, deadline_s: float = 60.0) -> BlockingKernelClient:
    """A maintained client (jupyter_client) connected to the kernel the server started, via its connection file."""
    connection_file = runtime_dir / f"kernel-{kernel_id}.json"
    deadline = time.monotonic() + deadline_s
    while not connection_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server wrote no connection file {connection_file.name} "
                               f"within {deadline_s:.0f} s")
        time.sleep(0.2)
    # The connection file is written before the kernel is up. wait_for_ready() calls a kernel "dead" when its
    # heartbeat has not answered within 1 s, which a kernel still importing (on a loaded machine) cannot do:
    # retry with a fresh client until the deadline.
    while True:
        client = BlockingKernelClient(connection_file=str(connection_file))
        client.load_connection_file()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=max(1.0, deadline - time.monotonic()))
            return client
        except RuntimeError as error:
            client.stop_channels()
            if time.monotonic() > deadline:
                raise TimeoutError(f"kernel {kernel_id} did not answer kernel_info within {deadline_s:.0f} s "
                                   f"({error})") from error
            time.sleep(1)


def execute(client: BlockingKernelClient, code: str, deadline_s: float = 120.0):
    """Run `code` in the kernel; return (reply status, stdout).

    `execute_interactive` waits for this request's iopub `status: idle` and its shell `execute_reply`,
    each on its own channel, so the order in which they arrive cannot matter; one deadline bounds both.
    """
    stdout, errors = [], []

    def on_output(msg):
        kind = msg["header"]["msg_type"]
        if kind == "stream" and msg["content"]["name"] == "stdout":
            stdout.append(msg["content"]["text"])
        elif kind == "error":
            errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

    try:
        reply = client.execute_interactive(code, timeout=deadline_s, output_hook=on_output, allow_stdin=False)
    except TimeoutError as error:
        raise TimeoutError(f"no status: idle and execute_reply within {deadline_s:.0f} s "
                           f"for the code:\n{code}") from error
    if errors:
        pytest.fail("cell raised " + "; ".join(errors))
    return reply["content"]["status"], "".join(stdout)


def test_lab_serves_working_copies_and_its_kernel_uses_hooklab(lab_server):
    port = lab_server.port
    status, page = api(port, "/lab")
    assert status == 200 and b"JupyterLab" in page
    _, listing = api(port, "/api/contents")
    served = {item["name"] for item in listing["content"]}
    tracked = {p.name: p.read_bytes() for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    copies = lab_server.work / "zh-en"
    assert served == set(tracked), "the lab must serve exactly the working copies of the notebooks"
    fresh = {name: workcopies.fresh_copy("both", ROOT / "notebooks" / name) for name in tracked}
    assert {p.name: p.read_bytes() for p in copies.glob("*.ipynb")} == fresh   # fresh copies (the kernel's info)
    _, specs = api(port, "/api/kernelspecs")
    assert kernelspec.NAME in specs["kernelspecs"]

    # a notebook's kernel, as JupyterLab starts it when the learner opens 00: it runs in the copies' folder
    _, session = api(port, "/api/sessions", "POST", {"path": "00_introduction.ipynb", "type": "notebook",
                                                      "name": "", "kernel": {"name": kernelspec.NAME}})
    kernel = session["kernel"]
    client = None
    try:
        client = kernel_client(lab_server.runtime_dir, kernel["id"])
        status, out = execute(client, (
            "import os; print(os.getcwd())\n"
            "import torch, hooklab\n"
            "m = torch.nn.Linear(2, 2)\n"
            "scope = hooklab.named_scope('lab-test')\n"
            "scope.add(m.register_forward_hook(lambda *a: None))\n"
            "print(len(hooklab.hook_inventory(m)), hooklab.hook_inventory(m)[0].kind)\n"
            "scope.remove(); print(hooklab.hook_inventory(m))\n"))
        connect_a_browser_websocket(lab_server, kernel["id"])
    except TimeoutError as error:
        pytest.fail(f"{error}\n--- server log (tail) ---\n{lab_server.log_tail()}")
    finally:
        if client is not None:
            client.stop_channels()
        api(port, f"/api/sessions/{session['id']}", "DELETE")
    assert status == "ok"
    assert out.splitlines() == [str(copies), "1 forward", "[]"]
    # the learner saves their work: it lands in the copy; the tracked notebook is untouched
    _, model = api(port, "/api/contents/00_introduction.ipynb?content=1")
    model["content"]["cells"].append({"cell_type": "code", "metadata": {}, "source": "print('mine')",
                                      "execution_count": None, "outputs": []})
    api(port, "/api/contents/00_introduction.ipynb", "PUT", {"type": "notebook", "format": "json",
                                                            "content": model["content"]})
    assert "print('mine')" in (copies / "00_introduction.ipynb").read_text(encoding="utf-8")
    assert (ROOT / "notebooks" / "00_introduction.ipynb").read_bytes() == tracked["00_introduction.ipynb"]
    # the terminal stays quiet (tools/classroom/lab.py): no jupyter_lsp list of 19 servers the course does not install, no
    # tornado warning about jupyter_server's websocket ping settings (it came when a websocket connected)
    log = lab_server.log.read_text(errors="replace")
    assert "Skipped non-installed server" not in log and "websocket_ping_timeout" not in log, log[-3000:]


def connect_a_browser_websocket(lab_server: LabServer, kernel_id: str) -> None:
    """Open the kernel's websocket as JupyterLab in a browser does, until the server logs the connection."""
    import asyncio

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    async def connect():
        url = f"ws://127.0.0.1:{lab_server.port}/api/kernels/{kernel_id}/channels?session_id=lab-test"
        connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {TOKEN}"},
                                                         connect_timeout=30))
        deadline = time.monotonic() + 30
        while f"Connecting to kernel {kernel_id}" not in lab_server.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, lab_server.log_tail()
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # the ping warning came right after the connection
        connection.close()

    asyncio.run(connect())


def test_second_run_installs_nothing():
    result = subprocess.run([str(ROOT / "course"), "lab", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()[0].isdigit()  # jupyterlab printed its version
    assert "[course]" not in result.stderr, result.stderr  # no install step ran
