"""The real S3 server for the tiered-storage tests (lookupd.tools.s3local: SeaweedFS's `weed mini`).

Use the session fixture `s3_server` (import it into the test module) and `s3_server.bucket()` for a fresh
bucket per test. It sets AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION in os.environ while it runs,
so that lookupd (and daemons started as subprocesses) find the credentials through the standard AWS chain,
and stops the server by its process id at the end of the session.
"""

from __future__ import annotations

import pytest

from lookupd.tools.s3local import running_server


@pytest.fixture(scope="session")
def s3_server():
    with running_server() as server:
        yield server
