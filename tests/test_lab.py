"""The main job: `./course lab` serves the course, and its kernel can import and use hooklab."""
import json
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import websocket

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.fixture
def lab_server(tmp_path):
    port = free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(
        [str(ROOT / "course"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.port_retries=0"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def execute(port, kernel_id, code):
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?token={TOKEN}", timeout=60)
    try:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": uuid.uuid4().hex, "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False}}))
        stdout, status, stdout_done = [], None, False
        while status is None or not stdout_done:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                stdout.append(msg["content"]["text"])
            elif kind == "error":
                pytest.fail(f"cell raised {msg['content']['ename']}: {msg['content']['evalue']}")
            elif kind == "execute_reply":
                status = msg["content"]["status"]
            stdout_done = kind == "status" and msg["content"]["execution_state"] == "idle"
        return status, "".join(stdout)
    finally:
        ws.close()


def test_lab_serves_the_course_and_its_kernel_uses_hooklab(lab_server):
    port = lab_server
    status, page = api(port, "/lab")
    assert status == 200 and b"JupyterLab" in page
    _, listing = api(port, "/api/contents")
    served = {item["name"] for item in listing["content"]}
    assert {p.name for p in (ROOT / "notebooks").glob("*.ipynb")} <= served
    _, specs = api(port, "/api/kernelspecs")
    assert "hooklab" in specs["kernelspecs"]

    _, kernel = api(port, "/api/kernels", "POST", {"name": "hooklab"})
    try:
        status, out = execute(port, kernel["id"], (
            "import torch, hooklab\n"
            "m = torch.nn.Linear(2, 2)\n"
            "scope = hooklab.named_scope('lab-test')\n"
            "scope.add(m.register_forward_hook(lambda *a: None))\n"
            "print(len(hooklab.hook_inventory(m)), hooklab.hook_inventory(m)[0].kind)\n"
            "scope.remove(); print(hooklab.hook_inventory(m))\n"))
    finally:
        api(port, f"/api/kernels/{kernel['id']}", "DELETE")
    assert status == "ok"
    assert out.splitlines() == ["1 forward", "[]"]


def test_second_run_installs_nothing():
    result = subprocess.run([str(ROOT / "course"), "lab", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()[0].isdigit()  # jupyterlab printed its version
    assert "[course]" not in result.stderr, result.stderr  # no install step ran
