"""The tests' filesystem senders never hand a worker half a message (``whole_messages.py``).

A second process takes each message off the folder the way kombu's filesystem consumer
does (move the file out, then read it), in a tight loop, while this process writes
messages. With kombu's own ``_put`` that reader gets empty files (kombu issue #1551, the
serial CI run's lost ping): run against ``filesystem://``, this test failed 2 times in 3
on this machine. With the senders' whole-file ``_put`` it must get every message whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from kombu import Connection
from whole_messages import URL

MESSAGES = 10_000

READER = textwrap.dedent(
    """
    import json, os, sys, time

    folder, done, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seen, empty, deadline = [], 0, time.monotonic() + 60
    while len(seen) + empty < expected and time.monotonic() < deadline:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".q.msg"):
                continue
            os.rename(os.path.join(folder, name), os.path.join(done, name))
            with open(os.path.join(done, name), "rb") as f:
                data = f.read()
            if data:
                seen.append(json.loads(data)["body"]["n"])
            else:
                empty += 1
    print(json.dumps({"seen": seen, "empty": empty}))
    """
)


def deliver(url: str, tmp: Path) -> dict[str, object]:
    folder, done = tmp / "in", tmp / "done"
    folder.mkdir()
    done.mkdir()
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(folder), str(done), str(MESSAGES)],
        stdout=subprocess.PIPE,
        text=True,
    )
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    with Connection(url, transport_options={**options, "control_folder": str(tmp)}) as conn:
        channel = conn.default_channel
        for n in range(MESSAGES):
            channel._put("q", {"body": {"n": n}})
    out, _ = reader.communicate(timeout=90)
    result: dict[str, object] = json.loads(out)
    result["left"] = sorted(p.name for p in folder.iterdir())
    return result


def test_a_reader_polling_the_folder_gets_every_message_whole(tmp_path: Path) -> None:
    result = deliver(URL, tmp_path)
    assert result["empty"] == 0
    assert sorted(result["seen"]) == list(range(MESSAGES))  # type: ignore[call-overload]
    assert result["left"] == []  # no partial file left behind
