"""Run the bash tools component from Python: python3 example.py guest_tools.wasm"""

import sys
import time

from dsh_host import LocalExecutor, ToolHost

host = ToolHost(sys.argv[1], LocalExecutor(grace_ms=500))
session = host.open_session(cwd="/tmp")

result = session.call("bash", {"command": "echo hello from bash", "description": "Say hello from bash"})
print(result.text, end="")  # result.is_error is False

started = session.call(
    "bash",
    {"command": "sleep 0.2; echo done", "description": "Finish in the background", "run_in_background": True},
)
print(started.text)  # started background task bash-1

notices = []
while not notices:  # when the task ends, the component injects a notice into the session
    time.sleep(0.05)
    notices = session.take_notices()
print(notices[0].text)

print(session.call("bash_output", {"task_id": "bash-1"}).text)
host.shutdown()
