"""kombu's filesystem transport for the tests' senders, with each message visible only whole.

kombu's own ``Channel._put`` creates the message file under its final name, then locks and
writes it. A worker polling the folder can move and read the file in between: it reads an
empty payload, logs ``JSONDecodeError`` and the message is gone (kombu issue #1551, still
open in kombu 5.7). The serial CI run hit it once in 50 hard-limit rounds, as a ping that
never ran. Here a message is written under a name the consumer never matches (it takes only
``<stamp>.<queue>.msg``) and renamed into place, which is atomic on one filesystem.

Only the tests' senders need it: the workers under test read with kombu's own transport,
which is what they run with in the demo and the examples.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

#: The broker URL for a sender that writes whole messages (same folders, same format).
URL = "wholefiles://"


class Channel(filesystem.Channel):  # type: ignore[misc]
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        # A leading dot: the consumer's ``partition('.')`` never sees ``<queue>.msg`` in it.
        fd, partial = tempfile.mkstemp(prefix=".", suffix=".part", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(str_to_bytes(dumps(payload)))
        os.replace(partial, os.path.join(folder, name))


class Transport(filesystem.Transport):  # type: ignore[misc]
    Channel = Channel


TRANSPORT_ALIASES["wholefiles"] = f"{__name__}:Transport"
